"""Copying a SavedModel version into a serving base directory, atomically and idempotently.

The copy goes to `<base>/.tmp-push-<pid>-<version>` (a name TF Serving ignores), every file and
directory is fsynced, and one `os.rename` makes `<base>/<version>` appear complete. A process
killed at any point leaves either no new version or a complete one; the stale temporary
directory is swept by the next push. Pushing the same content as the newest version is a no-op
(content digest stored in `assets.extra/baton_push.json`), so a rerun never adds a duplicate.
On an object store (`s3://`, `gs://`) the same guarantees come from a commit object written
last instead of a rename (bucket_versions).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from baton.graphs.signatures import ASSETS_EXTRA
from baton.pipeline.release import bucket_versions
from baton.pipeline.release import versions as V
from baton.storage.location import is_remote

MARKER = Path(ASSETS_EXTRA) / "baton_push.json"


def digest(src: Path) -> str:
    """sha256 over relative paths and contents of every file under `src` (the push marker
    itself excluded, so a pushed copy has the same digest as its source)."""
    h = hashlib.sha256()
    for p in sorted(q for q in src.rglob("*") if q.is_file()):
        rel = p.relative_to(src)
        if rel == MARKER:
            continue
        h.update(str(rel).encode() + b"\0")
        with p.open("rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
        h.update(b"\0")
    return h.hexdigest()


def marker(version_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((version_dir / MARKER).read_text())
    except (OSError, ValueError):
        return None


def _copy_tree(src: Path, dst: Path, copy_file: Callable[[Path, Path], Any]) -> None:
    dst.mkdir()
    for p in sorted(src.rglob("*")):
        target = dst / p.relative_to(src)
        if p.is_dir():
            target.mkdir(exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            copy_file(p, target)
            _fsync_file(target)
    for d in sorted({t.parent for t in dst.rglob("*")} | {dst}, key=lambda x: -len(x.parts)):
        V.fsync_dir(d)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def push(
    src: Path, base: Path | str, *, proposed_version: int = 1, keep: int = 5,
    info: dict[str, Any] | None = None,
    extra: dict[str, Path] | None = None,
    copy_file: Callable[[Path, Path], Any] = shutil.copy2,
) -> dict[str, Any]:
    """Push SavedModel directory `src` into `base`; returns what happened.

    Args:
        src: a SavedModel directory (saved_model.pb, variables/, ...).
        base: the serving base directory (created if missing), or its bucket URL
            (`s3://...`, `gs://...`: pushed by bucket_versions, committed last).
        proposed_version: the exporter's version; raised above every version already used.
        keep: how many versions to keep after the push (older ones are removed; >= 1).
        info: extra facts stored in the pushed version's marker (run id, blessing).
        extra: files released inside the version, by relative path (the edge model).
        copy_file: the file copier (tests inject a slow one to kill a push midway).
    """
    if keep < 1:
        raise ValueError(f"keep must be >= 1. Received: keep={keep}")
    content = digest(src)
    if extra:
        h = hashlib.sha256(content.encode())
        for rel, path in sorted(extra.items()):
            h.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
        content = h.hexdigest()
    if is_remote(str(base)):  # no rename on an object store: committed last, by manifest
        files = {p.relative_to(src).as_posix(): p for p in sorted(src.rglob("*"))
                 if p.is_file() and p.relative_to(src) != MARKER}
        return bucket_versions.push(
            {**files, **(extra or {})}, str(base), digest=content,
            proposed_version=proposed_version, keep=keep,
            record={"source": str(src), "pushed_at": time.time(), **(info or {})})
    base = Path(base)
    with V.locked(base):
        present = V.versions(base)
        if present:
            newest = marker(base / str(present[-1]))
            if newest and newest.get("digest") == content:
                return {"pushed": False, "version": present[-1], "path": str(base / str(present[-1])),
                        "reason": "the newest version already has this content", "removed": [],
                        "digest": content}
        version = V.next_version(base, proposed_version)
        tmp = base / f"{V.TMP_PREFIX}push-{os.getpid()}-{version}"
        _copy_tree(src, tmp, copy_file)
        for rel, path in sorted((extra or {}).items()):
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            copy_file(path, tmp / rel)
            _fsync_file(tmp / rel)
        (tmp / MARKER).parent.mkdir(parents=True, exist_ok=True)
        meta = {"digest": content, "version": version, "source": str(src),
                "pushed_at": time.time(), **(info or {})}
        (tmp / MARKER).write_text(json.dumps(meta, indent=2, default=str) + "\n")
        _fsync_file(tmp / MARKER)
        os.rename(tmp, base / str(version))
        V.fsync_dir(base)
        removed = V.prune(base, keep)
    return {"pushed": True, "version": version, "path": str(base / str(version)),
            "removed": removed, "digest": content}
