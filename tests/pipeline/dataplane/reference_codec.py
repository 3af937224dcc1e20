"""The example encoder as it was before the Arrow/CRC rewrite (commit 89b455c), kept verbatim
as the reference `test_example_codec.py` compares the new encoder against."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

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


def _varint_array(n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Varint encodings of non-negative int64s < 2**28: (bytes [N, 4], lengths [N])."""
    out = np.zeros((len(n), 4), np.uint8)
    lens = np.ones(len(n), np.int64)
    rest = n.astype(np.int64)
    for i in range(4):
        b = (rest & 0x7F).astype(np.uint8)
        rest = rest >> 7
        more = rest > 0
        out[:, i] = b | (more.astype(np.uint8) << 7)
        lens += more if i < 3 else 0
    return out, lens


def encode_batch(
    names: Sequence[str], columns: Sequence[np.ndarray], numeric: Sequence[bool],
    nan: Mapping[str, np.ndarray] | None = None,
) -> list[bytes]:
    """Serialized examples, one per row of the equally long `columns`.

    Numeric columns are float arrays (NaN = missing); string columns are object or bytes arrays
    of `bytes`/`str` ("" = missing). `nan` marks, per numeric column, the rows whose NaN is a
    value of the data rather than a missing value: those are written as a NaN float.
    """
    n = len(columns[0]) if columns else 0
    if n == 0:
        return []
    pieces: list[tuple[np.ndarray, Any]] = []  # (length per row, writer)
    lengths = np.zeros(n, np.int64)
    for name, col, is_num in zip(names, columns, numeric, strict=True):
        if is_num:
            values = np.asarray(col, np.float32)
            present: np.ndarray
            if values.ndim > 1:  # a tensor column: [rows, K]
                values = values.reshape(n, -1)
                present = np.asarray(~np.isnan(values).all(axis=1))
            else:
                present = ~np.isnan(values)
            if nan and name in nan:
                present |= nan[name]
            k = values.shape[1] if values.ndim > 1 else 1
            prefix = np.frombuffer(float_entry_prefix(name, k), np.uint8)
            width = len(prefix) + 4 * k
            row_len = present.astype(np.int64) * width
            pieces.append((row_len, ("num", prefix, values, present)))
        else:
            values = np.asarray(col, dtype=object)
            uniq, inverse = np.unique(values.astype(str) if values.size else values,
                                      return_inverse=True)
            entries = [
                b"" if u == MISSING else bytes_entry(name, u.encode("utf-8")) for u in uniq
            ]
            ent_len = np.array([len(e) for e in entries], np.int64)
            row_len = ent_len[inverse]
            pieces.append((row_len, ("str", entries, inverse)))
        lengths += row_len
    header, header_len = _varint_array(lengths)
    total = header_len + 1 + lengths
    ends = np.cumsum(total)
    starts = ends - total
    buf = np.empty(int(ends[-1]), np.uint8)
    buf[starts] = 0x0A  # Example.features (field 1, length-delimited)
    for i in range(4):
        sel = header_len > i
        buf[starts[sel] + 1 + i] = header[sel, i]
    cursor = starts + 1 + header_len
    for row_len, spec in pieces:
        if spec[0] == "num":
            _, prefix, values, present = spec
            rows = np.nonzero(present)[0]
            k4 = 4 * (values.shape[1] if values.ndim > 1 else 1)
            block = np.empty((len(rows), len(prefix) + k4), np.uint8)
            block[:, : len(prefix)] = prefix
            block[:, len(prefix):] = np.ascontiguousarray(
                values[rows], "<f4").view(np.uint8).reshape(-1, k4)
            idx = cursor[rows][:, None] + np.arange(block.shape[1])
            buf[idx] = block
        else:
            _, entries, inverse = spec
            for code, entry in enumerate(entries):
                if not entry:
                    continue
                rows = np.nonzero(inverse == code)[0]
                idx = cursor[rows][:, None] + np.arange(len(entry))
                buf[idx] = np.frombuffer(entry, np.uint8)
        cursor = cursor + row_len
    raw = buf.tobytes()
    return [raw[s:e] for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]
