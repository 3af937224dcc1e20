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
each tensor whole. Tensors are rendered to JSON text and assembled as text: integer and
boolean tensors by orjson; a float tensor of 48 values or more by rounding its values to
the digits TF Serving writes with numpy (orjson's shortest form of such a double is that
decimal) and one orjson call, rows holding a value that needs another form (exponents,
NaN, a possible rounding tie) value by value; smaller ones value by value. With
batching, a float output is rendered once per batch and each request takes its rows
(batcher.BatchSlice).
"""

from __future__ import annotations

import base64
import json
import struct

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
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def dtype_name(dtype: np.dtype) -> str:
    """TF's DataTypeString of a numpy dtype (as far as numpy has one)."""
    if dtype.kind == "O":
        return "string"
    return _WRITABLE.get(dtype) or _OTHER_NAMES.get(dtype) or str(dtype)


_F32 = struct.Struct("<f")
_SMALL = 48  # below this many values the per-value loop beats numpy's fixed costs


def decimals(values: np.ndarray) -> list[str]:
    """WriteDecimal's text of every value of a float32/float64 array, flattened: six
    significant digits (absl::StrCat) when they read back as the value, else
    max_digits10; ".0" added to whole numbers not in exponent form."""
    f32 = values.dtype == np.float32
    full = "%.9g" if f32 else "%.17g"
    pack, unpack = _F32.pack, _F32.unpack
    out: list[str] = []
    append = out.append
    for v in values.reshape(-1).tolist():
        if v - v != 0.0:
            append("NaN" if v != v else ("Infinity" if v > 0 else "-Infinity"))
            continue
        text = "%.6g" % v  # noqa: UP031 - the fastest of the three forms, per value
        back = float(text)
        if (unpack(pack(back))[0] if f32 else back) != v:
            text = full % v
        if "." not in text and "e" not in text:
            text += ".0"
        append(text)
    return out


def _rounded(mag: np.ndarray, e: np.ndarray, digits: int) -> tuple[np.ndarray, np.ndarray]:
    """(mag rounded to `digits` significant digits as the nearest double, exact?) for
    magnitudes whose decimal exponent is e; not exact where a tie could be misjudged."""
    scale = 10.0 ** (digits - 1 - e)  # powers of ten up to 1e12: exact doubles
    prod = mag * scale
    m = np.rint(prod)
    sure = np.abs(prod - np.floor(prod) - 0.5) > 1e-6
    return m / scale, sure


