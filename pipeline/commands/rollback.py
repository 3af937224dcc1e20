"""`baton rollback MODEL_DIR [--to VERSION]`: serve an earlier version again, atomically.

TF Serving (and `baton serve`) serve the highest integer version under MODEL_DIR. Rolling back
renames every version newer than the target to `.rolledback-<version>`, a name servers ignore,
so the target becomes the newest; nothing is deleted, and the rolled-back numbers are never
reused by later pushes. Without --to, the version before the newest is the target. MODEL_DIR
may be a bucket URL (`s3://...`, `gs://...`): there the newer versions are copied aside and
retired, commit first (pipeline.release.bucket_versions).
Exit 0 on success, 1 when there is nothing to roll back to, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from baton.errors import EXIT_OK, BatonError, UsageError


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="baton rollback", description=__doc__.splitlines()[0])
    p.add_argument("model_dir", help="the serving base directory or bucket URL (what "
                   "--model_base_path names)")
    p.add_argument("--to", type=int, metavar="VERSION", help="version to serve (default: the one "
                   "before the newest)")
    p.add_argument("--list", action="store_true", help="list versions and exit")
    return p


def main(argv: list[str]) -> int:
    from baton.pipeline.release import versions as V

    try:
        args = parser().parse_args(argv)
    except SystemExit as exc:  # argparse already printed the usage message
        return int(exc.code or EXIT_OK)
    from baton.storage import location
    from baton.storage.filesystems import check_bucket

    base: Path | str = location.normalize(args.model_dir, "MODEL_DIR")
    if location.is_remote(str(base)):
        check_bucket(str(base), "MODEL_DIR")
    elif not Path(base).is_dir():
        raise UsageError(f"MODEL_DIR {args.model_dir!r} is not a directory")
    else:
        base = Path(args.model_dir)
    if args.list:
        present, rolled = V.versions(base), V.rolled_back(base)
        print(f"{base}: versions {present or 'none'} (serving {present[-1] if present else '-'})"
              + (f"; rolled back: {rolled}" if rolled else ""))
        return EXIT_OK
    if args.to is not None and args.to < 1:
        raise UsageError(f"--to must be a positive version number. Received: {args.to}")
    try:
        target, moved = V.rollback(base, args.to)
    except V.VersionError as exc:
        raise BatonError(f"cannot roll back: {exc}") from None
    print(f"rolled back {base} to version {target}; moved aside: "
          + ", ".join(f"{v} -> .rolledback-{v}" for v in moved))
    sys.stdout.flush()
    return EXIT_OK
