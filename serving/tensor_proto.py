"""numpy <-> tensorflow.TensorProto without tf.make_tensor_proto's per-call overhead.

gRPC Predict converts every input and output tensor; the TF helpers cost tens of
microseconds each, which matters at thousands of requests per second. Responses fill the
typed value fields (`float_val`, `int64_val`, `string_val`, ...) as TF Serving's
default serialization (Tensor::AsProtoField) does, so clients that read
`outputs["y"].float_val` see the values; with `tensor_content=True`
(`--enable_serialization_as_tensor_content`) numeric values travel as raw bytes instead.
float and double values are written as one packed field parsed from the array's bytes
(no Python float per value); requests are read in either form. `examples_from_input_proto` decodes a
tensorflow.serving.Input (gRPC Classify/Regress, and their warmup logs) likewise.
"""

from __future__ import annotations

import numpy as np

from baton.serving.status import invalid

# DataType enum values from tensorflow/core/framework/types.proto
_NP_BY_DT = {
    1: np.float32, 2: np.float64, 3: np.int32, 4: np.uint8, 5: np.int16, 6: np.int8,
    7: object, 8: np.complex64, 9: np.int64, 10: np.bool_, 17: np.uint16, 18: np.complex128,
    19: np.float16, 22: np.uint32, 23: np.uint64,
}
_DT_BY_NP = {np.dtype(v): k for k, v in _NP_BY_DT.items() if v is not object}
# Fields holding values when tensor_content is empty (float16 uses half_val as ints).
_VAL_FIELD = {
    1: "float_val", 2: "double_val", 3: "int_val", 4: "int_val", 5: "int_val", 6: "int_val",
    9: "int64_val", 10: "bool_val", 17: "int_val", 19: "half_val", 22: "uint32_val",
    23: "uint64_val", 8: "scomplex_val", 18: "dcomplex_val",
}
_COMPLEX_PART = {8: np.float32, 18: np.float64}  # (real, imag) pairs, interleaved
DT_STRING = 7


def dtype_enum(dtype: np.dtype) -> int:
    if dtype.kind in ("O", "S", "U"):
        return DT_STRING
    try:
        return _DT_BY_NP[np.dtype(dtype)]
    except KeyError:
        raise invalid(f"unsupported tensor dtype {dtype}") from None


def to_ndarray(proto) -> np.ndarray:
    """Decodes a TensorProto; raises INVALID_ARGUMENT for a malformed one."""
    dt = proto.dtype
    if dt not in _NP_BY_DT:
        raise invalid(f"unsupported tensor dtype enum {dt}")
    shape = [d.size for d in proto.tensor_shape.dim]
    if any(s < 0 for s in shape):
        raise invalid(f"tensor shape must be fully defined. Received: {shape}")
    n = int(np.prod(shape)) if shape else 1
    if dt == DT_STRING:
        vals = list(proto.string_val)
        arr = np.empty(len(vals), dtype=object)
        arr[:] = vals
    elif proto.tensor_content:
        np_dt = np.dtype(_NP_BY_DT[dt])
        if len(proto.tensor_content) != n * np_dt.itemsize:
            raise invalid(f"tensor_content has {len(proto.tensor_content)} bytes, shape "
                          f"{shape} of {np_dt} needs {n * np_dt.itemsize}")
        return np.frombuffer(proto.tensor_content, dtype=np_dt).reshape(shape).copy()
    else:
        vals = getattr(proto, _VAL_FIELD[dt])
        if dt == 19:
            arr = np.array(vals, dtype=np.uint16).view(np.float16)
        elif dt in _COMPLEX_PART:
            if len(vals) % 2:
                raise invalid(f"{_VAL_FIELD[dt]} holds (real, imag) pairs: an even number "
                              f"of values. Received: {len(vals)}")
            arr = np.array(vals, dtype=_COMPLEX_PART[dt]).view(_NP_BY_DT[dt])
        else:
            arr = np.array(vals, dtype=_NP_BY_DT[dt])
    if arr.size == n:
        return arr.reshape(shape)
    if arr.size == 1 and n > 1:  # TF's "fill" convention: one value broadcast
        return np.full(shape, arr[0], dtype=arr.dtype)
    raise invalid(f"tensor has {arr.size} values but shape {shape} needs {n}")


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# Packed-field tags (field number << 3 | wire type 2) of TensorProto's float_val (5) and
# double_val (6): their packed payload is the little-endian IEEE bytes of the values.
_PACKED_TAG = {1: b"\x2a", 2: b"\x32"}


def from_ndarray(arr: np.ndarray, proto, tensor_content: bool = False) -> None:
    """Fills `proto` (a TensorProto) from `arr`: typed value fields, as TF Serving."""
    arr = np.asarray(arr)
    dt = dtype_enum(arr.dtype)
    proto.dtype = dt
    for s in arr.shape:
        proto.tensor_shape.dim.add(size=s)
    if dt == DT_STRING:
        proto.string_val.extend(
            v if isinstance(v, bytes) else str(v).encode() for v in arr.reshape(-1)
        )
    elif tensor_content:
        proto.tensor_content = np.ascontiguousarray(arr).tobytes()
    elif dt in _PACKED_TAG:
        data = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).tobytes()
        if data:
            proto.MergeFromString(_PACKED_TAG[dt] + _varint(len(data)) + data)
    elif dt == 19:  # half_val holds each float16's bits as an int
        proto.half_val.extend(arr.reshape(-1).view(np.uint16).tolist())
    elif dt in _COMPLEX_PART:  # scomplex_val/dcomplex_val: real, imag, real, imag, ...
        parts = np.ascontiguousarray(arr).reshape(-1).view(_COMPLEX_PART[dt])
        getattr(proto, _VAL_FIELD[dt]).extend(parts.tolist())
    else:
        getattr(proto, _VAL_FIELD[dt]).extend(arr.reshape(-1).tolist())


def examples_from_input_proto(inp) -> np.ndarray:
    """A tensorflow.serving.Input (example_list or example_list_with_context)."""
    kind = inp.WhichOneof("kind")
    if kind == "example_list":
        items = [e.SerializeToString() for e in inp.example_list.examples]
    elif kind == "example_list_with_context":
        ctx = inp.example_list_with_context.context.SerializeToString()
        items = [ctx + e.SerializeToString() for e in inp.example_list_with_context.examples]
    else:
        raise invalid("Input is empty: set example_list or example_list_with_context")
    if not items:
        raise invalid("Input is empty: no examples")
    arr = np.empty(len(items), dtype=object)
    arr[:] = items
    return arr
