"""`python -m baton.storage.pull --after NAME [--every S] URL DIR`: a prefix into a directory.

The init container of a federated SuperNode whose silo is on a bucket (`baton k8s --runs-dir
s3://...`, k8s.federated) runs it: Flower's ClientApp reads its examples from a local
directory, so the silo (`<run>/<stage>.federation/clients/<client>`, or a listed silo's own
`examples: s3://...`) is copied into the pod's emptyDir first. `--after` names the object the
writer puts last (an examples artifact's `schema.json`): until it exists nothing is copied, so
a half-written silo is never taken; it is itself copied last, so DIR holds it only once every
other file is in place (the SuperNode's own readiness test). The wait is `baton.storage.wait`'s:
transient store errors are printed and retried; a missing bucket or refused credentials exit 1
with their one-line message; a failed copy exits 1 and the pod's restart policy runs it again.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from baton.errors import StorageError
from baton.storage import location as L
from baton.storage import objects, wait


def pull(url: str, dest: Path, last: str | None = None) -> int:
    """Copy every object below `url` to `dest/<rel>` (`last` after the rest); the file count."""
    tree = objects.list_tree(url)
    order = sorted(tree, key=lambda rel: (rel == last, rel))

    def one(rel: str) -> None:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".part")
        tmp.write_bytes(objects.read_bytes(L.join(url, rel)))
        tmp.replace(target)

    objects.each(one, [r for r in order if r != last])
    if last in tree:
        one(last)
    return len(tree)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m baton.storage.pull", description=__doc__)
    p.add_argument("url")
    p.add_argument("dest")
    p.add_argument("--after", metavar="NAME", required=True,
                   help="wait for URL/NAME, the object the writer puts last; copy it last")
    p.add_argument("--every", type=float, default=5.0, help="seconds between checks")
    args = p.parse_args(argv)
    url = L.normalize(args.url, "URL")
    # the bucket checked and URL/NAME waited for as every init container waits (storage.wait)
    rc = wait.main(["--every", str(args.every), L.join(url, args.after)])
    if rc:
        return rc
    try:
        n = pull(url, Path(args.dest), args.after)
    except StorageError as exc:  # the pod's restart policy runs it again
        print(f"pull: {exc}", file=sys.stderr)
        return 1
    print(f"copied {n} files from {url} to {args.dest}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
