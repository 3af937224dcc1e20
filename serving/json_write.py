"""Responses written as TF Serving's REST API writes them (json_tensor.cc MakeJsonFrom*).

Numbers: a float or double is written with six significant digits when that reads back
as the same value, else with full precision (max_digits10), with ".0" added to whole
numbers not in exponent form (WriteDecimal): float32 0.2 is `0.2`, not its double
expansion `0.20000000298023224`; 9000000 is `9e+06`, 999999 is `999999.0`. NaN and
infinities are `NaN`, `Infinity`, `-Infinity`. Integers and booleans as they are;
strings as UTF-8 text, or `{"b64": ...}` for outputs whose name ends in `_bytes` (and,
ours, for values that are not UTF-8: TF Serving writes the raw bytes, which is not JSON).
Other dtypes (half, bfloat16, complex, uint16, ...) are refused: "Failed to write JSON
value for tensor type: complex64" (INVALID_ARGUMENT).

Row format (`predictions`) needs a batch dimension on every output, the same on all
("has no shape information", "has inconsistent batch size"); columnar (`outputs`) writes
each tensor whole. Tensors are rendered to JSON text once, by numpy and orjson where the
values allow, and assembled as text.
"""

from __future__ import annotations

import base64
import json

import numpy as np
import orjson

from baton.serving.status import invalid

# numpy dtype -> TF's DataTypeString, for the dtypes WriteDecimal/Int/Bool/String write
_WRITABLE = {np.dtype(np.float32): "float", np.dtype(np.float64): "double",
             np.dtype(np.int32): "int32", np.dtype(np.int16): "int16",
             np.dtype(np.int8): "int8", np.dtype(np.uint8): "uint8",
             np.dtype(np.int64): "int64", np.dtype(np.bool_): "bool",
             np.dtype(np.uint32): "uint32", np.dtype(np.uint64): "uint64"}
_OTHER_NAMES = {np.dtype(np.float16): "half", np.dtype(np.uint16): "uint16",
                np.dtype(np.complex64): "complex64", np.dtype(np.complex128): "complex128"}
_FULL = {np.dtype(np.float32): ".9g", np.dtype(np.float64): ".17g"}  # max_digits10


def dtype_name(dtype: np.dtype) -> str:
    """TF's DataTypeString of a numpy dtype (as far as numpy has one)."""
    if dtype.kind == "O":
        return "string"
    return _WRITABLE.get(dtype) or _OTHER_NAMES.get(dtype) or str(dtype)


def decimals(values: np.ndarray) -> list[str]:
    """WriteDecimal's text of every value of a float32/float64 array, flattened."""
    flat = values.reshape(-1)
    if not flat.size:
        return []
    out = [f"{v:.6g}" for v in flat.tolist()]
    with np.errstate(all="ignore"):
        back = np.array(out, dtype=np.float64).astype(flat.dtype)
    finite = np.isfinite(flat)
    redo = np.flatnonzero(finite & (back != flat))
    if redo.size:
        full = _FULL[flat.dtype]
        for i in redo.tolist():
            out[i] = format(float(flat[i]), full)
    if not finite.all():
        for i in np.flatnonzero(~finite).tolist():
            v = float(flat[i])
            out[i] = "NaN" if v != v else ("Infinity" if v > 0 else "-Infinity")
    for i, s in enumerate(out):
        if "." not in s and "e" not in s and s[-1].isdigit():
            out[i] = s + ".0"
    return out


def _nest(texts: list[str], shape: tuple[int, ...]) -> str:
    """The JSON text of nested lists of `shape` whose leaves are `texts` (row-major)."""
    if not shape:
        return texts[0]
    if 0 in shape:  # no leaves: the nesting alone
        return orjson.dumps(np.empty(shape, dtype=np.int8).tolist()).decode()
    for size in reversed(shape):
        texts = ["[" + ",".join(texts[i:i + size]) + "]" for i in range(0, len(texts), size)]
    return texts[0]


def _string(v: bytes, as_bytes: bool):
    if not as_bytes:
        try:
            return v.decode()
        except UnicodeDecodeError:
            pass
    return {"b64": base64.b64encode(v).decode()}


