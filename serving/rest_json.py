"""TF Serving's REST JSON tensor encoding: request rows/columns in, predictions out.

Row format (`instances`) and columnar format (`inputs`) as documented for TF Serving;
strings may be `{"b64": "..."}`. Every input is converted and checked against the
signature (dtype, rank, fixed dimensions) *before* it reaches the batcher, so one bad
request gets its own 400 and can never fail a batch it would have shared with others.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

import numpy as np

try:  # optional speedup (`orjson>=3.9,<4`); results are identical with or without it
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None  # type: ignore[assignment]

from serving.servable import Signature, TensorSpec
from serving.status import invalid


def loads(body: bytes) -> Any:
    """json.loads, via orjson when installed.

    orjson accepts a strict subset of what json.loads accepts (RFC 8259 only: no NaN or
    Infinity literals, no lone surrogates, no huge exponents or > 64-bit integers, no
    BOMs or UTF-16/32) and parses that subset to the same values; anything it refuses
    is parsed by json.loads, so results and error messages are json.loads' own.
    """
    if _orjson is not None:
        try:
            return _orjson.loads(body)
        except _orjson.JSONDecodeError:
            pass
    return json.loads(body)


def dumps(payload: Any, outputs: dict[str, np.ndarray] | None = None) -> bytes:
    """json.dumps(payload).encode(), via orjson when that gives the same JSON values.

    orjson is used only when `outputs` (the arrays `payload` was built from) are all
    numeric, and its result only when it is ASCII without `null`: orjson writes
    NaN/Infinity as null and non-ASCII unescaped, where json.dumps writes NaN/Infinity
    and \\u escapes, so those payloads are encoded again by json.dumps.
    """
    if _orjson is not None and outputs is not None and all(
            a.dtype.kind in _NUMERIC_KINDS for a in outputs.values()):
        try:
            data = _orjson.dumps(payload)
        except TypeError:  # e.g. an integer beyond 64 bits
            pass
        else:
            if data.isascii() and b"null" not in data:
                return data
    return json.dumps(payload).encode()


_NUMERIC_KINDS = frozenset("iubf")


def _decode_str(v, where: str):
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, dict):
        b = v.get("b64")
        if len(v) == 1 and isinstance(b, str):
            try:
                return base64.b64decode(b, validate=True)
            except (binascii.Error, ValueError):
                raise invalid(f"{where}: invalid base64 in 'b64'") from None
    if isinstance(v, list):
        return [_decode_str(x, where) for x in v]
    raise invalid(f"{where}: expected a string or {{\"b64\": ...}}. Received: {str(v)[:80]}")


def to_array(value, spec: TensorSpec, where: str, batched: bool) -> np.ndarray:
    """Converts one JSON value to a numpy array of spec's dtype and checks its shape."""
    try:
        if spec.is_string:
            if isinstance(value, list) and all(type(x) is str for x in value):
                arr = np.empty(len(value), dtype=object)
                arr[:] = [x.encode() for x in value]
            else:
                arr = np.array(_decode_str(value, where), dtype=object)
                if any(isinstance(x, list) for x in arr.reshape(-1)):
                    raise invalid(f"{where}: ragged nested lists are not a tensor")
        else:
            if _has_non_number(value):
                raise invalid(f"{where}: expected numbers for {spec.tf_dtype}. "
                              f"Received: {str(value)[:80]}")
            arr = np.asarray(value, dtype=spec.dtype)
    except (ValueError, TypeError, OverflowError) as e:
        raise invalid(f"{where}: cannot convert to {spec.tf_dtype}: {e}") from None
    _check_shape(arr, spec, where, batched)
    return arr


_NUMBER_TYPES = {float, int, bool}


def _has_non_number(v) -> bool:
    t = type(v)
    if t is float or t is int:
        return False
    if t is list:
        if set(map(type, v)) <= _NUMBER_TYPES:  # a flat row of numbers (the common case)
            return False
        return any(_has_non_number(x) for x in v)
    return t is not bool


def _check_shape(arr: np.ndarray, spec: TensorSpec, where: str, batched: bool) -> None:
    if spec.shape is None:
        return
    expected = spec.shape if batched else spec.shape[1:]
    if arr.ndim != len(expected) or any(
        e is not None and e != a for e, a in zip(expected, arr.shape, strict=False)
    ):
        want = [-1 if e is None else e for e in expected]
        raise invalid(f"{where}: expected shape {want} ({spec.tf_dtype}). "
                      f"Received shape {list(arr.shape)}")