def _float_rounded(arr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values rounded to the digits TF Serving writes, as doubles; where that is exact):
    for values in [1e-4, 1e6) (and zeros), six significant digits when they read back as
    the value, else nine (float32), so orjson's shortest form of each double is that
    decimal, in the fixed notation %g uses there. Not exact: other magnitudes (exponent
    form), NaN/Infinity, a possible rounding tie, a double needing 17 digits."""
    flat = arr.reshape(-1)
    f32 = flat.dtype == np.float32
    a64 = flat.astype(np.float64)
    mag = np.abs(a64)
    with np.errstate(all="ignore"):
        fast = ((mag >= 1e-4) & (mag < 1e6)) | (mag == 0)
        e = np.where(mag > 0, np.floor(np.log10(np.where(mag > 0, mag, 1.0))), 0.0)
        r6, sure = _rounded(mag, e, 6)
        low = r6 * 10.0 ** (5 - e) < 99999.5  # log10 rounded up across a power of ten
        e = np.where(low, e - 1, e)
        r6, sure = _rounded(mag, e, 6)
        ok6 = (r6.astype(flat.dtype) if f32 else r6) == mag
        if f32:
            r9, sure9 = _rounded(mag, e, 9)
            value = np.where(ok6, r6, r9)
            sure &= ok6 | sure9
        else:  # a double that needs 17 digits is written by Python
            value, sure = r6, sure & ok6
        fast &= sure & (value < 1e6)
    return np.copysign(value, a64).reshape(arr.shape), fast.reshape(arr.shape)


def _float_rows(name: str, arr: np.ndarray) -> list[str]:
    """The JSON text of each item of a float tensor along its first dimension: one orjson
    call over the rounded doubles, split into rows; rows holding a value orjson cannot
    write as TF Serving does are written value by value."""
    value, fast = _float_rounded(arr)
    n = arr.shape[0]
    if arr.ndim == 1:
        rows = orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY)[1:-1].decode().split(",")
    elif arr.ndim == 2 and arr.shape[1]:
        text = orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY).decode()
        rows = [f"[{r}]" for r in text[2:-2].split("],[")]
    else:
        rows = [orjson.dumps(v, option=orjson.OPT_SERIALIZE_NUMPY).decode() for v in value]
    if n and not fast.all():
        for i in np.flatnonzero(~fast.reshape(n, -1).all(axis=1)).tolist():
            rows[i] = _nest(decimals(arr[i]), arr.shape[1:])
    return rows


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
    """The JSON text of each value of a string or (small) float tensor, flattened."""
    if arr.dtype in _FLOATS:
        return decimals(arr)
    as_bytes = name.endswith("_bytes")
    vals = [_string(v, as_bytes) if isinstance(v, bytes) else str(v)
            for v in arr.reshape(-1).tolist()]
    return [json.dumps(v) for v in vals]


def _values(name: str, arr: np.ndarray):
    """Integer and boolean tensors as nested lists for orjson; None for strings and floats
    (`_leaf_texts`, `_float_rows`); refuses dtypes JSON cannot carry."""
    dt = arr.dtype
    if dt in _FLOATS or dt.kind == "O":
        return None
    if dt not in _WRITABLE:
        raise invalid(f"Failed to write JSON value for tensor type: {dtype_name(dt)}")
    return arr.tolist()


def tensor_json(name: str, arr: np.ndarray) -> str:
    """The JSON text of a whole tensor (AddTensorValues from dimension 0)."""
    values = _values(name, arr)
    if values is not None:
        return orjson.dumps(values).decode()
    if arr.dtype in _FLOATS and arr.size >= _SMALL and arr.ndim:
        return "[" + ",".join(_float_rows(name, arr)) + "]"
    return _nest(_leaf_texts(name, arr), arr.shape)


def item_jsons(name: str, arr: np.ndarray) -> list[str]:
    """The JSON text of each item along the batch dimension (AddTensorValues from 1)."""
    values = _values(name, arr)
    if values is not None:
        return [orjson.dumps(x).decode() for x in values]
    if arr.dtype in _FLOATS and arr.size >= _SMALL:
        return _float_rows(name, arr)
    leaves = _leaf_texts(name, arr)
    per = int(np.prod(arr.shape[1:], dtype=np.int64))
    return [_nest(leaves[i * per:(i + 1) * per], arr.shape[1:]) for i in range(arr.shape[0])]


def _rows_text(name: str, outputs) -> list[str] | None:
    """This request's rows of output `name` as JSON texts, rendered once for the whole
    batch when `outputs` is a batcher.BatchSlice of a numeric output (every task of the
    batch then takes its rows from the shared result); None otherwise."""
    batch = getattr(outputs, "batch", None)
    if batch is None:
        return None
    full, shared = batch
    texts = shared.get(name)
    if texts is None:
        arr = full[name]
        if arr.dtype.kind == "O" or not arr.ndim or len(arr) < 2:
            return None
        texts = shared[name] = item_jsons(name, arr)
    start, end = outputs.rows
    return texts[start:end]


_KEYS: dict[str, str] = {}  # output name -> its JSON text


def _key(name: str) -> str:
    text = _KEYS.get(name)
    if text is None:
        text = _KEYS[name] = json.dumps(name)
    return text


def predict_json(outputs: dict[str, np.ndarray], row: bool) -> bytes:
    """MakeJsonFromTensors: `{"predictions": ...}` (row) or `{"outputs": ...}` (columnar)."""
    if not outputs:
        raise invalid("Cannot convert empty tensor map to JSON")
    names = sorted(outputs)
    if not row:
        parts = []
        for k in names:
            rows = _rows_text(k, outputs)
            parts.append(tensor_json(k, outputs[k]) if rows is None
                         else "[" + ",".join(rows) + "]")
        body = parts[0] if len(names) == 1 else "{" + ",".join(
            f"{_key(k)}:{p}" for k, p in zip(names, parts, strict=True)) + "}"
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
    columns = []
    for k in names:
        rows = _rows_text(k, outputs)
        columns.append(item_jsons(k, outputs[k]) if rows is None else rows)
    if len(names) == 1:
        items = columns[0]
    else:
        keys = [_key(k) for k in names]
        items = ["{" + ",".join(f"{k}:{col[i]}" for k, col in zip(keys, columns, strict=True))
                 + "}" for i in range(batch)]
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
