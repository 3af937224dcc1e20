"""Manifests: the files of an artifact with their sizes and content hashes.

On an object store there is no rename, so a manifest is what makes a set of objects one
artifact: it is written last, as one object, and readers trust only what it lists (an object
under the prefix that no manifest names is a leftover of a killed writer, never read). A
manifest is `{relative path: {"sha256": hex, "size": bytes, ...}}`; callers add where each
file lives (`key`) when that is not beside the manifest.

Downloads are checked against it (a truncated or replaced object fails the download, naming
the file), and the node-local cache is addressed by its hashes, so a file is fetched once per
node however many runs, stages or model versions list it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from baton.storage.objects import each

Manifest = dict[str, dict[str, Any]]
_CHUNK = 1 << 20


def hash_file(path: str | os.PathLike[str]) -> tuple[str, int]:
    """(sha256 hex, size) of a local file."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def of_directory(directory: str | os.PathLike[str], skip: Iterable[str] = ()) -> Manifest:
    """Every file below `directory` (relative paths with `/`, names in `skip` and `.tmp-*`
    entries left out), hashed on a few threads (hashlib releases the GIL on large buffers)."""
    root = Path(directory)
    skipped = set(skip)
    files = sorted(
        p for p in root.rglob("*")
        if p.is_file() and p.relative_to(root).as_posix() not in skipped
        and not any(part.startswith(".tmp-") for part in p.relative_to(root).parts))
    hashes = each(hash_file, files, threads=4)
    return {p.relative_to(root).as_posix(): {"sha256": h, "size": n}
            for p, (h, n) in zip(files, hashes, strict=True)}


def digest(manifest: Mapping[str, Mapping[str, Any]]) -> str:
    """One hash for a whole manifest: equal exactly when every path and content is equal
    (the `store.hash_path` of the same files on disk)."""
    h = hashlib.sha256()
    for rel in sorted(manifest):
        h.update(rel.encode() + b"\0" + str(manifest[rel]["sha256"]).encode() + b"\n")
    return "sha256:" + h.hexdigest()


def below(manifest: Mapping[str, Mapping[str, Any]], prefix: str) -> Manifest:
    """The entries under directory `prefix` (relative to it)."""
    start = prefix.rstrip("/") + "/"
    return {rel[len(start):]: dict(e) for rel, e in manifest.items() if rel.startswith(start)}
