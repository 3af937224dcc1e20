"""Reading, writing, listing and deleting at a location, local or remote alike.

On an object store one object is the unit of atomicity: a PUT (or a multipart upload's
completion) makes the whole object visible at once, and a writer killed before that leaves
nothing under the key. `write_bytes` keeps that promise on local disk too (a temporary file
renamed into place). Directories do not exist on object stores: a "directory" is a key prefix,
listed with `list_tree`/`list_children`, and there is no rename: commits are objects written
last (`baton.storage.manifest`, `baton.storage.model_versions`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from baton.storage import location as L
from baton.storage.filesystems import errors, resolve

THREADS = 16  # concurrent requests for many small objects (latency-bound on a real store)
_CHUNK = 8 << 20


def read_bytes(loc: str) -> bytes:
    """The whole object or file; FileNotFoundError when it is missing."""
    fs, path = resolve(loc)
    with errors(loc, "cannot read"), fs.open_input_stream(path) as f:
        return bytes(f.read())


def read_json(loc: str) -> Any | None:
    """The JSON document at `loc`, or None when it is missing or not JSON (a half-written
    local file from an older writer reads as missing, as lineage records always have)."""
    try:
        return json.loads(read_bytes(loc))
    except (FileNotFoundError, ValueError):
        return None


def write_bytes(loc: str, data: bytes) -> None:
    """Write `data` as one object (remote) or one file renamed into place (local)."""
    if not L.is_remote(loc):
        directory = os.path.dirname(loc)
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, f".tmp-{os.path.basename(loc)}.{os.getpid()}")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, loc)
        return
    fs, path = resolve(loc)
    with errors(loc, "cannot write"), fs.open_output_stream(path) as f:
        f.write(data)


def write_json(loc: str, data: Any) -> None:
    write_bytes(loc, dump_json(data))


def dump_json(data: Any) -> bytes:
    """The bytes `write_json` writes (indented; values JSON cannot hold as strings)."""
    return (json.dumps(data, indent=2, default=str) + "\n").encode()


def exists(loc: str) -> bool:
    import pyarrow.fs as pafs

    fs, path = resolve(loc)
    with errors(loc, "cannot look up"):
        return bool(fs.get_file_info(path).type != pafs.FileType.NotFound)


def list_tree(loc: str) -> dict[str, int]:
    """Every file below `loc`, recursively: relative path (with `/`) -> size; {} if none."""
    import pyarrow.fs as pafs

    fs, path = resolve(loc)
    with errors(loc, "cannot list"):
        infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    base = path.rstrip("/") + "/"
    return {i.path[len(base):].replace(os.sep, "/"): int(i.size or 0) for i in infos
            if i.type == pafs.FileType.File and i.path.startswith(base)}


def list_children(loc: str) -> dict[str, bool]:
    """The names directly below `loc`: name -> is a directory (a key prefix); {} if none."""
    import pyarrow.fs as pafs

    fs, path = resolve(loc)
    with errors(loc, "cannot list"):
        infos = fs.get_file_info(pafs.FileSelector(path, recursive=False, allow_not_found=True))
    return {os.path.basename(i.path.rstrip("/")): i.type == pafs.FileType.Directory
            for i in infos}


def delete(loc: str) -> None:
    """Remove one object or file (nothing if missing)."""
    fs, path = resolve(loc)
    try:
        with errors(loc, "cannot delete"):
            fs.delete_file(path)
    except FileNotFoundError:
        pass


def delete_many(locs: Iterable[str]) -> None:
    """Remove objects concurrently, each once (a no-op for the missing ones)."""
    each(delete, list(locs))


def delete_tree(loc: str) -> None:
    """Remove everything below `loc` (and the local directory itself)."""
    if not L.is_remote(loc):
        import shutil

        shutil.rmtree(loc, ignore_errors=True)
        return
    delete_many(L.join(loc, rel) for rel in list_tree(loc))


def upload_file(local: str | os.PathLike[str], loc: str) -> None:
    """Copy a local file to `loc` as one object (streamed: large files are never read whole)."""
    fs, path = resolve(loc)
    with errors(loc, "cannot upload to"), open(local, "rb") as src, \
            fs.open_output_stream(path) as dst:
        while chunk := src.read(_CHUNK):
            dst.write(chunk)


def copy(src: str, dst: str) -> None:
    """Copy an object within one store (server-side on S3 and GCS: no bytes through here)."""
    fs, path = resolve(src)
    _, target = resolve(dst)
    with errors(src, f"cannot copy to {dst} from"):
        fs.copy_file(path, target)


def each(fn: Any, items: list[Any], threads: int = THREADS) -> list[Any]:
    """`fn(item)` for every item on a thread pool (requests to a store are latency-bound);
    the first exception is raised after all have finished."""
    if len(items) <= 1:
        return [fn(i) for i in items]
    with ThreadPoolExecutor(min(threads, len(items)), "baton-storage") as pool:
        futures = [pool.submit(fn, i) for i in items]
    return [f.result() for f in futures]
