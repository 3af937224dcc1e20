"""One PredictRequest inputs map entry in protobuf's wire format: name and array at once.

A request of many small inputs (the penguins model's PredictRequest: seven one-value
tensors, two of them strings) cost more CPU per call on gRPC than its JSON row on REST
(83 against 62 us, docs/benchmarks-serving.md): each entry was walked field by field,
strings sent through the protobuf message, and every array made by three numpy calls.
Here an entry in the form upb writes (key 1 first, then a TensorProto of dtype, shape
and values, nothing else) is read by looking up its *head*, the bytes of its name and
of the tensor's dtype and shape, in a cache of what they mean (name, dtype, dims, value
count), so a client's next call with the same inputs pays one slice and one dict lookup
before its values: packed float/double values or string_val fields. Anything else
returns None, and predict_wire's general walk or the protobuf message decide (with
their answers and errors); tests/serving/test_tensor_wire.py compares the results.
"""

from __future__ import annotations

import numpy as np

from baton.serving.tensor_proto import DT_STRING
from baton.serving.tensor_wire import _FLOAT_FIELDS, _shape, read_varint

_STRING_VAL = 0x42  # TensorProto.string_val (8), length-delimited
MAX_HEADS = 4096

# head bytes -> (name, dtype spec or None for strings, dims, value count, values tag,
# reshape needed), or False: an entry this module leaves to the general walk
_HEADS: dict[bytes, tuple | bool] = {}


def _head(raw: bytes, name_at: int, name_end: int, shape_at: int, values_at: int,
          dt: int) -> tuple | bool:
    """What an entry's head means, or False for one read elsewhere."""
    dims = _shape(raw[shape_at:values_at])
    if dims is None:
        return False
    try:
        name = raw[name_at:name_end].decode()
    except UnicodeDecodeError:
        return False  # the message parser refuses it, with its own error
    count = 1
    for d in dims:
        count *= d
    if dt == DT_STRING:
        return name, None, dims, count, _STRING_VAL, len(dims) != 1
    spec = _FLOAT_FIELDS.get(dt)
    if spec is None:
        return False
    return name, spec, dims, count, spec[0] << 3 | 2, len(dims) != 1


def read_entry(raw: bytes, pos: int, end: int) -> tuple | None:
    """(name, array, region) of the inputs map entry in raw[pos:end], or None when it is
    not in the usual form. region is (name, values offset, values length, spec, dims)
    for packed values that fill the shape exactly (predict_wire's layouts), else None.
    The arrays own their data (writable; the batcher and servables may keep them)."""
    if end - pos < 8 or raw[pos] != 0x0A:
        return None
    n = raw[pos + 1]
    t = pos + 2 + n  # the value (TensorProto) field's tag
    if n & 0x80 or t + 6 > end or raw[t] != 0x12:
        return None
    h = t + 2
    if raw[t + 1] & 0x80:
        size, h = read_varint(raw, t + 1)
    else:
        size = raw[t + 1]
    if h + size != end or h + 4 > end or raw[h] != 0x08 or raw[h + 1] & 0x80 \
            or raw[h + 2] != 0x12 or raw[h + 3] & 0x80:
        return None
    v = h + 4 + raw[h + 3]  # the values, after dtype and shape
    if v > end:
        return None
    key = raw[pos + 1:t] + raw[h:v]  # the name with its length byte, then dtype and shape
    head = _HEADS.get(key)
    if head is None:
        head = _head(raw, pos + 2, t, h + 4, v, raw[h + 1])
        if len(_HEADS) >= MAX_HEADS:
            _HEADS.clear()
        _HEADS[key] = head
    if head is False:
        return None
    name, spec, dims, count, tag, reshape = head  # type: ignore[misc]
    if spec is None:
        return _strings(raw, v, end, name, dims, count, reshape)
    first, size = v, 0
    if v < end:
        if raw[v] != tag:
            return None
        size, first = read_varint(raw, v + 1)
        if first + size != end:
            return None
    if size != count * spec[3]:
        if size != spec[3] or count <= 1:
            return None  # to_ndarray says what is wrong
        return name, np.full(dims, np.frombuffer(raw, spec[1], 1, first)[0], spec[2]), None
    arr = np.frombuffer(raw, spec[1], count, first).astype(spec[2])
    return name, arr.reshape(dims) if reshape else arr, (name, first, size, spec, dims)


def _strings(raw: bytes, q: int, end: int, name: str, dims: list, count: int,
             reshape: bool) -> tuple | None:
    """(name, object array of bytes, None) of the string_val fields in raw[q:end]."""
    vals = []
    while q < end:
        if raw[q] != _STRING_VAL:
            return None
        n = raw[q + 1]
        if n & 0x80:
            n, s = read_varint(raw, q + 1)
        else:
            s = q + 2
        q = s + n
        if q > end:
            return None
        vals.append(raw[s:q])
    if len(vals) != count:
        if len(vals) != 1 or count <= 1:
            return None  # to_ndarray says what is wrong
        return name, np.full(dims, vals[0], dtype=object), None
    arr = np.empty(count, dtype=object)
    arr[:] = vals
    return name, arr.reshape(dims) if reshape else arr, None
