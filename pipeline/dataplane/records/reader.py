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

A tensor column (`Column.shape`) reads as a `fixed_size_list<float32>[K]` array whose missing
rows hold K NaNs (K `ABSENT`s with `keep_nan`); `tensor_values` gives it as `[rows, K]`.
Batches of tensor columns are capped at `BATCH_VALUES` values, so a batch of images stays
tens of MB.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from baton.errors import StageError
from baton.pipeline.dataplane.records.schema_file import Column

ABSENT = np.float32(-3.0e38)  # default of an absent float when NaN must stay distinguishable
BATCH_VALUES = 1 << 23  # values per batch of a shard with tensor columns (32 MB of float32)


def batch_rows_for(columns: Sequence[Column], batch_rows: int) -> int:
    """`batch_rows`, lowered for tensor columns so one batch holds at most BATCH_VALUES values."""
    row_values = sum(c.size for c in columns)
    if row_values <= len(columns):  # scalars only
        return batch_rows
    return max(1, min(batch_rows, BATCH_VALUES // row_values))


def _parse_fn(columns: Sequence[Column], absent: float) -> Any:
    import tensorflow as tf

    spec = {
        c.name: tf.io.FixedLenFeature([c.size], tf.float32,
                                      default_value=np.full(c.size, absent, np.float32))
        if c.shape
        else tf.io.FixedLenFeature([], tf.float32, default_value=absent)
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
    statistics can tell an explicit NaN in the data from a missing value. The Arrow copy is
    read in the batches ingest wrote (`group_batches` gathers them to `batch_rows`); parsed
    TFRecords come in batches of `batch_rows`.
    """
    import pyarrow as pa

    sidecar = columnar_path(path)
    if sidecar.is_file():
        yield from _read_columnar(sidecar, columns, keep_nan)
        return
    import tensorflow as tf

    ds = tf.data.TFRecordDataset(str(path), buffer_size=8 << 20).batch(
        batch_rows_for(columns, batch_rows))
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
            if c.shape:
                arrays.append(pa.FixedSizeListArray.from_arrays(
                    pa.array(batch[c.name].numpy().reshape(-1)), c.size))
            elif c.is_numeric:
                arrays.append(pa.array(batch[c.name].numpy()))
            else:
                uniq, idx = batch[c.name]
                arrays.append(pa.DictionaryArray.from_arrays(
                    pa.array(idx.numpy()), pa.array(uniq.numpy(), pa.binary())))
        yield pa.RecordBatch.from_arrays(arrays, names=[c.name for c in columns])


def group_batches(batches: Iterator[Any], rows: int) -> Iterator[list[Any]]:
    """Consecutive batches gathered into lists of at least `rows` rows (the last may hold
    fewer), to be encoded as one (`encoded_columns`). The Arrow copy's batches are ingest's,
    a CSV chunk (~34k rows of a narrow table), and a caller that pays a fixed cost per batch
    (a TensorFlow call runs its graph's ops one by one, ~1 ms) wants fewer, larger ones: on
    the data benchmark's 10M-row transform, 131k-row batches took 72 ms per million rows
    against 94 ms at 34k. The transform's default is now 65,536 rows: as fast on that table,
    and on short texts split into tokens it keeps TensorFlow's temporaries small enough to
    be reused batch after batch (docs/preprocessing.md). Nothing is copied here: the caller's
    worker threads join them."""
    group: list[Any] = []
    held = 0
    for batch in batches:
        group.append(batch)
        held += batch.num_rows
        if held >= rows:
            yield group
            group, held = [], 0
    if group:
        yield group


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

    from baton.pipeline.dataplane.records.examples_writer import MISSING_KEY

    names = [c.name for c in columns]
    with pa.memory_map(str(path)) as source:
        reader = pa.ipc.open_stream(source)
        missing = [n for n in names if n not in reader.schema.names]
        if missing:
            raise StageError(f"examples shard {path} has no columns {missing}")
        nulls = (reader.schema.metadata or {}).get(MISSING_KEY) == b"null"
        fill = pa.scalar(ABSENT if keep_nan else np.nan, pa.float32())
        numeric = [i for i, c in enumerate(columns) if c.is_numeric and not c.shape]
        tensors = [i for i, c in enumerate(columns) if c.shape]
        for batch in reader:
            batch = batch.select(names)
            arrays = list(batch.columns)
            changed = False
            for i in tensors:  # missing rows: K NaNs (K ABSENTs with keep_nan)
                col = arrays[i]
                if col.null_count or (keep_nan and not nulls):
                    values = tensor_values(col)
                    if not nulls and keep_nan:
                        values[np.isnan(values).all(axis=1)] = ABSENT
                    elif keep_nan:
                        values[~col.is_valid().to_numpy(zero_copy_only=False)] = ABSENT
                    arrays[i], changed = pa.FixedSizeListArray.from_arrays(
                        pa.array(values.reshape(-1)), col.type.list_size), True
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


def tensor_values(array: Any) -> np.ndarray:
    """A `fixed_size_list<float32>[K]` column as a writable float32 `[rows, K]` array; a null
    row (a missing tensor) is K NaNs."""
    k = array.type.list_size
    flat = array.values.to_numpy(zero_copy_only=False)  # the whole child, before slicing
    start = array.offset * k
    out = np.array(flat[start:start + len(array) * k], np.float32).reshape(len(array), k)
    if array.null_count:
        out[~array.is_valid().to_numpy(zero_copy_only=False)] = np.nan
    return out


def is_tensor(array: Any) -> bool:
    import pyarrow as pa

    return pa.types.is_fixed_size_list(array.type)


def raw_columns(batch: Any, columns: Sequence[Column]) -> dict[str, np.ndarray]:
    """A RecordBatch as a preprocessing_fn's raw contract: float32 `[B]` with NaN for missing,
    strings as bytes objects with b"" for missing, a tensor column as float32 `[B, *shape]`."""
    out: dict[str, np.ndarray] = {}
    for c in columns:
        col = batch.column(c.name)
        if c.shape:
            out[c.name] = tensor_values(col).reshape(len(col), *c.shape)
        elif c.is_numeric:
            out[c.name] = numeric_values(col)
        else:
            values, idx = dictionary_parts(col)
            table = np.array([*values, b""], dtype=object)
            out[c.name] = table[idx] if len(idx) else np.zeros(0, object)
    return out


def encoded_columns(batches: Sequence[Any], columns: Sequence[Column]) -> dict[str, Any]:
    """The rows of `batches` (consecutive record batches, see `group_batches`) as one batch
    of `raw_columns`, each string column left encoded for a graph that decodes it
    (graphs.tft.feed): its distinct values packed as Arrow holds them and a code per row
    (`tft.feed.Packed`, `packed_strings`), or else as `tft.feed.Codes`."""
    from baton.graphs.tft.feed import Codes

    out: dict[str, Any] = {}
    for c in columns:
        if c.is_numeric or c.shape:
            parts = [raw_columns(b, [c])[c.name] for b in batches]
            out[c.name] = parts[0] if len(parts) == 1 else np.concatenate(parts)
            continue
        packed = packed_strings([b.column(c.name) for b in batches])
        if packed is not None:
            out[c.name] = packed
            continue
        values, codes, base = [], [], 0
        for b in batches:
            vals, idx = dictionary_parts(b.column(c.name))
            values.append(np.array([*vals, b""], dtype=object))
            codes.append(np.asarray(idx, dtype=np.int32) + np.int32(base))
            base += len(values[-1])
        out[c.name] = Codes(values[0], codes[0]) if len(batches) == 1 else Codes(
            np.concatenate(values), np.concatenate(codes))
    return out


_OFFSETS = {"binary": np.int32, "string": np.int32, "large_binary": np.int64,
            "large_string": np.int64}


def packed_strings(arrays: Sequence[Any]) -> Any:
    """Dictionary-encoded string columns (one per batch) as one `graphs.tft.feed.Packed`: each
    dictionary's values (and an empty value after them, as `encoded_columns`' `Codes` have)
    taken from its Arrow data and offsets buffers, the codes shifted past the dictionaries
    before. None when a column is not a dictionary of binary or string values without nulls
    (the caller then decodes it value by value)."""
    from baton.graphs.tft.feed import Packed

    data: list[Any] = []
    offsets: list[np.ndarray] = []
    codes: list[np.ndarray] = []
    pos = base = 0
    for array in arrays:
        dtype = getattr(array.type, "value_type", None)
        kind = _OFFSETS.get(str(dtype)) if dtype is not None else None
        if kind is None or array.null_count or array.dictionary.null_count:
            return None
        d = array.dictionary
        _, obuf, dbuf = d.buffers()
        offs = np.frombuffer(obuf, kind, len(d) + 1, d.offset * np.dtype(kind).itemsize)
        lo, hi = int(offs[0]), int(offs[-1])
        if hi > lo:
            data.append(memoryview(dbuf)[lo:hi])
        offsets += [offs[:-1].astype(np.int64) + (pos - lo), np.array([pos + hi - lo], np.int64)]
        pos += hi - lo
        codes.append(array.indices.to_numpy(zero_copy_only=False).astype(np.int32) + base)
        base += len(d) + 1
    offsets.append(np.array([pos], np.int64))
    return Packed(b"".join(data), np.concatenate(offsets),
                  codes[0] if len(codes) == 1 else np.concatenate(codes))
