"""`baton gc RUNS_URL [--older-than HOURS] [--dry-run]`: delete stored objects no run names.

A bucket runs directory stores the stages' files by content under
`<runs>/<pipeline>/.objects/` (pipeline.bucket_objects), so deleting a run's prefix never
breaks a later run that reused its outputs; the bytes stay until this command finds that no
commit of any run and no cache record names them. Objects younger than `--older-than` hours
(default 24) are kept whatever: a run in flight uploads its objects before the commit that
names them. RUNS_URL is a runs directory (every pipeline below it) or one pipeline's prefix.
A local runs directory needs no collection (its runs share files by hard links).
Exit 0 on success, 1 when the store fails, 2 on bad usage.
"""

from __future__ import annotations

import argparse

from baton.errors import EXIT_OK, UsageError


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="baton gc", description=__doc__.splitlines()[0])
    p.add_argument("runs", metavar="RUNS_URL",
                   help="s3://... or gs://... runs directory, or one pipeline's prefix in it")
    p.add_argument("--older-than", type=float, default=24.0, metavar="HOURS",
                   help="keep unnamed objects younger than this (default 24)")
    p.add_argument("--dry-run", action="store_true", help="list what would be deleted")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)  # bad usage: argparse's message, exit 2
    from baton.pipeline import bucket_objects as stored
    from baton.storage import location as L
    from baton.storage import objects
    from baton.storage.filesystems import check_bucket

    if args.older_than < 0:
        raise UsageError(f"--older-than must be >= 0 hours. Received: {args.older_than}")
    url = L.normalize(args.runs, "RUNS_URL")
    if not L.is_remote(url):
        raise UsageError(f"RUNS_URL must be a bucket URL (s3://..., gs://...); a local runs "
                         f"directory shares files by hard links and needs no gc. Received: "
                         f"{args.runs!r}")
    check_bucket(url, "RUNS_URL")
    roots = [url] if objects.list_children(url).get(stored.OBJECTS) else \
        list(stored.pipelines(url))
    for root in roots:
        doomed, kept, freed = stored.collect(root, args.older_than * 3600, args.dry_run)
        verb = "would delete" if args.dry_run else "deleted"
        print(f"{root}: {verb} {len(doomed)} object{'s' * (len(doomed) != 1)} "
              f"({freed} bytes) no run names; kept {kept}")
        if args.dry_run:
            for key in doomed:
                print(f"  {L.join(root, key)}")
    if not roots:
        print(f"{url}: no stored objects")
    return EXIT_OK
