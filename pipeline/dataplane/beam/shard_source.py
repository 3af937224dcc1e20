"""Where a Beam worker reads one input shard from: a local path, or the shard's objects on a store.

On a `--runs-dir s3://...` run whose Beam workers run on other machines (Dataflow, Flink,
Spark, a portable job service's worker pool), the driver's staged copy of an input is on a
disk no worker mounts. The driver therefore hands each worker a `RemoteShard`: the committed
objects of the shard (its TFRecord file and, when ingest wrote one, its Arrow copy), each with
the sha256 and size its commit's manifest gives. The worker fetches them into its own node
cache (baton.storage.node_cache: streamed, hashed and checked against the manifest before it
is used, once per worker node however many passes read it) and reads the local copy as a local
run would (dataplane.records.reader). Nothing passes through the driver, and a shard changed on the
store after its commit fails the read, named. On this node (the in-process and
multi-processing runners) the elements stay plain paths into the staged input.

The small results the driver reads back (merged analyzer values, row counts, statistics) go
the same way: `result_location` is a path for local workers and an object under the stage's
scratch prefix for remote ones (`baton.storage.objects` writes either).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from baton.errors import StageError


class RemoteObject(NamedTuple):
    url: str
    sha256: str
    size: int


class RemoteShard(NamedTuple):
    """A shard's committed objects: `rel` is its path in the examples artifact (`train/...`)."""

    rel: str
    tfrecord: RemoteObject
    columnar: RemoteObject | None


def shard_refs(files: Sequence[Path], examples: Path, objects: dict[str, Any] | None
               ) -> list[str | RemoteShard]:
    """What the workers get for each shard file of `examples`: its path, or (with `objects`,
    the input's committed objects: rel -> {url, sha256, size}) a RemoteShard."""
    from baton.pipeline.dataplane.records.reader import columnar_path

    if objects is None:
        return [str(f) for f in files]
    out: list[str | RemoteShard] = []
    for f in files:
        rel = Path(f).relative_to(examples).as_posix()
        side = columnar_path(f).relative_to(examples).as_posix()
        if rel not in objects:
            raise StageError(f"examples shard {rel} is not in its commit's manifest")
        out.append(RemoteShard(rel, RemoteObject(**objects[rel]),
                               RemoteObject(**objects[side]) if side in objects else None))
    return out


@contextlib.contextmanager
def local_shard(ref: str | RemoteShard) -> Iterator[str]:
    """A local path to read shard `ref` from (with its Arrow copy beside it, where it has one),
    valid inside the block."""
    if isinstance(ref, str):
        yield ref
        return
    from baton.pipeline.dataplane.records.reader import columnar_path
    from baton.storage import node_cache

    tmp = Path(tempfile.mkdtemp(prefix="baton-shard-in-"))
    try:
        target = tmp / ref.rel
        for obj, dest in ((ref.tfrecord, target), (ref.columnar, columnar_path(target))):
            if obj is not None:
                node_cache.fetch(obj.url, obj.sha256, obj.size)
                node_cache.place(obj.sha256, dest)
        yield str(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def result_location(local: Path, remote_prefix: str | None) -> str:
    """Where workers write the result file `local` for the driver: itself, or the object of
    the same name under `remote_prefix`."""
    if remote_prefix is None:
        return str(local)
    from baton.storage import location as L

    return L.join(remote_prefix, os.path.basename(local))
