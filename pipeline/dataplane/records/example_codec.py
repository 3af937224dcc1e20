"""Columnar batches to serialized `tf.train.Example` records (and TFRecord framing), vectorised.

Why not build `tf.train.Example` messages one by one? At ~10 µs per message that caps ingestion
near 100k rows/s, and the scale benchmarks write tens of millions of rows. Our examples have a
fixed, tiny shape (each column a one-value `float_list` or `bytes_list`, a missing value an
absent feature), so the wire bytes can be assembled for a whole batch at once: a float column
is a constant prefix plus four bytes per row, a string column is one precomputed entry per
distinct value. The output is byte-for-byte what protobuf produces for the same message
(features in column order), which `tests/pipeline/dataplane/test_example_codec.py` checks.

A tensor column (a 2-d float array `[rows, K]`, e.g. flattened images) is a `float_list` of K
values per row: its prefix is constant too, followed by 4*K value bytes. A row whose values are
all NaN is a missing tensor (an absent feature); NaNs among present values are written as NaN.

How: every column becomes one Arrow binary array of its per-row feature-entry bytes (a float
column from a numpy `[rows, width]` block, a string column by `take` from its entries), and
`pyarrow.compute.binary_join_element_wise` concatenates them row by row in C++. With
`framed=True` each row also gets its TFRecord header (length, masked CRC-32C of the length)
and footer (masked CRC-32C of the example); the CRCs are folded feature by feature from the
per-value CRCs (`crc32c`), so no Python code runs per row and the framed batch is one buffer
that the writer appends to a shard as is (the bytes `tf.io.TFRecordWriter` would write).

String columns arrive as numpy object arrays of `str` ("" = missing) or, faster, as `Strings`:
dictionary codes per row plus the distinct UTF-8 values, as the CSV reader makes them without
a Python object per row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from baton.pipeline.dataplane.records import crc32c

MISSING = ""  # a string column value that means "absent"


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _ld(tag: int, payload: bytes) -> bytes:
    """A length-delimited field: tag byte, varint length, payload."""
    return bytes([tag]) + _varint(len(payload)) + payload


def _entry(name: bytes, feature: bytes) -> bytes:
    """One `Features.feature` map entry (field 1 of Features) holding `feature`."""
    return _ld(0x0A, _ld(0x0A, name) + _ld(0x12, feature))


def float_entry_prefix(name: str, k: int = 1) -> bytes:
    """The constant bytes of a `k`-value float feature entry; the 4*k value bytes follow."""
    values = b"\0" * (4 * k)
    float_list = _ld(0x0A, values)  # FloatList.value, packed
    entry = _entry(name.encode(), _ld(0x12, float_list))  # Feature.float_list (field 2)
    return entry[: len(entry) - len(values)]


def bytes_entry(name: str, value: bytes) -> bytes:
    """The full bytes of a one-value bytes feature entry."""
    return _entry(name.encode(), _ld(0x0A, _ld(0x0A, value)))  # Feature.bytes_list.value


# Strings.from_arrow: the rows sampled, and the share of distinct values among them above
# which a column is not dictionary-encoded
DISTINCT_SAMPLE = 2048
DISTINCT_SHARE = 0.9


class Strings:
    """A dictionary-encoded string column: row i holds `values[codes[i]]`.

    `values` is an Arrow binary array of distinct UTF-8 values (b"" = missing); `codes` an
    int array, one per row. Indexing (`s[mask]`, `s[rows]`) keeps the values and takes codes.
    """

    __slots__ = ("codes", "values")

    def __init__(self, codes: np.ndarray, values: Any) -> None:
        import pyarrow as pa

        self.codes = np.asarray(codes, np.int32)
        self.values = values if values.type == pa.binary() else values.cast(pa.binary())

    @classmethod
    def from_objects(cls, values: np.ndarray) -> Strings:
        """From an object (or str) array of `str`, with the old encoder's conversion."""
        import pyarrow as pa

        values = np.asarray(values, dtype=object)
        uniq, inverse = np.unique(values.astype(str) if values.size else values.astype(str),
                                  return_inverse=True)
        return cls(inverse.reshape(-1), pa.array([u.encode("utf-8") for u in uniq], pa.binary()))

    @classmethod
    def from_arrow(cls, array: Any) -> Strings:
        """From an Arrow string/binary array without nulls: dictionary-encoded here, unless
        its first `DISTINCT_SAMPLE` rows are nearly all distinct (free text, ids): then each
        row is its own value (codes 0..n-1, the array itself as the values). Hashing every
        row to find the few repeats of such a column cost ~0.1 s of ingest's parsing thread
        per million rows of short texts, and saves nothing downstream: the encoder, the
        Arrow copy and the transform's feed all work per value, and a value that repeats is
        still read by its code (a dictionary may hold a value twice)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if not pa.types.is_dictionary(array.type) and len(array) > DISTINCT_SAMPLE:
            if isinstance(array, pa.ChunkedArray):
                array = array.combine_chunks()
            distinct = pc.count_distinct(array.slice(0, DISTINCT_SAMPLE)).as_py()
            if distinct > DISTINCT_SHARE * DISTINCT_SAMPLE:
                return cls(np.arange(len(array), dtype=np.int32), array)
        d = array.dictionary_encode() if not pa.types.is_dictionary(array.type) else array
        if isinstance(d, pa.ChunkedArray):
            d = d.combine_chunks()
        return cls(d.indices.to_numpy(zero_copy_only=False), d.dictionary)

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, index: Any) -> Strings:
        return Strings(self.codes[index], self.values)

    @property
    def dtype(self) -> np.dtype:  # a string column, like an object array
        return np.dtype(object)

    def missing(self) -> np.ndarray:
        """True where the row's value is "" (missing)."""
        import pyarrow.compute as pc

        empty = np.asarray(pc.equal(pc.binary_length(self.values), 0).to_numpy(
            zero_copy_only=False), bool)
        return empty[self.codes] if len(empty) else np.zeros(len(self.codes), bool)

    def compact(self) -> Strings:
        """Only the values some row uses, in their order here (itself when every value is used).

        The values were sorted once, as np.unique gave them; nothing reads their order (a
        row's value is found by its code), and on a text column of distinct rows sorting each
        batch's values was a sixth of ingest's CPU."""
        import pyarrow as pa

        used = np.flatnonzero(np.bincount(self.codes, minlength=len(self.values)))
        if len(used) == len(self.values):
            return self
        remap = np.zeros(len(self.values), np.int32)
        remap[used] = np.arange(len(used), dtype=np.int32)
        return Strings(remap[self.codes], self.values.take(pa.array(used)))

    def to_numpy(self) -> np.ndarray:
        """The rows as an object array of `str`."""
        vals = np.array([v.decode("utf-8") for v in self.values.to_pylist()] or [""], object)
        return vals[self.codes]


