"""`python -m baton.storage.wait [--every S] [--failed URL]... URL...`: wait until every object exists.

The init container of a Kubernetes pod whose inputs are on a bucket (k8s.object_storage) runs
it on the upstream stages' commit objects (`<run>/<stage>/lineage.json`): Kubernetes has no
"start after that Job", and a commit exists only once its stage's outputs are complete.
Transient store errors are printed and retried; a missing bucket or refused credentials exit 1
with their one-line message (waiting would never end), and so does an upstream stage's failure
record (`--failed`, `<run>/<stage>.failed.json`) once it exists.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time

from baton.errors import StorageError
from baton.storage import location as L
from baton.storage import objects
from baton.storage.filesystems import check_bucket


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m baton.storage.wait", description=__doc__)
    p.add_argument("urls", nargs="+")
    p.add_argument("--every", type=float, default=10.0, help="seconds between checks")
    p.add_argument("--failed", action="append", default=[], metavar="URL",
                   help="an upstream stage's failure record: when it exists, exit 1 at once")
    args = p.parse_args(argv)
    urls = [L.normalize(u, "URL") for u in args.urls]
    failures = [L.normalize(u, "--failed") for u in args.failed]
    try:
        for u in urls:
            check_bucket(u, "wait")
    except StorageError as exc:
        print(exc, file=sys.stderr)
        return 1
    while True:
        try:
            missing = [u for u in urls if not objects.exists(u)]
            # a commit wins over an earlier attempt's failure record
            failed = [u for u in failures if objects.exists(u)] if missing else []
        except StorageError as exc:  # the store out of reach for now: try again
            print(f"waiting: {exc}", flush=True)
            failed, missing = [], urls
        if failed:  # waiting would never end
            print(f"upstream stage failed for good: {failed[0]}", file=sys.stderr, flush=True)
            with contextlib.suppress(StorageError, FileNotFoundError):
                print(objects.read_bytes(failed[0]).decode(errors="replace"), file=sys.stderr,
                      flush=True)
            return 1
        if not missing:
            return 0
        print(f"waiting for inputs: {' '.join(missing)}", flush=True)
        time.sleep(args.every)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
