"""Model base paths on object stores (`--model_base_path=s3://...`, `gs://...`) for the manager.

The manager polls a base path every `--file_system_poll_wait_seconds`, as TF Serving does; for
a bucket each poll is one listing of the base (baton.storage.model_versions.scan). A version is
offered to the manager only when it is complete:

- a version Baton pushed is complete once its commit object exists (pending ones are never
  offered); it is downloaded by its manifest, every file checked against its sha256, through
  the node's content-addressed cache (a version served before, or sharing files with one, is
  not fetched again), into `<cache>/serving/<base digest>/<version>-<commit digest>/`, and the
  manager loads and warms that local copy before it serves it, as it does for a local path;
- a version written by another tool (no Baton commit, no pending marker: `aws s3 cp -r` of a
  SavedModel) is offered once its listing is the same on two consecutive polls, and its
  fingerprint is that listing, so a copy still in progress is retried when it changes.

The local copy of a version is removed when the manager unloads it (`release`); the cache's
objects stay, so rolling back to it again links files instead of downloading them.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
from pathlib import Path

from baton.storage import location as L
from baton.storage import model_versions as MV
from baton.storage import node_cache

_LOCK = threading.Lock()
_LISTINGS: dict[str, dict[int, tuple[tuple[str, int], ...]]] = {}  # base -> last foreign listings


def is_remote(base_path: str) -> bool:
    return L.is_remote(base_path)


def version_dirs(base_path: str) -> dict[int, str]:
    """The complete versions under a bucket base path: version -> its directory name."""
    found, _ = MV.scan(base_path)
    with _LOCK:
        before = _LISTINGS.get(base_path, {})
        now = {v: _listing(info) for v, info in found.items() if info.state == MV.FOREIGN}
        _LISTINGS[base_path] = now
    return {v: info.name for v, info in found.items()
            if info.state == MV.COMMITTED
            or (info.state == MV.FOREIGN and before.get(v) == now[v] and now[v])}


def fingerprint(version_path: str) -> tuple:
    """What identifies a version's content: its commit (digest and manifest) when Baton pushed
    it, else its listing (names and sizes)."""
    base, name = L.parent(version_path), L.basename(version_path)
    commit = MV.read_commit(base, name)
    if commit is not None:
        return ("commit", str(commit.get("digest")),
                tuple(sorted((r, str(e.get("sha256"))) for r, e in commit["files"].items())))
    found, _ = MV.scan(base)
    info = next((i for i in found.values() if i.name == name), None)
    return ("listing", _listing(info) if info else ())


def local_copy(version_path: str) -> str:
    """Download a complete version into this node's cache; returns the local directory."""
    base, name = L.parent(version_path), L.basename(version_path)
    commit = MV.read_commit(base, name)
    found, _ = MV.scan(base)
    info = next((i for i in found.values() if i.name == name), None)
    if info is None:
        raise FileNotFoundError(f"{version_path} is gone")
    tag = (str(commit.get("digest"))[:16] if commit is not None
           else hashlib.sha256(repr(_listing(info)).encode()).hexdigest()[:16])
    dest = _serving_dir(base) / f"{name}-{tag}"
    if dest.is_dir():
        return str(dest)
    tmp = dest.with_name(f".tmp-{dest.name}-{os.getpid()}-{threading.get_ident()}")
    shutil.rmtree(tmp, ignore_errors=True)
    if commit is not None:
        MV.download(base, info, commit, tmp)
    else:  # another tool's version: no manifest, hashed as it arrives
        for rel in info.files:
            sha, _ = node_cache.fetch_unlisted(L.join(version_path, rel))
            node_cache.place(sha, tmp / rel)
    try:
        os.replace(tmp, dest)
    except OSError:  # another thread placed it first
        shutil.rmtree(tmp, ignore_errors=True)
    return str(dest)


def release(base_path: str, version: int) -> None:
    """Drop the local copies of an unloaded version (the cached objects stay)."""
    root = _serving_dir(base_path)
    for d in root.iterdir() if root.is_dir() else ():
        number = d.name.partition("-")[0]
        if number.isdigit() and int(number) == version:
            shutil.rmtree(d, ignore_errors=True)


def _serving_dir(base: str) -> Path:
    return node_cache.root() / "serving" / hashlib.sha256(base.encode()).hexdigest()[:16]


def _listing(info: MV.Version) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(info.files.items()))
