"""The node-local cache: files from object stores, addressed by content, shared by every run.

`<cache>/objects/<aa>/<sha256>` holds one read-only copy of each file this node downloaded
(or uploaded: an artifact written here is adopted by a hard link, so reading it back costs
nothing). Artifacts are materialised from it by hard links, so an input staged for five stages,
a model version served after a rollback, or the same transformed data in two runs costs one
copy on disk and one download. `<cache>` is BATON_CACHE_DIR, else `$XDG_CACHE_HOME/baton`,
else `~/.cache/baton`; it may be deleted at any time (it refills from the store).

A download is written to a temporary name, hashed as it streams, checked against the manifest's
hash and size, and only then renamed into place: a killed or corrupt download never becomes a
cache entry. Cache files are made read-only, so a stage that tried to write into a staged
input fails instead of corrupting every other user of that content.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import threading
from collections.abc import Callable
from pathlib import Path

from baton.storage import location as L
from baton.storage.filesystems import StorageError, errors, resolve

_CHUNK = 8 << 20


def root() -> Path:
    env = os.environ.get("BATON_CACHE_DIR")
    if env:
        return Path(env).expanduser().resolve()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "baton"


def mirror_dir(url: str) -> Path:
    """This node's mirror of a bucket URL: `<cache>/runs/<scheme>/<bucket>/<key>` (the same path
    for the same URL wherever the cache directory is the same)."""
    u = L.parse(url)
    return root() / "runs" / u.scheme / u.bucket / u.key


def mirrored_url(path: str | os.PathLike[str]) -> str | None:
    """The bucket URL a local path mirrors (`mirror_dir`'s inverse), None for other paths."""
    try:
        rel = Path(path).resolve().relative_to(root() / "runs")
    except ValueError:
        return None
    parts = rel.parts
    if len(parts) < 2 or parts[0] not in L.SCHEMES:
        return None
    return str(L.Url(parts[0], parts[1], "/".join(parts[2:])))


def object_path(sha256: str) -> Path:
    return root() / "objects" / sha256[:2] / sha256


def fetch(loc: str, sha256: str, size: int) -> Path:
    """The cached file with this content, downloaded from `loc` first if this node lacks it;
    StorageError when the object's bytes do not match the manifest."""
    target = object_path(sha256)
    if target.is_file():
        return target
    got, n = _download(loc, lambda sha, size_: (sha, size_) == (sha256, size) or
                       _mismatch(loc, sha, size_, sha256, size))
    return object_path(got)


def fetch_unlisted(loc: str) -> tuple[str, int]:
    """Download an object no manifest lists yet (a shard a Beam worker wrote) into the cache;
    returns its (sha256, size), hashed from the bytes the store returned."""
    return _download(loc, lambda _sha, _n: True)


def _download(loc: str, accept: Callable[[str, int], bool]) -> tuple[str, int]:
    """Stream `loc` to a temporary file, hashing; `accept(sha, size)` (or raise) before it
    is renamed into the cache, read-only."""
    cache = root() / "objects"
    cache.mkdir(parents=True, exist_ok=True)
    tmp = cache / f".tmp-{os.getpid()}.{threading.get_ident()}"
    h = hashlib.sha256()
    n = 0
    fs, path = resolve(loc)
    try:
        with errors(loc, "cannot download"), fs.open_input_stream(path) as src, \
                open(tmp, "wb") as dst:
            while chunk := src.read(_CHUNK):
                h.update(chunk)
                n += len(chunk)
                dst.write(chunk)
        sha = h.hexdigest()
        accept(sha, n)
        target = object_path(sha)
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            os.chmod(tmp, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
            os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return sha, n


def _mismatch(loc: str, sha: str, n: int, sha256: str, size: int) -> bool:
    raise StorageError(f"cannot download {loc}: its content does not match the manifest ({n} "
                       f"bytes, sha256 {sha[:12]}; expected {size} bytes, sha256 "
                       f"{sha256[:12]}): it was changed after it was committed")


def adopt(path: Path, sha256: str) -> None:
    """Enter a local file that has this content (just written or uploaded) by a hard link;
    a no-op when the cache already holds it or links are impossible (another file system)."""
    target = object_path(sha256)
    if target.exists():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".tmp-{sha256}.{os.getpid()}.{id(path)}")
    try:
        os.link(path, tmp)
        os.chmod(tmp, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
        os.replace(tmp, target)
    except OSError:
        tmp.unlink(missing_ok=True)


def place(sha256: str, dest: Path) -> None:
    """Materialise cached content at `dest` (a hard link; a copy across file systems)."""
    src = object_path(sha256)
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dest)
    except FileExistsError:
        dest.unlink()
        os.link(src, dest)
    except OSError:
        shutil.copyfile(src, dest)
