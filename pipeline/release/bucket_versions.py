"""Versions in a serving base on an object store: push, prune and roll back without rename.

The same operations as `versions` and `pushing` on a local base directory, through the commit
protocol of `baton.storage.model_versions` (a pending marker first, the SavedModel's variables
before its graph, the commit object last): a version is complete when a server sees it, and
a push killed at any point leaves a pending version no Baton server loads, swept by a later
push. A rollback copies the newer versions to `.rolledback-<version>/` (server-side copies, a
name servers ignore) and then retires them, commit first, so the data stays for a
roll-forward as a local rename keeps it.

There is no lock on an object store: run one push or rollback per base at a time (a pipeline's
push stage does). A second push racing for the same version number is detected before its
commit (model_versions.write) and fails.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from baton.storage import model_versions as MV

RolledBack = MV.ROLLED_BACK


def versions(base: str) -> list[int]:
    """Committed versions, ascending (what a server loads)."""
    return MV.committed(base)


def rolled_back(base: str) -> list[int]:
    return MV.rolled_back(base)


def push(files: Mapping[str, Path], base: str, *, digest: str, proposed_version: int,
         keep: int, record: dict[str, Any]) -> dict[str, Any]:
    """Push `files` (relative path in the version -> local file) as a new version of `base`,
    unless the newest committed version has this content digest."""
    found, others = MV.scan(base)
    MV.sweep(base, found)
    done = sorted(v for v, i in found.items() if i.state == MV.COMMITTED)
    if done:
        newest = MV.read_commit(base, found[done[-1]].name) or {}
        if newest.get("digest") == digest:
            return {"pushed": False, "version": done[-1], "path": f"{base}/{found[done[-1]].name}",
                    "reason": "the newest version already has this content", "removed": [],
                    "digest": digest}
    used = list(found) + MV.rolled_back_in(others)
    version = max([proposed_version] + [v + 1 for v in used])
    MV.write(base, version, files, {**record, "digest": digest})
    return {"pushed": True, "version": version, "path": f"{base}/{version}",
            "removed": prune(base, keep), "digest": digest}


def prune(base: str, keep: int) -> list[int]:
    """Keep the newest `keep` committed versions; retire the older ones."""
    found, _ = MV.scan(base)
    done = sorted(v for v, i in found.items() if i.state == MV.COMMITTED)
    old = done[:-keep] if keep > 0 else []
    for v in old:
        MV.retire(base, found[v])
    return old


def rollback(base: str, to: int | None, error: type[Exception]) -> tuple[int, list[int]]:
    """Make committed version `to` (default: the one before the newest) the newest; returns
    (the version now newest, the versions set aside). `error` is raised for a rollback that
    cannot be done (pipeline.release.versions.VersionError)."""
    found, others = MV.scan(base)
    present = sorted(v for v, i in found.items() if i.state == MV.COMMITTED)
    to, newer = rollback_plan(present, to, base, error)
    taken = set(others)
    for v in sorted(newer, reverse=True):
        name, n = f"{RolledBack}{v}", 1
        while name in taken:
            name, n = f"{RolledBack}{v}-{n}", n + 1
        taken.add(name)
        MV.set_aside(base, found[v], name)
    return to, newer


def rollback_plan(present: list[int], to: int | None, base: object,
                  error: type[Exception]) -> tuple[int, list[int]]:
    """(the version to serve, the newer versions to set aside) for a rollback of `base`, whose
    versions are `present` (ascending), local or on a bucket alike; `error` when impossible."""
    if not present:
        raise error(f"no versions in {base}")
    if to is None:
        if len(present) < 2:
            raise error(f"only version {present[0]} is in {base}: nothing to roll back to")
        to = present[-2]
    if to not in present:
        raise error(f"version {to} is not in {base}; versions present: {present}")
    newer = [v for v in present if v > to]
    if not newer:
        raise error(f"version {to} is already the newest in {base}")
    return to, newer
