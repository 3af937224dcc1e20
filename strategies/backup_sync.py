"""Training backups on an object store: a backup directory that mirrors a bucket prefix.

TensorFlow writes checkpoints to a local directory (it has no file system for s3://), so a
backup directory inside this node's mirror of a bucket (baton.storage.node_cache.mirror_dir:
a run directory on `--runs-dir s3://...`, or `baton task --backup-dir s3://...`) is kept in
step with the bucket:

- after each save the chief uploads the new backup's files (`ckpt-N.index`, `ckpt-N.data-*`),
  then TensorFlow's `checkpoint` state file, which names the latest backup: that object is the
  commit (written last, whole), so a chief killed mid-upload leaves the previous backup as the
  latest on the bucket; backups older than the ones kept are deleted after it;
- before restoring, every task (a new pod on another node included) stages the latest backup
  the bucket's `checkpoint` names, its files first and the state file last.

A directory outside the mirror is left alone: local runs are unchanged.
"""

from __future__ import annotations

import re
from pathlib import Path

from baton.storage import location as L
from baton.storage import node_cache, objects

STATE = "checkpoint"  # TensorFlow's state file: the latest backup and the ones kept
_NAMES = re.compile(r'(?:model_checkpoint_path|all_model_checkpoint_paths): "([^"]+)"')


def remote_of(directory: str | Path) -> str | None:
    """The bucket prefix `directory` mirrors, or None (a plain local directory)."""
    return node_cache.mirrored_url(directory)


def pull(directory: Path) -> bool:
    """Stage the bucket's latest backup into `directory` (a no-op outside the mirror or when
    the bucket holds none, or the same); returns whether a backup is there now."""
    url = remote_of(directory)
    if url is None:
        return (directory / STATE).is_file()
    try:
        state = objects.read_bytes(L.join(url, STATE))
    except FileNotFoundError:
        return (directory / STATE).is_file()
    local = directory / STATE
    if local.is_file() and local.read_bytes() == state:
        return True
    names = _NAMES.findall(state.decode())
    latest = names[0] if names else ""
    remote = objects.list_tree(url)
    wanted = [rel for rel in remote if "/" not in rel and rel.startswith(f"{latest}.")]
    directory.mkdir(parents=True, exist_ok=True)

    def one(rel: str) -> None:
        target = directory / rel
        if target.is_file() and target.stat().st_size == remote[rel]:
            return
        sha, _ = node_cache.fetch_unlisted(L.join(url, rel))
        target.unlink(missing_ok=True)
        node_cache.place(sha, target)

    objects.each(one, wanted)
    objects.write_bytes(str(local), state)  # last: the backup is whole before it is named
    return True


def push(directory: Path, kept: list[str]) -> None:
    """Upload the backups `kept` (names, the latest last) that the bucket lacks, then the
    state file (the commit), then delete older backups from the bucket."""
    url = remote_of(directory)
    if url is None:
        return
    remote = objects.list_tree(url)
    files = [f for name in kept for f in directory.glob(f"{name}.*")
             if remote.get(f.name) != f.stat().st_size]
    objects.each(lambda f: objects.upload_file(f, L.join(url, f.name)), files)
    objects.upload_file(directory / STATE, L.join(url, STATE))
    stale = [rel for rel in remote if "/" not in rel and rel != STATE
             and not any(rel.startswith(f"{n}.") for n in kept)]
    objects.delete_many(L.join(url, rel) for rel in stale)


def remove(directory: Path) -> None:
    """Delete a finished job's backups: on the bucket too when mirrored."""
    import shutil

    url = remote_of(directory)
    if url is not None:
        objects.delete_tree(url)
    shutil.rmtree(directory, ignore_errors=True)
