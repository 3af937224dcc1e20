"""The `transformed` artifact format: TFRecords of columnar chunks.

Each record is a tf.Example whose features are whole columns of `chunk_rows` rows. Writing
costs one small proto per chunk instead of one per row, and the reader
(`graphs.input_pipeline`) turns a record into `[n, ...]` tensors with `decode_raw`, which is
why this format, not one tf.Example per row, lets the transform write ~1M rows/s.

What a column holds, per encoding (graphs.feature_spec.Feature):

- dense float32 / int64: the `n * prod(shape)` values as raw little-endian bytes, in one
  one-value bytes_list (row-major; the reader reshapes to `[n, *shape]`);
- dense string: a bytes_list of the `n * prod(shape)` values;
- ragged: the flat values as above (their inner uniform dimensions kept) under the name, and
  each ragged dimension's row lengths, raw int64, under `<name>$row_lengths_<k>` (k = 0 the
  rows' own, k = 1 the next level's...);
- sparse: the values under the name, each row's value count under `<name>$row_lengths_0`,
  and (more than one dimension per instance, tf.Transform's SparseFeature) the values'
  indices within their instance, raw int64 `[nnz, rank - 1]`, under `<name>$indices`. A
  2-D sparse output is tf.Transform's VarLenFeature: its values are kept in order and read
  back left-aligned, as tf.Transform's materialized examples read.

`metadata.json` lists the columns' dtypes, tensor shapes and encodings.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from baton.pipeline.dataplane.records.example_codec import _ld, _varint

FORMAT = "baton-columnar-tfrecord-v1"
METADATA = "metadata.json"
LENGTHS = "$row_lengths_"
INDICES = "$indices"


class Ragged:
    """A ragged (or sparse, as ragged rows plus indices) column in numpy: `values` (flat,
    inner uniform dimensions kept), `lengths[k]` the row lengths of level k (level 0: one per
    row), `indices` the values' positions within their instance (sparse only)."""

    def __init__(self, values: np.ndarray, lengths: list[np.ndarray],
                 indices: np.ndarray | None = None) -> None:
        self.values, self.lengths, self.indices = values, lengths, indices
        self._starts = [np.concatenate([[0], np.cumsum(x)]) for x in lengths]

    def __len__(self) -> int:
        return len(self.lengths[0])

    def rows(self, start: int, end: int) -> Ragged:
        lengths = []
        lo, hi = start, end
        for k, lens in enumerate(self.lengths):
            lengths.append(lens[lo:hi])
            lo, hi = int(self._starts[k][lo]), int(self._starts[k][hi])
        return Ragged(self.values[lo:hi], lengths,
                      None if self.indices is None else self.indices[lo:hi])

    def take(self, keep: np.ndarray) -> Ragged:
        """The rows where `keep` is True (the label's rows kept)."""
        if keep.all():
            return self
        mask = np.asarray(keep, bool)
        lengths = []
        for lens in self.lengths:
            lengths.append(lens[mask])
            mask = np.repeat(mask, lens)
        return Ragged(self.values[mask], lengths,
                      None if self.indices is None else self.indices[mask])


def to_numpy(value: Any, canonical_rank: int | None = None) -> Any:
    """An applied output as numpy: a dense array as is; a tf.RaggedTensor or tf.SparseTensor
    as `Ragged` (a ragged tensor's trailing uniform partitions folded into its values, so it
    has `canonical_rank` ragged levels; a sparse tensor's values in row-major order)."""
    if hasattr(value, "nested_row_lengths"):
        lengths = [np.asarray(x, np.int64) for x in value.nested_row_lengths()]
        flat = np.asarray(value.flat_values)
        rank = len(lengths) if canonical_rank is None else min(canonical_rank, len(lengths))
        if rank < len(lengths):  # the trailing partitions are uniform: fold them in
            inner = [int(d) for d in value.shape[rank + 1:]]
            flat = flat.reshape(-1, *inner)
            lengths = lengths[:rank]
        return Ragged(flat, lengths)
    if hasattr(value, "indices") and hasattr(value, "dense_shape"):
        idx = np.asarray(value.indices, np.int64)
        vals = np.asarray(value.values)
        n = int(np.asarray(value.dense_shape)[0])
        if len(idx):
            order = np.lexsort(idx.T[::-1])
            idx, vals = idx[order], vals[order]
        counts = np.bincount(idx[:, 0], minlength=n).astype(np.int64) if len(idx) else \
            np.zeros(n, np.int64)
        positions = idx[:, 1:] if idx.shape[1] > 2 else None
        return Ragged(vals, [counts], positions)
    return np.asarray(value)


