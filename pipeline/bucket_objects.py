"""The files of a bucket run's stages, stored by content: `<runs>/<pipeline>/.objects/<aa>/<sha256>`.

A commit's manifest names each file's object by its key relative to the pipeline's prefix.
Keys are content hashes, not places in a run, for the same reason a local runs directory
hard-links a cache hit instead of pointing at the earlier run: a later run that reuses a
stage (a cache hit writes a commit naming the same objects, copying nothing) must not break
when the earlier run is deleted. Deleting a run's prefix (`aws s3 rm --recursive
.../<run id>/`, `gsutil rm -r`) removes its commits and records only; the objects stay while
any commit or cache record names them, and `baton gc` (`collect`) deletes the ones none
names. The same bytes written by two runs (an unchanged stage rerun with `--no-cache`, a
rerun after a failure) are stored once.

An object is written whole (a PUT) under a key fixed by its bytes, so it never changes once
there: a reader holding a manifest always gets the bytes it names (and checks them). Shards
Beam workers wrote to the attempt's prefix are copied to their content key on the store
(server-side: no byte through this node) and the attempt's copies deleted after the commit.

Collection spares runs in flight: an object is deleted only when no commit and no cache
record names it *and* it is older than the grace period (a run uploads its objects before the
commit that names them; 24 h by default, as git's `gc.pruneExpire` keeps recent loose
objects). One race is left, because an object store cannot refresh an object's age without
copying it: a run that finds an old unnamed object already stored (the same bytes as a
deleted run's) and skips uploading it, while `collect` deletes it in the seconds before that
run's commit. Its readers then fail naming the object and a rerun stores it again; run
`baton gc` when no run of the pipeline is committing (a nightly job) to avoid it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from baton.storage import location as L
from baton.storage import node_cache, objects

OBJECTS = ".objects"
CACHE = ".cache"
GRACE_S = 24 * 3600


def key_of(sha256: str) -> str:
    """The key (relative to the pipeline's prefix) of the object with this content."""
    return f"{OBJECTS}/{sha256[:2]}/{sha256}"


def publish(root: str, work: Path, files: Mapping[str, Mapping[str, Any]],
            written: Mapping[str, str]) -> None:
    """Store every file of a manifest by content under `root`: those `written` to the store
    already (rel -> their URL) by a server-side copy, the others uploaded from `work`;
    objects the store holds with that size already are not sent again."""
    wanted: dict[str, tuple[str, int]] = {}  # key -> (a rel with that content, size)
    for rel, e in files.items():
        wanted.setdefault(key_of(str(e["sha256"])), (rel, int(e["size"])))
    keys = sorted(wanted)
    have = dict(zip(keys, objects.each(lambda k: objects.size(L.join(root, k)), keys),
                    strict=True))

    def put(key: str) -> None:
        rel, size = wanted[key]
        if have[key] == size:
            return
        if rel in written:
            objects.copy(written[rel], L.join(root, key))
        else:
            objects.upload_file(work / rel, L.join(root, key))

    objects.each(put, keys)
    for rel, e in files.items():  # read back from here later, never downloaded
        if (work / rel).is_file():
            node_cache.adopt(work / rel, str(e["sha256"]))


def missing(root: str, manifest: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The keys of `manifest` whose object is not on the store with its size."""
    want = {str(e["key"]): int(e["size"]) for e in manifest.values()}
    keys = sorted(want)
    sizes = objects.each(lambda k: objects.size(L.join(root, k)), keys)
    return [k for k, n in zip(keys, sizes, strict=True) if n != want[k]]


class BucketCache:
    """The execution cache's index on the store: `<root>/.cache/<key>.json` (cache.Cache's
    records, with their manifests). A record is reused only while every object it names is
    still there with its size."""

    def __init__(self, root: str) -> None:
        self.dir = L.join(root, CACHE)
        self.root = root

    def lookup(self, key: str) -> dict[str, Any] | None:
        rec = objects.read_json(L.join(self.dir, f"{key}.json"))
        if not isinstance(rec, dict) or missing(self.root, rec.get("manifest", {})):
            return None
        return rec

    def store(self, key: str, record: dict[str, Any]) -> None:
        objects.write_json(L.join(self.dir, f"{key}.json"), record)


def referenced(root: str) -> set[str]:
    """Every key a commit (of any run, finished or not) or a cache record under `root` names."""
    docs: list[str] = [L.join(root, CACHE, name) for name, is_dir
                       in objects.list_children(L.join(root, CACHE)).items()
                       if not is_dir and name.endswith(".json")]
    for run_id, is_dir in objects.list_children(root).items():
        if is_dir and not run_id.startswith("."):
            docs += [L.join(root, run_id, rel) for rel in objects.list_tree(L.join(root, run_id))
                     if rel.count("/") == 1 and rel.endswith("/lineage.json")]
    keys: set[str] = set()
    for rec in objects.each(objects.read_json, docs):
        if isinstance(rec, dict):
            keys.update(str(e.get("key")) for e in rec.get("manifest", {}).values())
    return keys


def collect(root: str, grace_s: float = GRACE_S, dry_run: bool = False
            ) -> tuple[list[str], int, int]:
    """Delete the objects under `root/.objects/` that nothing names and that are older than
    `grace_s`: (the keys deleted, or that would be with `dry_run`; objects kept; their bytes
    freed)."""
    import pyarrow.fs as pafs

    from baton.storage.filesystems import errors, resolve

    fs, path = resolve(L.join(root, OBJECTS))
    with errors(L.join(root, OBJECTS), "cannot list"):
        infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    keep = referenced(root)  # listed after the objects: a commit written meanwhile counts
    now = time.time()
    base = path.rstrip("/") + "/"
    doomed: list[tuple[str, int]] = []
    kept = 0
    for info in infos:
        if info.type != pafs.FileType.File:
            continue
        key = f"{OBJECTS}/{info.path[len(base):]}"
        young = info.mtime is None or now - info.mtime.timestamp() < grace_s
        if key in keep or young:
            kept += 1
        else:
            doomed.append((key, int(info.size or 0)))
    if not dry_run:
        objects.delete_many(L.join(root, k) for k, _ in doomed)
    return [k for k, _ in doomed], kept, sum(n for _, n in doomed)


def pipelines(runs: str) -> Iterable[str]:
    """The pipeline prefixes under a runs URL that hold content-addressed objects."""
    for name, is_dir in objects.list_children(runs).items():
        if is_dir and not name.startswith(".") and \
                objects.list_children(L.join(runs, name)).get(OBJECTS):
            yield L.join(runs, name)
