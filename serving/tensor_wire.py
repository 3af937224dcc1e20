"""TensorProto in protobuf's wire format, by hand: Predict's hot path (predict_wire.py).

Converting a small input TensorProto to numpy through the message API (`float_val` as a
Python sequence, `tensor_shape.dim` as messages) and filling output TensorProtos field by
field cost more than everything else of a gRPC Predict on the event loop together (about
40 us of 60, bench/serving/path_cost.py). Here the common forms are read and written as
the bytes they are: a serialized TensorProto (upb writes it canonically: fields in number
order, repeated numbers packed) is walked once, its packed float/double values or
tensor_content taken with `np.frombuffer`; outputs are written as dtype, shape and packed
values around the array's own bytes.

Only what is checked to round-trip is handled: `decode_tensor` returns None and
`encode_tensor` returns None for anything else (strings, values in varint fields on
input, large integer outputs, malformed or unusual encodings; string outputs are
written), and the caller uses
tensor_proto.py's `to_ndarray` / `from_ndarray`, with their answers and errors. Tests
compare both paths on every dtype (tests/serving/test_tensor_wire.py).
"""

from __future__ import annotations

import numpy as np

from baton.serving.tensor_proto import DT_STRING, dtype_enum
from baton.serving.tensor_proto import varint as _varint

# TensorProto's packed fields for float (5) and double (6) values, by dtype enum
_FLOAT_FIELDS = {1: (5, "<f4", np.float32, 4), 2: (6, "<f8", np.float64, 8)}
_NUMERIC = {1: np.float32, 2: np.float64, 3: np.int32, 4: np.uint8, 5: np.int16, 6: np.int8,
            9: np.int64, 10: np.bool_, 17: np.uint16, 19: np.float16, 22: np.uint32,
            23: np.uint64}
# dtype enum -> the varint field holding its values (int_val 7, int64_val 10, bool_val 11,
# half_val 13 as the float16's bits, uint32_val 16, uint64_val 17)
_VARINT_FIELDS = {3: 7, 4: 7, 5: 7, 6: 7, 17: 7, 9: 10, 10: 11, 19: 13, 22: 16, 23: 17}
MAX_VARINT_VALUES = 64  # larger integer outputs: protobuf's C encoder is faster
MASK64 = (1 << 64) - 1


_SMALL = [bytes((i,)) for i in range(0x80)]


def varint(n: int) -> bytes:
    """n as a protobuf varint (n >= 0), the one-byte ones from a table."""
    return _SMALL[n] if n < 0x80 else _varint(n)


def _dim(size: int) -> bytes:
    """A TensorShapeProto.Dim field (size 0 is the empty message, as proto3 writes it)."""
    if not size:
        return b"\x12\x00"
    v = varint(size)
    return b"\x12" + varint(len(v) + 1) + b"\x08" + v


