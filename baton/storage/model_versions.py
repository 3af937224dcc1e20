"""Model versions on an object store: TF Serving's `<base>/<version>/` with a commit object.

The layout is TF Serving's own (`<base>/<integer version>/saved_model.pb`, `variables/`,
`assets/`, `assets.extra/`), so a real `tensorflow_model_server --model_base_path=s3://...`
serves what Baton pushes. Without rename, a version is written in place and committed last:

1. `assets.extra/baton_push.pending` (a token): from now on the version is Baton's and not
   committed; `baton serve` never loads it.
2. the SavedModel's files, `variables/` and `assets/` first, `saved_model.pb` (and
   `fingerprint.pb`) after them: TF Serving, which knows no commit object, finds a
   loadable `saved_model.pb` only once the variables it names are complete.
3. `assets.extra/baton_push.json`, the commit: the push record (content digest, source run)
   and the manifest of every file with its sha256. `baton serve` loads a version only once
   this exists, and checks every file it downloads against it.

A writer killed at any point leaves a pending version: never served by Baton, swept by a later
push once `STALE_S` old. Retiring a version deletes its commit first, then its files, then the
pending marker, so a half-deleted version never reads as committed. A version directory with
neither object was written by another tool (TF Serving's users copy SavedModels with
`gsutil cp -r`/`aws s3 cp`): `baton serve` loads it once its listing is unchanged between two
polls, as the best a reader can do without a commit.

Object stores have no lock: two pushes to one base at once are detected (the pending token is
read back before the commit) and the loser fails; a version whose objects a loser overwrote
fails its manifest check on download, so a mixed version is never served.
"""

from __future__ import annotations

import dataclasses
import re
import secrets
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from baton.storage import location as L
from baton.storage import objects, trees
from baton.storage.filesystems import StorageError

ASSETS_EXTRA = "assets.extra"
COMMIT = f"{ASSETS_EXTRA}/baton_push.json"
PENDING = f"{ASSETS_EXTRA}/baton_push.pending"
ROLLED_BACK = ".rolledback-"
STALE_S = 3600.0  # a pending version older than this is a killed push: swept by the next push
_ROLLED = re.compile(r"^\.rolledback-(\d+)(?:-\d+)?$")
_LAST = ("saved_model.pb", "saved_model.pbtxt", "fingerprint.pb")

COMMITTED, PENDING_STATE, FOREIGN = "committed", "pending", "foreign"


@dataclasses.dataclass(frozen=True)
class Version:
    number: int
    name: str  # the directory name as found (`00000123` is version 123)
    state: str  # committed | pending | foreign
    files: Mapping[str, int]  # relative path -> size, as listed


def scan(base: str) -> tuple[dict[int, Version], dict[str, Mapping[str, int]]]:
    """One listing of `base`: (integer versions by number, other top-level names' files).

    When two names give one number (`123`, `0123`), the shortest (then the first in sort
    order) is taken, as for local directories (serving.manager.version_dirs)."""
    tree = objects.list_tree(base)
    groups: dict[str, dict[str, int]] = {}
    for rel, size in tree.items():
        top, _, rest = rel.partition("/")
        if rest:
            groups.setdefault(top, {})[rest] = size
    versions: dict[int, Version] = {}
    others: dict[str, Mapping[str, int]] = {}
    for name in sorted(groups, key=lambda n: (len(n), n)):
        files = groups[name]
        if not (name.isdigit() and name.isascii()):
            others[name] = files
            continue
        state = COMMITTED if COMMIT in files else PENDING_STATE if PENDING in files else FOREIGN
        versions.setdefault(int(name), Version(int(name), name, state, files))
    return versions, others


def committed(base: str) -> list[int]:
    return sorted(v for v, info in scan(base)[0].items() if info.state == COMMITTED)


def rolled_back(base: str) -> list[int]:
    return rolled_back_in(scan(base)[1])