def _leaf_texts(name: str, arr: np.ndarray) -> list[str]:
    """The JSON text of each value of `arr`, flattened; refuses unwritable dtypes."""
    dt = arr.dtype
    if dt.kind == "f" and dt in _FULL:
        return decimals(arr)
    if dt.kind == "O":
        as_bytes = name.endswith("_bytes")
        vals = [_string(v, as_bytes) if isinstance(v, bytes) else str(v)
                for v in arr.reshape(-1).tolist()]
        return [json.dumps(v) for v in vals]
    if dt not in _WRITABLE:
        raise invalid(f"Failed to write JSON value for tensor type: {dtype_name(dt)}")
    if dt == np.bool_:
        return ["true" if v else "false" for v in arr.reshape(-1).tolist()]
    return [str(v) for v in arr.reshape(-1).tolist()]


def tensor_json(name: str, arr: np.ndarray) -> str:
    """The JSON text of a whole tensor (AddTensorValues from dimension 0)."""
    if arr.dtype.kind in "iub" and arr.dtype in _WRITABLE and arr.ndim:
        return orjson.dumps(arr.tolist()).decode()  # the same text, at C speed
    return _nest(_leaf_texts(name, arr), arr.shape)


def item_jsons(name: str, arr: np.ndarray) -> list[str]:
    """The JSON text of each item along the batch dimension (AddTensorValues from 1)."""
    if arr.dtype.kind in "iub" and arr.dtype in _WRITABLE:
        return [orjson.dumps(x).decode() for x in arr.tolist()]
    leaves = _leaf_texts(name, arr)
    per = int(np.prod(arr.shape[1:], dtype=np.int64))
    return [_nest(leaves[i * per:(i + 1) * per], arr.shape[1:]) for i in range(arr.shape[0])]


def predict_json(outputs: dict[str, np.ndarray], row: bool) -> bytes:
    """MakeJsonFromTensors: `{"predictions": ...}` (row) or `{"outputs": ...}` (columnar)."""
    if not outputs:
        raise invalid("Cannot convert empty tensor map to JSON")
    names = sorted(outputs)
    if not row:
        if len(names) == 1:
            body = tensor_json(names[0], outputs[names[0]])
        else:
            body = "{" + ",".join(f"{json.dumps(k)}:{tensor_json(k, outputs[k])}"
                                  for k in names) + "}"
        return f'{{"outputs":{body}}}'.encode()
    batch = -1
    for k in names:
        v = outputs[k]
        if not v.ndim:
            raise invalid(f"Tensor name: {k} has no shape information ")
        if batch >= 0 and v.shape[0] != batch:
            raise invalid(f"Tensor name: {k} has inconsistent batch size: {v.shape[0]} "
                          f"expecting: {batch}")
        batch = v.shape[0]
    if len(names) == 1:
        items = item_jsons(names[0], outputs[names[0]])
    else:
        columns = [(json.dumps(k), item_jsons(k, outputs[k])) for k in names]
        items = ["{" + ",".join(f"{k}:{col[i]}" for k, col in columns) + "}"
                 for i in range(batch)]
    return ('{"predictions":[' + ",".join(items) + "]}").encode()


def classify_json(rows: list[list[tuple[str, float]]]) -> bytes:
    """MakeJsonFromClassificationResult: `{"results": [[[label, score], ...], ...]}`."""
    if not rows:
        raise invalid("Cannot convert empty ClassificationResults to JSON")
    scores = decimals(np.array([s for r in rows for _, s in r], dtype=np.float32))
    out, j = [], 0
    for r in rows:
        pairs = []
        for label, _ in r:
            pairs.append(f"[{json.dumps(label)},{scores[j]}]")
            j += 1
        out.append("[" + ",".join(pairs) + "]")
    return ('{"results":[' + ",".join(out) + "]}").encode()


def regress_json(values: list[float]) -> bytes:
    """MakeJsonFromRegressionResult: `{"results": [value, ...]}`."""
    if not values:
        raise invalid("Cannot convert empty RegressionResults to JSON")
    return ('{"results":[' + ",".join(decimals(np.array(values, dtype=np.float32)))
            + "]}").encode()