def feeds_from_json(body, sig: Signature) -> tuple[dict[str, np.ndarray], bool]:
    """Returns (feeds, row_format) for a :predict body already parsed from JSON."""
    if not isinstance(body, dict):
        raise invalid("JSON request body must be an object. "
                      f"Received: {type(body).__name__}")
    has_i, has_c = "instances" in body, "inputs" in body
    if has_i == has_c:
        raise invalid("Missing 'inputs' or 'instances' key" if not has_i else
                      "Not both 'instances' and 'inputs' can be specified")
    specs = sig.inputs
    if has_i:
        rows = body["instances"]
        if not isinstance(rows, list) or not rows:
            raise invalid("'instances' must be a non-empty list. Received: "
                          f"{str(rows)[:80]}")
        if all(type(r) is dict for r in rows):
            feeds = {}
            for name, spec in specs.items():
                try:
                    col = [r[name] for r in rows]
                except KeyError:
                    raise invalid(f"instances: every instance must have input {name!r}. "
                                  f"Signature inputs: {sorted(specs)}") from None
                feeds[name] = to_array(col, spec, f"input {name!r}", batched=True)
            extra = set().union(*rows) - specs.keys()
            if extra:
                raise invalid(f"instances: unknown inputs {sorted(extra)}. "
                              f"Signature inputs: {sorted(specs)}")
            return feeds, True
        if len(specs) != 1:
            raise invalid("instances must be objects naming each input when the signature "
                          f"has several inputs: {sorted(specs)}")
        name, spec = next(iter(specs.items()))
        return {name: to_array(rows, spec, f"input {name!r}", batched=True)}, True
    cols = body["inputs"]
    if type(cols) is dict and not (len(cols) == 1 and "b64" in cols and len(specs) == 1
                                   and "b64" not in specs):
        unknown = cols.keys() - specs.keys()
        missing = specs.keys() - cols.keys()
        if unknown or missing:
            raise invalid(f"inputs: unknown {sorted(unknown)}, missing {sorted(missing)}. "
                          f"Signature inputs: {sorted(specs)}")
        return {k: to_array(v, specs[k], f"input {k!r}", batched=True)
                for k, v in cols.items()}, False
    if len(specs) != 1:
        raise invalid(f"inputs must be an object naming each input: {sorted(specs)}")
    name, spec = next(iter(specs.items()))
    return {name: to_array(cols, spec, f"input {name!r}", batched=True)}, False


def _jsonable(name: str, arr: np.ndarray):
    if arr.dtype == object:
        b64 = name.endswith("_bytes")
        flat: list[Any] = []
        for v in arr.reshape(-1):
            if isinstance(v, bytes) and not b64:
                try:
                    flat.append(v.decode())
                    continue
                except UnicodeDecodeError:
                    pass
            flat.append({"b64": base64.b64encode(v).decode()} if isinstance(v, bytes) else v)
        out = np.empty(len(flat), dtype=object)
        out[:] = flat
        return out.reshape(arr.shape).tolist()
    return arr.tolist()


def predict_response(outputs: dict[str, np.ndarray], row_format: bool) -> dict:
    """{"predictions": ...} for rows, {"outputs": ...} for columns, as TF Serving."""
    if not row_format:
        if len(outputs) == 1:
            k, v = next(iter(outputs.items()))
            return {"outputs": _jsonable(k, v)}
        return {"outputs": {k: _jsonable(k, v) for k, v in outputs.items()}}
    if len(outputs) == 1:
        k, v = next(iter(outputs.items()))
        return {"predictions": _jsonable(k, v)}
    sizes = {v.shape[0] if v.ndim else -1 for v in outputs.values()}
    if len(sizes) != 1 or -1 in sizes:
        raise invalid("outputs have different batch sizes; use the columnar 'inputs' format")
    cols = {k: _jsonable(k, v) for k, v in outputs.items()}
    n = sizes.pop()
    return {"predictions": [{k: c[i] for k, c in cols.items()} for i in range(n)]}
