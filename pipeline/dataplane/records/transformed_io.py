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

Every int64 array above (values, row lengths, indices, an integer label) is stored in the
narrowest of int8, int16, int32 and int64 that holds the chunk's values, with its bytes per
value in an int64_list feature `<key>$width` when that is below 8 (absent: int64). Token ids
and row lengths then take 1-2 bytes instead of 8: the text benchmark's 87 MB became 24 MB,
and writing it (copy, CRC, page cache) was a tenth of the transform stage's time. Readers
widen the values back to int64 (`graphs.input_pipeline`, `column` here); the dtype in the
feature spec stays int64.

`metadata.json` lists the columns' dtypes, tensor shapes and encodings.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from baton.pipeline.dataplane.records.example_codec import _ld, _varint

FORMAT = "baton-columnar-tfrecord-v2"  # v2: narrowed int64 arrays ($width); v1 read alike
METADATA = "metadata.json"
LENGTHS = "$row_lengths_"
INDICES = "$indices"
WIDTH = "$width"
_NARROW = tuple((np.dtype(t).itemsize, np.dtype(t), np.iinfo(t)) for t in (np.int8, np.int16,
                                                                         np.int32))


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


def narrow(v: np.ndarray) -> tuple[np.ndarray, int | None]:
    """(the array to store, its bytes per value when narrowed, else None): an int64 array as
    the narrowest signed integer type that holds its values; anything else as it is."""
    if v.dtype != np.int64 or not v.size:
        return v, None
    lo, hi = int(v.min()), int(v.max())
    for width, dtype, info in _NARROW:
        if info.min <= lo and hi <= info.max:
            return v.astype(dtype), width
    return v, None


def column(features: Any, key: str, dtype: str) -> np.ndarray:
    """The flat values of stored array `key` of a parsed chunk (a tf.train.Example's feature
    map), as `dtype`: a narrowed int64 array is widened back (a string column: its values)."""
    feature = features[key]
    if dtype == "string":
        return np.array(list(feature.bytes_list.value), dtype=object)
    raw = feature.bytes_list.value[0]
    width = features[key + WIDTH].int64_list.value[0] if key + WIDTH in features else None
    if width is None:
        return np.frombuffer(raw, np.dtype(dtype).newbyteorder("<"))
    stored = next((d for w, d, _ in _NARROW if w == width), None)
    if stored is None or dtype != "int64":
        raise ValueError(f"transformed chunk: {key}{WIDTH} is {width} for a {dtype} column; "
                         f"expected 1, 2 or 4 for an int64 one")
    return np.frombuffer(raw, stored.newbyteorder("<")).astype(np.int64)


def _entry(name: str, field: int, body: list[Any]) -> tuple[list[Any], int]:
    """A Features map entry `name` -> Feature{<field>: body} (bytes_list 1, int64_list 3):
    its parts and size, each nested length prefix computed from the body's size."""
    n1 = sum(len(p) if isinstance(p, bytes) else p.nbytes for p in body)
    feature = 1 + len(_varint(n1)) + n1
    key = _ld(0x0A, name.encode())
    size = len(key) + 1 + len(_varint(feature)) + feature  # map entry {key, value}
    head = (b"\x0a" + _varint(size) + key + b"\x12" + _varint(feature)
            + bytes((field << 3 | 2,)) + _varint(n1))
    return [head, *body], len(head) + n1


def encode_chunk(columns: Mapping[str, Any]) -> bytes:
    """One record holding every column of a chunk: the tf.Example bytes, built by hand with
    each entry's nested length prefixes computed from its size, so a numeric column's memory
    is joined in as is (the transform writes ~30 bytes a row, 320 MB at 10M rows, so copies
    of it are measurable). int64 arrays are narrowed (`narrow`, the module docstring)."""
    parts: list[Any] = []
    total = 0
    for name, v in _arrays(columns):
        stored, width = narrow(v)
        entry, size = _entry(name, 1, _value_list(stored))
        parts += entry
        total += size
        if width is not None:  # Int64List{value: [width]}, packed
            entry, size = _entry(name + WIDTH, 3, [b"\x0a\x01" + bytes((width,))])
            parts += entry
            total += size
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
