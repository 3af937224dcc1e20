"""Where a Beam worker writes one output shard: a local directory, or an object store prefix.

A DoFn writes its shard with TensorFlow's own TFRecord writer (C++ framing and CRCs) to a path
this gives it: the file itself for a local output directory, or, for an output on a bucket
(StageContext.direct_output on a `--runs-dir s3://...` run), a worker-local temporary file that
is uploaded to `<prefix>/<split>/<name>` when the shard is complete, through baton.storage (the
one file-system layer; pyarrow is on every Beam worker). This is how Beam's own file sinks work
(a temporary file, then finalisation), and it needs no TensorFlow file system for the scheme:
TensorFlow 2.21 has none for s3://. Each worker uploads its own shards, straight to the store:
on Dataflow, Flink or Spark nothing passes through the driver. A shard that failed is not
uploaded; one uploaded by a retried bundle is replaced whole (objects appear whole).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator

from baton.storage import location as L
from baton.storage import objects


@contextlib.contextmanager
def shard_path(out_dir: str, split: str, name: str) -> Iterator[str]:
    """A local path to write shard `name` of `split` to; uploaded on a clean exit when
    `out_dir` is a bucket URL."""
    if not L.is_remote(out_dir):
        directory = os.path.join(out_dir, split)
        os.makedirs(directory, exist_ok=True)
        yield os.path.join(directory, name)
        return
    fd, tmp = tempfile.mkstemp(prefix="baton-shard-", suffix=f"-{name}")
    os.close(fd)
    try:
        yield tmp
        objects.upload_file(tmp, L.join(out_dir, split, name))
    finally:
        os.unlink(tmp)
