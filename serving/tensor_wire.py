"""TensorProto and PredictResponse in protobuf's wire format, by hand: Predict's hot path.

Converting a small input TensorProto to numpy through the message API (`float_val` as a
Python sequence, `tensor_shape.dim` as messages) and building a PredictResponse field by
field cost more than everything else of a gRPC Predict on the event loop together (about
40 us of 60, bench/serving/path_cost.py). Here the common forms are read and written as
the bytes they are: a serialized TensorProto (upb writes it canonically: fields in number
order, repeated numbers packed) is walked once, its packed float/double values or
tensor_content taken with `np.frombuffer`; outputs are written as dtype, shape and packed
values around the array's own bytes.

Only what is checked to round-trip is handled: `decode_tensor` returns None and
`encode_tensor` returns None for anything else (strings, values in varint fields on
input, large integer outputs, malformed or unusual encodings), and the caller uses
tensor_proto.py's `to_ndarray` / `from_ndarray`, with their answers and errors. Tests
compare both paths on every dtype (tests/serving/test_tensor_wire.py).
"""

from __future__ import annotations

import numpy as np

from baton.serving.tensor_proto import DT_STRING, dtype_enum

# TensorProto's packed fields for float (5) and double (6) values, by dtype enum
_FLOAT_FIELDS = {1: (5, "<f4", np.float32, 4), 2: (6, "<f8", np.float64, 8)}
_NUMERIC = {1: np.float32, 2: np.float64, 3: np.int32, 4: np.uint8, 5: np.int16, 6: np.int8,
            9: np.int64, 10: np.bool_, 17: np.uint16, 19: np.float16, 22: np.uint32,
            23: np.uint64}
# dtype enum -> the varint field holding its values (int_val 7, int64_val 10, bool_val 11,
# half_val 13 as the float16's bits, uint32_val 16, uint64_val 17)
_VARINT_FIELDS = {3: 7, 4: 7, 5: 7, 6: 7, 17: 7, 9: 10, 10: 11, 19: 13, 22: 16, 23: 17}
MAX_VARINT_VALUES = 64  # larger integer outputs: protobuf's C encoder is faster
_MASK64 = (1 << 64) - 1


_SMALL = [bytes((i,)) for i in range(0x80)]


def _varint(n: int) -> bytes:
    if n < 0x80:
        return _SMALL[n]
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _dim(size: int) -> bytes:
    """A TensorShapeProto.Dim field (size 0 is the empty message, as proto3 writes it)."""
    if not size:
        return b"\x12\x00"
    v = _varint(size)
    return b"\x12" + _varint(len(v) + 1) + b"\x08" + v


def _read_varint(b: bytes, pos: int) -> tuple[int, int]:
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
        key, pos = _read_varint(b, pos)
        if key == 0x12:  # dim
            n, pos = _read_varint(b, pos)
            dim, stop, size = b[pos:pos + n], pos + n, 0
            pos, q = stop, 0
            while q < n:
                k, q = _read_varint(dim, q)
                if k == 0x08:
                    size, q = _read_varint(dim, q)
                elif k == 0x12:  # the dim's name
                    m, q = _read_varint(dim, q)
                    q += m
                else:
                    return None
            if size >= 1 << 63:  # a negative size: to_ndarray says why
                return None
            dims.append(size)
        else:  # unknown_rank (3) or anything else
            return None
    return dims


_SHAPES: dict[bytes, list[int]] = {}  # serialized TensorShapeProto -> dims


def _fast_tensor(raw: bytes, start: int, end: int) -> tuple | None:
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
                size, first = _read_varint(raw, pos + 1)
                if first + size == end:
                    return first, size, spec, dims
    return None


def decode_tensor(raw: bytes) -> np.ndarray | None:
    """The array of a serialized TensorProto, or None when to_ndarray must decide."""
    try:
        fast = _fast_tensor(raw, 0, len(raw))
    except (IndexError, ValueError):
        return None
    if fast is not None:
        return _values(raw, *fast)
    return _decode_general(raw)