def rolled_back_in(names: Iterable[str]) -> list[int]:
    """The version numbers of `.rolledback-<version>[-n]` names (scan's other names)."""
    return sorted(int(m.group(1)) for name in names if (m := _ROLLED.match(name)))


def read_commit(base: str, name: str) -> dict[str, Any] | None:
    return objects.read_json(L.join(base, name, COMMIT))


def write(base: str, version: int, files: Mapping[str, Path], record: dict[str, Any]) -> \
        dict[str, Any]:
    """Push `files` (relative path in the version -> local file) as `<base>/<version>/`,
    committed by `record` plus the manifest; returns the commit written."""
    from baton.storage import manifest as M

    prefix = L.join(base, str(version))
    token = secrets.token_hex(8)
    objects.write_json(L.join(prefix, PENDING), {"token": token, "started": time.time()})
    entries: dict[str, dict[str, Any]] = {}
    for rel, path in files.items():
        sha, size = M.hash_file(path)
        entries[rel] = {"sha256": sha, "size": size}
    _upload(files, prefix)
    claim = objects.read_json(L.join(prefix, PENDING)) or {}
    if claim.get("token") != token:
        raise StorageError(f"cannot push {prefix}: another push is writing version {version} "
                           "there at the same time (object stores have no lock: push to one "
                           "base from one place at a time)")
    commit = {**record, "version": version, "files": entries}
    objects.write_json(L.join(prefix, COMMIT), commit)
    return commit


def _upload(files: Mapping[str, Path], prefix: str) -> None:
    """Upload in two waves: everything but the graph, then the graph (`saved_model.pb`)."""
    first = sorted(r for r in files if r not in _LAST)
    last = sorted(r for r in files if r in _LAST)
    for wave in (first, last):
        objects.each(lambda rel: objects.upload_file(files[rel], L.join(prefix, rel)), wave)


def retire(base: str, version: Version) -> None:
    """Delete one version so that no reader sees it committed while it goes: the commit
    first, then the files, then the pending marker."""
    prefix = L.join(base, version.name)
    objects.write_json(L.join(prefix, PENDING), {"token": "retiring", "started": 0})
    objects.delete(L.join(prefix, COMMIT))
    objects.delete_many(L.join(prefix, rel) for rel in version.files
                        if rel not in (COMMIT, PENDING))
    objects.delete(L.join(prefix, PENDING))


def set_aside(base: str, version: Version, name: str) -> None:
    """Copy a version to `<base>/<name>/` (a name servers ignore; server-side copies), then
    retire it: a rollback keeps the data for a roll-forward, as a local rename does."""
    objects.each(lambda rel: objects.copy(L.join(base, version.name, rel),
                                          L.join(base, name, rel)),
                 [r for r in version.files if r != PENDING])
    retire(base, version)


def sweep(base: str, versions: Mapping[int, Version], now: float | None = None) -> list[int]:
    """Retire pending versions older than STALE_S (killed pushes); returns their numbers."""
    import pyarrow.fs as pafs

    from baton.storage.filesystems import resolve

    now = time.time() if now is None else now
    swept = []
    for v, info in versions.items():
        if info.state != PENDING_STATE:
            continue
        loc = L.join(base, info.name, PENDING)
        fs, path = resolve(loc)
        stamp = fs.get_file_info(path)
        if stamp.type == pafs.FileType.NotFound or stamp.mtime is None:
            continue
        if now - stamp.mtime.timestamp() >= STALE_S:
            retire(base, info)
            swept.append(v)
    return swept


def download(base: str, version: Version, commit: Mapping[str, Any], dest: Path) -> None:
    """Materialise a committed version under `dest` (checked against its manifest), with its
    commit object, as a local SavedModel directory."""
    files = dict(commit.get("files") or {})
    prefix = L.join(base, version.name)
    trees.download(files, dest, lambda rel, _e: L.join(prefix, rel))
    import json

    (dest / COMMIT).parent.mkdir(parents=True, exist_ok=True)
    (dest / COMMIT).write_text(json.dumps(commit, indent=2, default=str) + "\n")