def as_strings(values: Any) -> Strings:
    return values if isinstance(values, Strings) else Strings.from_objects(values)


def _varint_block(n: np.ndarray, tag: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Varints of non-negative int64s < 2**35 as a `[rows, 6]` uint8 block (led by the tag
    byte when given) and each row's byte count."""
    out = np.zeros((len(n), 6), np.uint8)
    lens = np.ones(len(n), np.int64)
    rest = np.asarray(n, np.int64)
    at = 0
    if tag is not None:
        out[:, 0] = tag
        at = 1
    for i in range(5):
        b = (rest & 0x7F).astype(np.uint8)
        rest = rest >> 7
        more = rest > 0
        out[:, at + i] = b | (more.astype(np.uint8) << 7)
        lens += more
    if (rest > 0).any():
        raise ValueError(f"a value of {int(np.max(n))} bytes is too long for one record")
    return out, lens + at


def _ragged(block: np.ndarray, lens: np.ndarray) -> Any:
    """An Arrow large_binary array of the first `lens[i]` bytes of each `block` row."""
    import pyarrow as pa

    keep = np.arange(block.shape[1]) < np.asarray(lens)[:, None]
    data = block[keep]  # row-major: the rows' bytes, concatenated
    offsets = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    return pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(lens),
                                            [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _fixed(block: np.ndarray, present: np.ndarray | None = None) -> Any:
    """An Arrow large_binary array: row i is `block`'s next row when present, else empty
    (`block` holds the present rows only)."""
    import pyarrow as pa

    block = np.ascontiguousarray(block, np.uint8)
    width = block.shape[1]
    n = len(present) if present is not None else block.shape[0]
    offsets = np.zeros(n + 1, np.int64)
    if present is None:
        offsets[1:] = np.arange(1, n + 1, dtype=np.int64) * width
    else:
        np.cumsum(present.astype(np.int64) * width, out=offsets[1:])
    return pa.LargeBinaryArray.from_buffers(pa.large_binary(), n,
                                            [None, pa.py_buffer(offsets), pa.py_buffer(block)])


def _bytes_of(array: Any) -> tuple[np.ndarray, np.ndarray]:
    """(data as uint8, offsets as int64 [n + 1]) of an Arrow binary/large_binary array."""
    import pyarrow as pa

    if array.type != pa.large_binary():
        array = array.cast(pa.large_binary())
    _, off, data = array.buffers()
    offsets = np.frombuffer(off, np.int64, len(array) + 1, array.offset * 8)
    base = int(offsets[0])
    buf = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    return buf[base: int(offsets[-1])], offsets - base


def _string_entries(name: str, values: Any) -> Any:
    """Each distinct value's full bytes feature entry (`bytes_entry`), b"" for b"", vectorised."""
    import pyarrow as pa
    import pyarrow.compute as pc

    values = values.cast(pa.large_binary())
    lv = np.asarray(pc.binary_length(values).to_numpy(zero_copy_only=False), np.int64)
    vl_v = _varint_block(lv, 0x0A)
    l1 = vl_v[1] + lv  # BytesList
    vl_1 = _varint_block(l1, 0x0A)
    l2 = vl_1[1] + l1  # Feature
    vl_2 = _varint_block(l2, 0x12)
    key = _ld(0x0A, name.encode())
    l3 = len(key) + vl_2[1] + l2  # the map entry
    vl_3 = _varint_block(l3, 0x0A)
    k = len(lv)
    keys = _fixed(np.frombuffer(key, np.uint8)[None, :].repeat(k, 0))
    joined = pc.binary_join_element_wise(
        _ragged(*vl_3), keys, _ragged(*vl_2), _ragged(*vl_1), _ragged(*vl_v), values,
        pa.scalar(b"", pa.large_binary()))
    return pc.if_else(pc.equal(lv, 0) if k else pa.array([], pa.bool_()),
                      pa.scalar(b"", pa.large_binary()), joined)


def encode(
    names: Sequence[str], columns: Sequence[Any], numeric: Sequence[bool],
    nan: Mapping[str, np.ndarray] | None = None, framed: bool = False,
) -> Any:
    """Serialized examples, one per row of the equally long `columns`, as an Arrow
    large_binary array; with `framed`, each one a complete TFRecord record instead.

    Numeric columns are float arrays (NaN = missing), `[rows, K]` for a tensor column; string
    columns are `Strings` or object arrays of `str` ("" = missing). `nan` marks, per numeric
    column, the rows whose NaN is a value of the data rather than a missing value: those are
    written as a NaN float.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(columns[0]) if columns else 0
    if n == 0:
        return pa.array([], pa.large_binary())
    pieces: list[Any] = []  # per column: an Arrow array of each row's entry bytes
    folds: list[tuple[Any, np.ndarray | int, np.ndarray]] = []  # (rows, length, raw CRC)
    lengths = np.zeros(n, np.int64)
    for name, col, is_num in zip(names, columns, numeric, strict=True):
        if is_num:
            values = np.asarray(col, np.float32)
            if values.ndim > 1:  # a tensor column: [rows, K]
                values = values.reshape(n, -1)
                present = np.asarray(~np.isnan(values).all(axis=1))
            else:
                present = ~np.isnan(values)
            if nan and name in nan:
                present = present | np.asarray(nan[name], bool)
            k = values.shape[1] if values.ndim > 1 else 1
            prefix = np.frombuffer(float_entry_prefix(name, k), np.uint8)
            width = len(prefix) + 4 * k
            every = bool(present.all())
            rows: Any = slice(None) if every else np.flatnonzero(present)
            vals = np.ascontiguousarray(values[rows], "<f4")
            m = len(vals)
            block = np.empty((m, width), np.uint8)
            block[:, : len(prefix)] = prefix
            block[:, len(prefix):] = vals.view(np.uint8).reshape(m, 4 * k)
            pieces.append(_fixed(block, None if every else present))
            lengths += present * width if not every else width
            head = int(crc32c.shift(np.zeros(1, np.uint32) ^ crc32c.raw_rows(prefix[None, :]),
                                    4 * k)[0])
            if k == 1:
                raw = crc32c.apply(crc32c.word_op(0), vals.view(np.uint32).reshape(m))
            else:
                raw = crc32c.raw_rows(vals.view(np.uint8).reshape(m, 4 * k))
            folds.append((rows, width, raw ^ np.uint32(head)))
        else:
            strings = as_strings(col)
            entries = _string_entries(name, strings.values)
            data, offsets = _bytes_of(entries)
            ent_len = np.diff(offsets)
            ent_raw = crc32c.raw_varlen(data, offsets)
            codes = pa.array(strings.codes)
            pieces.append(entries.take(codes))
            row_len = ent_len[strings.codes]
            lengths += row_len
            folds.append((slice(None), row_len, ent_raw[strings.codes]))
    hdr, hdr_len = _varint_block(lengths, 0x0A)  # Example.features (field 1): tag, length
    state = np.full(n, crc32c.INIT, np.uint32)
    for j in range(int(hdr_len.max())):
        rows_j: Any = slice(None) if j < int(hdr_len.min()) else np.flatnonzero(hdr_len > j)
        state[rows_j] = crc32c._step(state[rows_j], hdr[rows_j, j])
    for rows, length, raw in folds:
        if isinstance(length, int):
            state[rows] = crc32c.apply(crc32c.zeros_op_wide(length), state[rows]) ^ raw
        else:
            state[rows] = crc32c.shift(state[rows], length[rows]) ^ raw
    parts = [_ragged(hdr, hdr_len), *pieces]
    if framed:
        size = hdr_len + lengths
        if (size >= 1 << 32).any():
            raise ValueError(f"an example of {int(size.max())} bytes is too long for a TFRecord")
        frame = np.zeros(n, dtype=[("len", "<u8"), ("crc", "<u4")])
        frame["len"] = size
        init8 = int(crc32c.shift(np.array([crc32c.INIT], np.uint32), 8)[0]) ^ crc32c.INIT
        frame["crc"] = crc32c.masked(
            crc32c.apply(crc32c.word_op(4), size.astype(np.uint32)) ^ np.uint32(init8))
        foot = crc32c.masked(state ^ np.uint32(crc32c.INIT)).astype("<u4")
        parts = [_fixed(frame.view(np.uint8).reshape(n, 12)), *parts,
                 _fixed(foot.view(np.uint8).reshape(n, 4))]
    return pc.binary_join_element_wise(*parts, pa.scalar(b"", pa.large_binary()))


def encode_batch(
    names: Sequence[str], columns: Sequence[Any], numeric: Sequence[bool],
    nan: Mapping[str, np.ndarray] | None = None,
) -> list[bytes]:
    """Serialized examples, one per row of the equally long `columns` (see `encode`)."""
    return encode(names, columns, numeric, nan).to_pylist()