def _values(raw: bytes, offset: int, size: int, spec: tuple, dims: list[int]
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


def _decode_general(raw: bytes) -> np.ndarray | None:
    """decode_tensor for any field order and repetition upb could write."""
    dtype = 0
    dims: list[int] | None = []
    values = content = None
    pos, end = 0, len(raw)
    try:
        while pos < end:
            key, pos = _read_varint(raw, pos)
            field, wire = key >> 3, key & 7
            if wire == 0 and field in (1, 3):  # dtype, version_number
                v, pos = _read_varint(raw, pos)
                if field == 1:
                    dtype = v
                continue
            if wire != 2 or field not in (2, 4, 5, 6):
                return None
            n, pos = _read_varint(raw, pos)
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
    return _values(values, 0, len(values), spec, dims)




class PredictParts:
    """What Predict reads from a PredictRequest: the model spec, inputs, output filter."""

    __slots__ = ("name", "version", "label", "signature_name", "inputs", "output_filter")

    def __init__(self) -> None:
        self.name = self.signature_name = ""
        self.version: int | None = None
        self.label: str | None = None
        self.inputs: dict[str, np.ndarray] = {}
        self.output_filter: list[str] = []


def _fields(raw: bytes):
    """(field number, wire type, value or bytes) of a message's fields, in order."""
    pos, end = 0, len(raw)
    while pos < end:
        key, pos = _read_varint(raw, pos)
        wire = key & 7
        if wire == 0:
            v, pos = _read_varint(raw, pos)
            yield key >> 3, 0, v
        elif wire == 2:
            n, pos = _read_varint(raw, pos)
            if pos + n > end:
                raise ValueError("truncated")
            yield key >> 3, 2, raw[pos:pos + n]
            pos += n
        else:
            raise ValueError(f"wire type {wire}")


def _parse_model_spec(raw: bytes) -> tuple:
    """(name, version, label, signature_name) of a serialized ModelSpec; () if unusual."""
    name = signature_name = ""
    version: int | None = None
    label: str | None = None
    for field, wire, v in _fields(raw):
        if wire != 2 or field not in (1, 2, 3, 4):
            return ()
        if field == 2:  # version: an Int64Value
            if label is not None:
                return ()  # both of the oneof on the wire: protobuf's rules decide
            value = 0
            for f, w, x in _fields(v):
                if (f, w) != (1, 0):
                    return ()
                value = x - (1 << 64) if x >= 1 << 63 else x
            version = value
        elif field == 1:
            name = v.decode()
        elif field == 3:
            signature_name = v.decode()
        else:
            if version is not None:
                return ()
            label = v.decode()
    return name, version, label, signature_name


_SPECS: dict[bytes, tuple] = {}  # serialized ModelSpec -> _parse_model_spec's answer


def _model_spec(raw: bytes, parts: PredictParts) -> bool:
    """A ModelSpec's fields into `parts` (the same bytes are parsed once)."""
    hit = _SPECS.get(raw)
    if hit is None:
        hit = _parse_model_spec(raw)
        if len(_SPECS) >= 4096:
            _SPECS.clear()
        _SPECS[raw] = hit
    if not hit or parts.version is not None or parts.label is not None:
        return False  # unusual, or a second ModelSpec to merge: protobuf's rules decide
    parts.name, parts.version, parts.label, parts.signature_name = hit
    return True


def _input(raw: bytes, pos: int, end: int, parts: PredictParts, regions: list) -> bool:
    """The inputs map entry in raw[pos:end] (key 1, TensorProto 2) into `parts`; its
    packed values' place appended to `regions` (None when not in the usual form)."""
    name, tensor = "", None
    while pos < end:
        key = raw[pos]
        n = raw[pos + 1]
        pos += 2
        if n & 0x80:
            n, pos = _read_varint(raw, pos - 1)
        stop = pos + n
        if stop > end:
            return False
        if key == 0x0A:
            name = raw[pos:stop].decode()
        elif key == 0x12:
            tensor = (pos, stop)
        else:
            return False
        pos = stop
    if tensor is None:
        return False
    fast = _fast_tensor(raw, *tensor)
    if fast is not None:
        arr = _values(raw, *fast)
        count = fast[1] // fast[2][3]
        exact = arr is not None and arr.size == count
        regions.append((name, *fast) if exact else None)
    else:
        arr = _decode_general(raw[tensor[0]:tensor[1]])
        regions.append(None)
    if arr is None:
        return False
    parts.inputs[name] = arr
    return True


class _Layout:
    """A PredictRequest's bytes but its packed input values: a request of the same model
    spec, input names, dtypes and shapes and output filter is these literals around
    values of these lengths, and is read by comparing the literals."""

    __slots__ = ("size", "literals", "regions", "spec", "output_filter")

    def __init__(self, raw: bytes, parts: PredictParts, regions: list):
        self.size = len(raw)
        self.regions = sorted(regions, key=lambda r: r[1])
        self.literals = []
        at = 0
        for _, offset, size, _, _ in self.regions:
            self.literals.append((at, raw[at:offset]))
            at = offset + size
        self.literals.append((at, raw[at:]))
        self.spec = (parts.name, parts.version, parts.label, parts.signature_name)
        self.output_filter = list(parts.output_filter)

    def read(self, raw: bytes) -> PredictParts | None:
        if len(raw) != self.size:
            return None
        for at, literal in self.literals:
            if not raw.startswith(literal, at):
                return None
        parts = PredictParts()
        parts.name, parts.version, parts.label, parts.signature_name = self.spec
        parts.output_filter = list(self.output_filter)
        inputs = parts.inputs
        for name, offset, size, spec, dims in self.regions:
            inputs[name] = np.frombuffer(raw, spec[1], size // spec[3], offset).astype(
                spec[2]).reshape(dims)
        return parts


_LAYOUTS: list[_Layout] = []  # the most recent first
MAX_LAYOUTS = 16


def parse_predict_request(raw: bytes) -> PredictParts | None:
    """A serialized PredictRequest's parts, its inputs decoded by decode_tensor; None
    for anything that form does not cover (the caller parses the message instead)."""
    for layout in _LAYOUTS:
        parts = layout.read(raw)
        if parts is not None:
            return parts
    parts = PredictParts()
    regions: list = []
    pos, end = 0, len(raw)
    try:
        while pos < end:
            key = raw[pos]
            n = raw[pos + 1]
            pos += 2
            if n & 0x80:
                n, pos = _read_varint(raw, pos - 1)
            stop = pos + n
            if stop > end:
                return None
            if key == 0x12:  # an inputs map entry
                if not _input(raw, pos, stop, parts, regions):
                    return None
            elif key == 0x0A:
                if not _model_spec(raw[pos:stop], parts):
                    return None
            elif key == 0x1A:
                parts.output_filter.append(raw[pos:stop].decode())
            else:
                return None
            pos = stop
    except (ValueError, IndexError, UnicodeDecodeError):
        return None
    names = [r[0] for r in regions if r is not None]
    if regions and None not in regions and len(set(names)) == len(names):
        _LAYOUTS.insert(0, _Layout(raw, parts, regions))
        del _LAYOUTS[MAX_LAYOUTS:]
    return parts


def _head(dtype: np.dtype, shape: tuple) -> tuple[int, bytes] | None:
    """(dtype enum, the serialized dtype and tensor_shape fields), or None (strings, or
    a dtype TensorProto has no enum for)."""
    key = (dtype, shape)
    hit = _HEADS.get(key)
    if hit is not None or key in _HEADS:
        return hit
    if len(_HEADS) >= 4096:
        _HEADS.clear()
    try:
        dt = dtype_enum(dtype) if dtype.kind not in "OSU" else DT_STRING
    except Exception:  # noqa: BLE001 - an unsupported dtype: from_ndarray's error
        dt = DT_STRING
    if dt == DT_STRING:
        _HEADS[key] = None
        return None
    out = [b"\x08", _varint(dt)]
    if shape:
        dims = b"".join(_dim(d) for d in shape)
        out += [b"\x12", _varint(len(dims)), dims]
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
    if tensor_content:
        data = np.ascontiguousarray(arr).tobytes()
        tag = b"\x22"
    elif dt in _FLOAT_FIELDS:
        data = np.ascontiguousarray(arr, dtype=_FLOAT_FIELDS[dt][1]).tobytes()
        tag = b"\x2a" if dt == 1 else b"\x32"
    else:
        if arr.size > MAX_VARINT_VALUES:
            return None
        flat = arr.reshape(-1)
        if dt == 19:
            flat = flat.view(np.uint16)
        data = b"".join([_SMALL[v] if 0 <= v < 0x80 else _varint(v & _MASK64)
                         for v in flat.tolist()])
        tag = _varint(_VARINT_FIELDS[dt] << 3 | 2)
    if data:
        out += [tag, _varint(len(data)), data]
    return b"".join(out)


def model_spec(name: str, version: int, signature_name: str) -> bytes:
    """A serialized ModelSpec with name, version (an Int64Value, set even when 0) and
    signature_name, as Predict's response sets them."""
    out = []
    if name:
        n = name.encode()
        out += [b"\x0a", _varint(len(n)), n]
    inner = b"\x08" + _varint(version & _MASK64) if version else b""
    out += [b"\x12", _varint(len(inner)), inner]
    if signature_name:
        s = signature_name.encode()
        out += [b"\x1a", _varint(len(s)), s]
    return b"".join(out)


def predict_response(outputs: list[tuple[str, bytes]], spec: bytes) -> bytes:
    """A serialized PredictResponse: the outputs map (name, serialized TensorProto) and
    the serialized model_spec."""
    out = []
    for name, tensor in outputs:
        key = _KEYS.get(name)
        if key is None:
            if len(_KEYS) >= 4096:
                _KEYS.clear()
            k = name.encode()
            key = _KEYS[name] = b"\x0a" + _varint(len(k)) + k + b"\x12"
        size = _varint(len(tensor))
        out += [b"\x0a", _varint(len(key) + len(size) + len(tensor)), key, size, tensor]
    out += [b"\x12", _varint(len(spec)), spec]
    return b"".join(out)


_KEYS: dict[str, bytes] = {}  # output name -> its map entry's key field and value tag
