"""Read an examples shard as pyarrow record batches: its Arrow copy, or TFRecords parsed by TF.

When ingest wrote the columnar copy of the shard (`examples/columnar/...`), it is read
memory-mapped and nothing is parsed. Otherwise (examples from elsewhere) the TFRecords are
parsed by TensorFlow in large batches.

Parsing tf.Examples one at a time in Python costs ~10 µs each; `tf.io.parse_example` on 64k
serialized records at once runs in C++ across the intra-op threads. String columns come out
dictionary-encoded (`tf.unique` in the graph), so downstream analyzers and the apply step touch
each distinct value once per batch instead of once per row. Numeric columns are float32 with
NaN for missing; strings use "" for missing (the artifact contract). With `keep_nan` a missing
number reads as `ABSENT` instead, so a NaN that is a value of the data stays distinguishable;
both paths (Arrow copy and TFRecords) honour it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from baton.errors import StageError
from baton.pipeline.dataplane.schema_file import Column

ABSENT = np.float32(-3.0e38)  # default of an absent float when NaN must stay distinguishable


def _parse_fn(columns: Sequence[Column], absent: float) -> Any:
    import tensorflow as tf

    spec = {
        c.name: tf.io.FixedLenFeature([], tf.float32, default_value=absent)
        if c.is_numeric
        else tf.io.FixedLenFeature([], tf.string, default_value="")
        for c in columns
    }

    def parse(records):  # noqa: ANN001, ANN202
        parsed = tf.io.parse_example(records, spec)
        out = {}
        for c in columns:
            if c.is_numeric:
                out[c.name] = parsed[c.name]
            else:
                uniq, idx = tf.unique(parsed[c.name], out_idx=tf.int32)
                out[c.name] = (uniq, idx)
        return out

    return parse


def read_batches(
    path: str | Path, columns: Sequence[Column], batch_rows: int = 65_536,
    keep_nan: bool = False,
) -> Iterator[Any]:
    """`pyarrow.RecordBatch`es of one TFRecord shard (numeric float32, strings dictionary).

    An absent numeric value reads as NaN (the contract), or with `keep_nan` as `ABSENT`, so
    statistics can tell an explicit NaN in the data from a missing value.
    """
    import pyarrow as pa

    sidecar = columnar_path(path)
    if sidecar.is_file():
        yield from _read_columnar(sidecar, columns, keep_nan)
        return
    import tensorflow as tf

    ds = tf.data.TFRecordDataset(str(path), buffer_size=8 << 20).batch(batch_rows)
    ds = ds.map(_parse_fn(columns, float(ABSENT) if keep_nan else np.nan), num_parallel_calls=2).prefetch(1)
    it = iter(ds)
    while True:
        try:
            batch = next(it)
        except StopIteration:
            return
        except tf.errors.OpError as exc:
            msg = exc.message.splitlines()[0] if exc.message else type(exc).__name__
            msg = re.sub(r"\{\{[^}]*\}\}\s*|\s*\[Op:\w+\].*", "", msg)  # TF's internals
            raise StageError(f"cannot read examples shard {path}: {msg[:400]}") from None
        arrays = []
        for c in columns:
            if c.is_numeric:
                arrays.append(pa.array(batch[c.name].numpy()))
            else:
                uniq, idx = batch[c.name]
                arrays.append(pa.DictionaryArray.from_arrays(
                    pa.array(idx.numpy()), pa.array(uniq.numpy(), pa.binary())))
        yield pa.RecordBatch.from_arrays(arrays, names=[c.name for c in columns])


def columnar_path(tfrecord: str | Path) -> Path:
    """The Arrow copy of an examples shard: `<examples>/columnar/<split>/<stem>.arrow`."""
    p = Path(tfrecord)
    return p.parent.parent / "columnar" / p.parent.name / (p.name.split(".")[0] + ".arrow")


def _read_columnar(path: Path, columns: Sequence[Column], keep_nan: bool = False
                   ) -> Iterator[Any]:
    """Batches of an Arrow copy with missing numbers as NaN, or as `ABSENT` with `keep_nan`.

    Ingest marks a missing number with a null (schema metadata `baton.missing: null`) and keeps
    a NaN of the data as NaN; in a copy without that metadata every NaN means missing.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    from baton.pipeline.dataplane.examples_writer import MISSING_KEY

    names = [c.name for c in columns]
    with pa.memory_map(str(path)) as source:
        reader = pa.ipc.open_stream(source)
        missing = [n for n in names if n not in reader.schema.names]
        if missing:
            raise StageError(f"examples shard {path} has no columns {missing}")
        nulls = (reader.schema.metadata or {}).get(MISSING_KEY) == b"null"
        fill = pa.scalar(ABSENT if keep_nan else np.nan, pa.float32())
        numeric = [i for i, c in enumerate(columns) if c.is_numeric]
        for batch in reader:
            batch = batch.select(names)
            arrays = list(batch.columns)
            changed = False
            for i in numeric:
                col = arrays[i]
                if nulls and col.null_count:
                    arrays[i], changed = pc.fill_null(col, fill), True
                elif not nulls and keep_nan and col.null_count == 0:
                    arrays[i], changed = pc.if_else(pc.is_nan(col), fill, col), True
            yield pa.RecordBatch.from_arrays(arrays, names=names) if changed else batch


def dictionary_parts(array: Any) -> tuple[list[bytes], np.ndarray]:
    """(distinct values, int32 index per row) of a dictionary-encoded binary column."""
    return array.dictionary.to_pylist(), array.indices.to_numpy(zero_copy_only=False)


def numeric_values(array: Any) -> np.ndarray:
    return array.to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
