"""`python -m baton.storage.pull [--after NAME] [--every S] URL DIR`: a prefix into a directory.

The init container of a federated SuperNode whose silo is on a bucket (`baton k8s --runs-dir
s3://...`, k8s.federated) runs it: Flower's ClientApp reads its examples from a local
directory, so the silo (`<run>/<stage>.federation/clients/<client>`, or a listed silo's own
`examples: s3://...`) is copied into the pod's emptyDir first. `--after` names the object the
writer puts last (an examples artifact's `schema.json`): until it exists nothing is copied, so
a half-written silo is never taken; it is itself copied last, so DIR holds it only once every
other file is in place (the SuperNode's own readiness test). Transient store errors are printed
and retried; a missing bucket or refused credentials exit 1 with their one-line message.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from baton.errors import StorageError
from baton.storage import location as L
from baton.storage import objects
from baton.storage.filesystems import check_bucket


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
    p.add_argument("--after", metavar="NAME", help="wait for URL/NAME (written last) first")
    p.add_argument("--every", type=float, default=5.0, help="seconds between checks")
    args = p.parse_args(argv)
    url = L.normalize(args.url, "URL")
    try:
        check_bucket(url, "pull")
    except StorageError as exc:
        print(exc, file=sys.stderr)
        return 1
    while True:
        try:
            if args.after is None or objects.exists(L.join(url, args.after)):
                n = pull(url, Path(args.dest), args.after)
                print(f"copied {n} files from {url} to {args.dest}", flush=True)
                return 0
            print(f"waiting for {L.join(url, args.after)}", flush=True)
        except StorageError as exc:  # the store out of reach for now: try again
            print(f"waiting: {exc}", flush=True)
        time.sleep(args.every)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
