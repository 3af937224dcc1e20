"""Directories moved by manifest: uploaded to a prefix, downloaded into a local directory.

Uploads run on a thread pool (one object per file; a store's per-request latency, not its
bandwidth, bounds many small files) in ordered groups: every file of a group is complete
before the next group starts, which is how a model version gets its `saved_model.pb` only
after its variables (`model_versions`). Downloads go through the node cache (`node_cache`):
each distinct content is fetched once per node and hard-linked into place.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from baton.storage import location as L
from baton.storage import node_cache
from baton.storage.objects import each, upload_file


def upload(directory: Path, prefix: str, manifest: Mapping[str, Mapping[str, Any]],
           groups: Sequence[Callable[[str], bool]] = (),
           present: Mapping[str, int] | None = None) -> None:
    """Upload the manifest's files from `directory` to `prefix/<rel>`.

    Args:
        groups: predicates on the relative path, uploaded in this order (a file goes with the
            first group it matches; files matching none go first).
        present: objects already at the prefix (rel -> size): those of the same size are
            not sent again (a rerun of an interrupted upload resumes).
    """
    rels = [r for r in sorted(manifest)
            if present is None or present.get(r) != manifest[r]["size"]]
    waves: list[list[str]] = [[] for _ in range(len(groups) + 1)]
    for rel in rels:
        index = next((i + 1 for i, g in enumerate(groups) if g(rel)), 0)
        waves[index].append(rel)
    for wave in waves:
        each(lambda rel: upload_file(directory / rel, L.join(prefix, rel)), wave)
    for rel, entry in manifest.items():  # read back from here later, never downloaded
        node_cache.adopt(directory / rel, str(entry["sha256"]))


def download(manifest: Mapping[str, Mapping[str, Any]], dest: Path,
             where: Callable[[str, Mapping[str, Any]], str]) -> None:
    """Materialise every file of `manifest` under `dest` (created); `where(rel, entry)` is
    the location of each file's object. Checked against the manifest's hashes."""
    dest.mkdir(parents=True, exist_ok=True)

    def one(rel: str) -> None:
        entry = manifest[rel]
        node_cache.fetch(where(rel, entry), str(entry["sha256"]), int(entry["size"]))
        node_cache.place(str(entry["sha256"]), dest / rel)

    each(one, sorted(manifest))


def is_under(*names: str) -> Callable[[str], bool]:
    """A group predicate: the file is `name` or lies below directory `name`."""
    return lambda rel: any(rel == n or rel.startswith(n.rstrip("/") + "/") for n in names)