def read_varint(b: bytes, pos: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        c = b[pos]
        pos += 1
        v |= (c & 0x7F) << shift
        if not c & 0x80:
            return v, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _shape(b: bytes) -> list[int] | None:
    """The dims of a serialized TensorShapeProto; None if unknown rank or negative."""
    dims: list[int] = []
    pos, end = 0, len(b)
    while pos < end:
        key, pos = read_varint(b, pos)
        if key == 0x12:  # dim
            n, pos = read_varint(b, pos)
            dim, stop, size = b[pos:pos + n], pos + n, 0
            if stop > end:
                return None
            pos, q = stop, 0
            while q < n:
                k, q = read_varint(dim, q)
                if k == 0x08:
                    size, q = read_varint(dim, q)
                elif k == 0x12:  # the dim's name: proto3 strings are UTF-8 to protobuf
                    m, q = read_varint(dim, q)
                    try:
                        dim[q:q + m].decode()
                    except UnicodeDecodeError:
                        return None
                    q += m
                else:
                    return None
            if q != n or size >= 1 << 63:  # a field past the dim's end; a negative size
                return None
            dims.append(size)
        else:  # unknown_rank (3) or anything else
            return None
    return dims


_SHAPES: dict[bytes, list[int]] = {}  # serialized TensorShapeProto -> dims


def fast_tensor(raw: bytes, start: int, end: int) -> tuple | None:
    """(values offset, values length, spec, dims) of the TensorProto in raw[start:end] in
    the usual form of an input: float or double, a shape, packed values, nothing else."""
    if end - start > 4 and raw[start] == 0x08 and raw[start + 2] == 0x12 \
            and raw[start + 3] < 0x80:
        spec = _FLOAT_FIELDS.get(raw[start + 1])
        if spec is not None:
            pos = start + 4 + raw[start + 3]
            shape = raw[start + 4:pos]
            dims = _SHAPES.get(shape)
            if dims is None:
                dims = _shape(shape)
                if dims is None:
                    return None
                if len(_SHAPES) >= 4096:
                    _SHAPES.clear()
                _SHAPES[shape] = dims
            if pos == end:
                return pos, 0, spec, dims
            if raw[pos] == (spec[0] << 3 | 2) and pos + 1 < end:
                size, first = read_varint(raw, pos + 1)
                if first + size == end:
                    return first, size, spec, dims
    return None


def decode_tensor(raw: bytes) -> np.ndarray | None:
    """The array of a serialized TensorProto, or None when to_ndarray must decide."""
    try:
        fast = fast_tensor(raw, 0, len(raw))
    except (IndexError, ValueError):
        return None
    if fast is not None:
        return tensor_values(raw, *fast)
    return decode_general(raw)


def tensor_values(raw: bytes, offset: int, size: int, spec: tuple, dims: list[int]
            ) -> np.ndarray | None:
    """The array of packed values raw[offset:offset + size]."""
    _, wire_dtype, np_dtype, itemsize = spec
    count = 1
    for d in dims:
        count *= d
    if size == count * itemsize:
        return np.frombuffer(raw, wire_dtype, count, offset).astype(np_dtype).reshape(dims)
    if size == itemsize and count > 1:  # TF's "fill" convention: one value broadcast
        return np.full(dims, np.frombuffer(raw, wire_dtype, 1, offset)[0], dtype=np_dtype)
    return None


def decode_general(raw: bytes) -> np.ndarray | None:
    """decode_tensor for any field order and repetition upb could write."""
    dtype = 0
    dims: list[int] | None = []
    values = content = None
    pos, end = 0, len(raw)
    try:
        while pos < end:
            key, pos = read_varint(raw, pos)
            field, wire = key >> 3, key & 7
            if wire == 0 and field in (1, 3):  # dtype, version_number
                v, pos = read_varint(raw, pos)
                if field == 1:
                    dtype = v
                continue
            if wire != 2 or field not in (2, 4, 5, 6):
                return None
            n, pos = read_varint(raw, pos)
            chunk, pos = raw[pos:pos + n], pos + n
            if field == 2:
                dims = _SHAPES.get(chunk)
                if dims is None:
                    dims = _shape(chunk)
                    if dims is None:
                        return None
                    if len(_SHAPES) >= 4096:
                        _SHAPES.clear()
                    _SHAPES[chunk] = dims
            elif field == 4:
                content = chunk
            else:
                if _FLOAT_FIELDS.get(dtype, (0,))[0] != field:
                    return None
                values = chunk if values is None else values + chunk
    except (IndexError, ValueError):
        return None
    if pos != end or dims is None:
        return None
    count = 1
    for d in dims:
        count *= d
    if content:
        np_dtype = _NUMERIC.get(dtype)
        if np_dtype is None or values is not None:
            return None
        item = np.dtype(np_dtype).itemsize
        if len(content) != count * item:
            return None
        return np.frombuffer(content, dtype=np_dtype).reshape(dims).copy()
    spec = _FLOAT_FIELDS.get(dtype)
    if spec is None:
        return None
    values = values or b""
    return tensor_values(values, 0, len(values), spec, dims)




def _head(dtype: np.dtype, shape: tuple) -> tuple[int, bytes] | None:
    """(dtype enum, the serialized dtype and tensor_shape fields), or None (a dtype
    TensorProto has no enum for)."""
    key = (dtype, shape)
    hit = _HEADS.get(key)
    if hit is not None or key in _HEADS:
        return hit
    if len(_HEADS) >= 4096:
        _HEADS.clear()
    try:
        dt = dtype_enum(dtype)
    except Exception:  # noqa: BLE001 - an unsupported dtype: from_ndarray's error
        _HEADS[key] = None
        return None
    out = [b"\x08", varint(dt)]
    if shape:
        dims = b"".join(_dim(d) for d in shape)
        out += [b"\x12", varint(len(dims)), dims]
    head = _HEADS[key] = (dt, b"".join(out))
    return head


_HEADS: dict[tuple, tuple[int, bytes] | None] = {}


def encode_tensor(arr: np.ndarray, tensor_content: bool = False) -> bytes | None:
    """`arr` as a serialized TensorProto (as from_ndarray fills one), or None."""
    head = _head(arr.dtype, arr.shape)
    if head is None:
        return None
    dt, prefix = head
    out = [prefix]
    if dt == DT_STRING:  # string_val (8) fields, as from_ndarray fills them
        for v in arr.reshape(-1).tolist():
            b = v if isinstance(v, bytes) else str(v).encode()
            out += [b"\x42", varint(len(b)), b]
        return b"".join(out)
    if tensor_content:
        data = np.ascontiguousarray(arr).tobytes()
        tag = b"\x22"
    elif dt in _FLOAT_FIELDS:
        data = np.ascontiguousarray(arr, dtype=_FLOAT_FIELDS[dt][1]).tobytes()
        tag = b"\x2a" if dt == 1 else b"\x32"
    else:
        if arr.size > MAX_VARINT_VALUES or dt not in _VARINT_FIELDS:
            return None  # complex values too: from_ndarray writes their pairs
        flat = arr.reshape(-1)
        if dt == 19:
            flat = flat.view(np.uint16)
        data = b"".join([_SMALL[v] if 0 <= v < 0x80 else varint(v & MASK64)
                         for v in flat.tolist()])
        tag = varint(_VARINT_FIELDS[dt] << 3 | 2)
    if data:
        out += [tag, varint(len(data)), data]
    return b"".join(out)