def nonfinite_rows(columns: Mapping[str, Any]) -> dict[str, int]:
    """{name: rows holding a NaN or an infinity} of every float column (a numpy array or
    `Ragged`): what graphs.nonfinite.count_transformed finds reading these columns back once
    written, counted here on the arrays the apply step writes (no second pass)."""
    out = {}
    for name, v in columns.items():
        values = v.values if isinstance(v, Ragged) else np.asarray(v)
        if values.dtype.kind != "f":
            continue
        finite = np.isfinite(values)
        bad = ~finite.reshape(len(values), -1).all(axis=1) if values.ndim > 1 and values.size \
            else ~finite if values.ndim == 1 else np.zeros(len(values), bool)
        if isinstance(v, Ragged):  # a value's row: fold each level's rows into its parents
            for lens in reversed(v.lengths):
                rows = np.repeat(np.arange(len(lens)), lens)
                bad = np.bincount(rows[bad], minlength=len(lens)) > 0
        out[name] = int(bad.sum())
    return out


def _value_list(v: np.ndarray) -> list[Any]:
    """A BytesList body as parts to join: one raw little-endian value (numbers: the header
    and the column's own memory, no copy), or the strings themselves."""
    if v.dtype.kind in "OSU":
        return [_bytes_list([x if isinstance(x, bytes) else str(x).encode()
                             for x in v.reshape(-1).tolist()])]
    data = np.ascontiguousarray(v, v.dtype.newbyteorder("<")).reshape(-1).view(np.uint8)
    return [b"\x0a" + _varint(data.nbytes), data]


def _bytes_list(values: list[bytes]) -> bytes:
    """A BytesList body of many values, built by Arrow (no Python work per value)."""
    if not values:
        return b""
    import pyarrow as pa
    import pyarrow.compute as pc

    from baton.pipeline.dataplane.records.example_codec import _bytes_of, _ragged, _varint_block

    arr = pa.array(values, pa.large_binary())
    lens = np.asarray(pc.binary_length(arr).to_numpy(zero_copy_only=False), np.int64)
    joined = pc.binary_join_element_wise(_ragged(*_varint_block(lens, 0x0A)), arr,
                                         pa.scalar(b"", pa.large_binary()))
    return _bytes_of(joined)[0].tobytes()


def _arrays(columns: Mapping[str, Any]) -> list[tuple[str, np.ndarray]]:
    """(feature key, array) of every stored array of a chunk's columns."""
    out = []
    for name, v in columns.items():
        if isinstance(v, Ragged):
            out.append((name, v.values))
            out += [(f"{name}{LENGTHS}{k}", lens) for k, lens in enumerate(v.lengths)]
            if v.indices is not None:
                out.append((f"{name}{INDICES}", v.indices))
        else:
            out.append((name, np.asarray(v)))
    return out


def encode_chunk(columns: Mapping[str, Any]) -> bytes:
    """One record holding every column of a chunk: the tf.Example bytes, built by hand with
    each entry's nested length prefixes computed from its size, so a numeric column's memory
    is joined in as is (the transform writes ~30 bytes a row, 320 MB at 10M rows, so copies
    of it are measurable)."""
    parts: list[Any] = []
    total = 0
    for name, v in _arrays(columns):
        value_list = _value_list(v)
        n1 = sum(len(p) if isinstance(p, bytes) else p.nbytes for p in value_list)
        feature = 1 + len(_varint(n1)) + n1  # Feature{bytes_list: ...}
        key = _ld(0x0A, name.encode())
        body = len(key) + 1 + len(_varint(feature)) + feature  # map entry {key, value}
        head = (b"\x0a" + _varint(body) + key + b"\x12" + _varint(feature) + b"\x0a"
                + _varint(n1))
        parts += [head, *value_list]
        total += len(head) + n1
    return b"".join([b"\x0a" + _varint(total), *parts])


def encode_chunks(columns: Mapping[str, Any], chunk_rows: int) -> list[bytes]:
    """`columns` (equal lengths; numpy arrays or `Ragged`) as records of at most `chunk_rows`
    rows each."""
    n = len(next(iter(columns.values()))) if columns else 0
    return [encode_chunk({k: _rows(v, start, start + chunk_rows) for k, v in columns.items()})
            for start in range(0, n, chunk_rows)]


def _rows(v: Any, start: int, end: int) -> Any:
    return v.rows(start, min(end, len(v))) if isinstance(v, Ragged) else v[start:end]


def write_chunks(writer: Any, columns: Mapping[str, Any], chunk_rows: int) -> int:
    """Write `columns` (equal lengths) as records of at most `chunk_rows` rows; returns rows."""
    for record in encode_chunks(columns, chunk_rows):
        writer.write(record)
    return len(next(iter(columns.values()))) if columns else 0


def write_metadata(directory: Path, splits: Mapping[str, int], dtypes: Mapping[str, str],
                   label: str, chunk_rows: int, shapes: Mapping[str, Any] | None = None,
                   encodings: Mapping[str, str] | None = None) -> None:
    (directory / METADATA).write_text(json.dumps({
        "format": FORMAT, "chunk_rows": chunk_rows, "splits": dict(splits),
        "columns": dict(dtypes), "label": label,
        **({"shapes": {k: list(v) for k, v in shapes.items()}} if shapes else {}),
        **({"encodings": dict(encodings)} if encodings else {})},
        indent=2) + "\n")
