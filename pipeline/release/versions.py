"""Versions in a serving base directory, changed only by atomic renames under a lock.

TF Serving (and `baton serve`) watch `<base>/` and load integer-named subdirectories; any other
name is ignored. Every change here keeps that view consistent at every instant:

- a push copies into `<base>/.tmp-push-<pid>-<n>` and renames it to `<base>/<version>`;
- old versions are retired by renaming them to `.retired-<version>` before deleting, so a
  half-deleted directory never carries an integer name;
- a rollback renames the versions newer than the target to `.rolledback-<version>`: the
  server unloads them, and the data stays for a roll-forward.

A lock file (`.baton.lock`, flock) serialises pushes and rollbacks; stale `.tmp-*` and
`.retired-*` directories left by a killed process are removed by the next locked operation.

A base on an object store (`s3://`, `gs://`) has no rename and no lock: `versions`,
`rolled_back` and `rollback` hand it to `bucket_versions`, which keeps the same view through
commit objects.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

from baton.errors import BatonError
from baton.pipeline.release import bucket_versions
from baton.storage.location import is_remote

LOCK = ".baton.lock"
TMP_PREFIX = ".tmp-"
RETIRED_PREFIX = ".retired-"
ROLLED_BACK_PREFIX = ".rolledback-"
_ROLLED = re.compile(r"^\.rolledback-(\d+)(?:-\d+)?$")


class VersionError(BatonError):
    """A version operation that cannot be done (unknown version, nothing to roll back to)."""


def versions(base: Path | str) -> list[int]:
    """Integer versions present in `base`, ascending (what a server would load)."""
    if is_remote(str(base)):
        return bucket_versions.versions(str(base))
    base = Path(base)
    if not base.is_dir():
        return []
    return sorted(int(p.name) for p in base.iterdir() if p.is_dir() and p.name.isdigit())


def rolled_back(base: Path | str) -> list[int]:
    """Versions that were rolled back (kept under non-integer names)."""
    if is_remote(str(base)):
        return bucket_versions.rolled_back(str(base))
    base = Path(base)
    if not base.is_dir():
        return []
    return sorted(int(m.group(1)) for p in base.iterdir() if (m := _ROLLED.match(p.name)))


def next_version(base: Path, proposed: int = 1) -> int:
    """`proposed`, raised above every version ever used in `base` (including rolled-back ones),
    so a number a server once loaded is never reused for different content."""
    used = versions(base) + rolled_back(base)
    return max([proposed] + [v + 1 for v in used])


@contextlib.contextmanager
def locked(base: Path) -> Iterator[None]:
    """Hold the base directory's lock, then sweep leftovers of killed operations."""
    base.mkdir(parents=True, exist_ok=True)
    with open(base / LOCK, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            sweep(base)
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def sweep(base: Path) -> list[str]:
    """Remove `.tmp-*` and `.retired-*` leftovers (call only while holding the lock)."""
    removed = []
    for p in base.iterdir():
        if p.name.startswith((TMP_PREFIX, RETIRED_PREFIX)) and p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p.name)
    return removed


def retire(base: Path, version: int) -> None:
    """Remove one version: rename away from its integer name first, then delete."""
    src = base / str(version)
    dst = base / f"{RETIRED_PREFIX}{version}"
    os.rename(src, dst)
    fsync_dir(base)
    shutil.rmtree(dst, ignore_errors=True)


def prune(base: Path, keep: int) -> list[int]:
    """Keep the newest `keep` versions; returns the versions removed."""
    old = versions(base)[:-keep] if keep > 0 else []
    for v in old:
        retire(base, v)
    return old


def rollback(base: Path | str, to: int | None = None) -> tuple[int, list[int]]:
    """Make `to` (default: the version before the newest) the newest version.

    Returns (the version now newest, the versions moved aside).
    """
    if is_remote(str(base)):
        return bucket_versions.rollback(str(base), to, VersionError)
    base = Path(base)
    with locked(base):
        to, newer = bucket_versions.rollback_plan(versions(base), to, base, VersionError)
        for v in sorted(newer, reverse=True):
            dst = base / f"{ROLLED_BACK_PREFIX}{v}"
            n = 1
            while dst.exists():
                dst = base / f"{ROLLED_BACK_PREFIX}{v}-{n}"
                n += 1
            os.rename(base / str(v), dst)
        fsync_dir(base)
        return to, newer


def fsync_dir(path: Path) -> None:
    """Make a rename durable (POSIX: fsync the directory that holds the entry)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
