"""TF Serving's REST JSON tensor encoding: request rows/columns in, predictions out.

Row format (`instances`) and columnar format (`inputs`) as documented for TF Serving;
strings may be `{"b64": "..."}`. Every input is converted and checked against the
signature's input names and dtypes *before* it reaches the batcher, so one bad request
gets its own 400 and can never fail a batch it would have shared with others. Shapes are
TensorFlow's to check, as in TF Serving; the batcher queues requests by input layout, so a
request whose shape does not fit still fails alone.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import operator
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson

from baton.serving.conventions import examples_hint
from baton.serving.servable import Signature, TensorSpec
from baton.serving.status import invalid


def loads(body: bytes) -> Any:
    """json.loads, via orjson where orjson parses the same values.

    orjson accepts a strict subset of what json.loads accepts (RFC 8259 only: no NaN or
    Infinity literals, no lone surrogates, no huge exponents or > 64-bit integers, no
    BOMs or UTF-16/32) and parses that subset to the same values; anything it refuses
    is parsed by json.loads, so results and error messages are json.loads' own.
    """
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return json.loads(body)


def dumps(payload: Any, outputs: dict[str, np.ndarray] | None = None) -> bytes:
    """json.dumps(payload).encode(), via orjson when that gives the same JSON values.

    orjson is used only when `outputs` (the arrays `payload` was built from) are all
    numeric or strings (whose payload values are str or {"b64": str}), and its result
    only when it is ASCII without `null`: orjson writes NaN/Infinity as null and
    non-ASCII unescaped, where json.dumps writes NaN/Infinity and \\u escapes, so those
    payloads (and any whose text happens to contain "null") go to json.dumps. Both
    escape quotes, backslashes and control characters, so string values are equal.
    """
    if outputs is not None and all(a.dtype.kind in _NUMERIC_KINDS for a in outputs.values()):
        try:
            data = orjson.dumps(payload)
        except TypeError:  # e.g. an integer beyond 64 bits
            pass
        else:
            if data.isascii() and b"null" not in data:
                return data
    return json.dumps(payload).encode()


_NUMERIC_KINDS = frozenset("iubfO")  # numbers, and TF strings (object arrays of bytes)


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


def to_array(value, spec: TensorSpec, where: str) -> np.ndarray:
    """Converts one JSON value to a numpy array of spec's dtype.

    Shapes are not checked here: as TF Serving, inputs are checked by name and dtype and
    TensorFlow decides whether a shape fits when the signature runs.
    """
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


class _RowPlan:
    """How to turn `instances` rows of scalars into a signature's inputs, in few numpy calls.

    Built once per signature whose every input is a batch of scalars (shape [None]): the
    raw-feature signatures Baton exports. Inputs are grouped (numeric ones by dtype, the
    strings together); one itemgetter call per row and one np.array call per group
    convert a whole group, each row of the group's array being one contiguous input.
    `key` is the batching key those arrays have (see batcher.Task), so the request does
    not compute it again.
    """

    __slots__ = ("names", "groups", "strings", "where", "key")

    def __init__(self, sig: Signature):
        specs = sig.inputs
        self.names = tuple(specs)
        by_dtype: dict[np.dtype, list[str]] = {}
        strings = [k for k, s in specs.items() if s.is_string]
        for k, s in specs.items():
            if not s.is_string:
                by_dtype.setdefault(s.dtype, []).append(k)
        self.groups = tuple((dt, _getter(ks)) for dt, ks in by_dtype.items())
        self.strings = _getter(strings) if strings else None
        where = {k: (i, j) for i, ks in enumerate(by_dtype.values()) for j, k in enumerate(ks)}
        where.update({k: (len(by_dtype), j) for j, k in enumerate(strings)})
        self.where = tuple((k, *where[k]) for k in self.names)
        self.key = (id(sig),) + tuple((k, (), specs[k].dtype.str) for k in sorted(specs))


def _getter(names: list[str]) -> Callable[[dict], tuple]:
    """row -> tuple of its values for `names` (itemgetter returns a bare value for one)."""
    if len(names) == 1:
        k = names[0]
        return lambda r: (r[k],)
    return operator.itemgetter(*names)


def _row_plan(sig: Signature) -> _RowPlan | None:
    """The signature's _RowPlan, or None when an input is not a batch of scalars."""
    try:
        return sig.cache["rest_row_plan"]
    except KeyError:
        pass
    plan = None
    if sig.inputs and all(s.shape == (None,) and (s.is_string or s.dtype.kind in "fiub")
                          for s in sig.inputs.values()):
        plan = _RowPlan(sig)
    sig.cache["rest_row_plan"] = plan
    return plan


_STR_ONLY = {str}


def _rows_fast(rows: list, plan: _RowPlan) -> dict[str, np.ndarray] | None:
    """Feeds for rows that are dicts of exactly the inputs, each a JSON scalar of the
    right kind; None for anything else (the general path then converts the body and
    raises its own error, so messages never depend on which path ran)."""
    n = len(plan.names)
    for r in rows:
        if type(r) is not dict or len(r) != n:  # with every name present: no extras
            return None
    blocks = []
    try:
        for dtype, get in plan.groups:
            cols = list(zip(*map(get, rows), strict=True))  # one tuple per input
            if not set(map(type, itertools.chain.from_iterable(cols))) <= _NUMBER_TYPES:
                return None
            blocks.append(np.array(cols, dtype=dtype))
        if plan.strings is not None:
            cols = list(zip(*map(plan.strings, rows), strict=True))
            if set(map(type, itertools.chain.from_iterable(cols))) != _STR_ONLY:
                return None
            block = np.empty((len(cols), len(rows)), dtype=object)
            block[...] = [[x.encode() for x in col] for col in cols]
            blocks.append(block)
    except (KeyError, ValueError, TypeError, OverflowError):
        return None
    return {k: blocks[i][j] for k, i, j in plan.where}


def parse_predict(body, sig: Signature) -> tuple[dict[str, np.ndarray], bool, tuple | None]:
    """(feeds, row_format, batching key or None) for a :predict body parsed from JSON."""
    if type(body) is dict and "inputs" not in body:
        rows = body.get("instances")
        if type(rows) is list and rows:
            plan = _row_plan(sig)
            if plan is not None:
                feeds = _rows_fast(rows, plan)
                if feeds is not None:
                    return feeds, True, plan.key
    feeds, row = feeds_from_json(body, sig)
    return feeds, row, None


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
                if name in sig.defaults and not any(name in r for r in rows):
                    continue  # optional: the signature's default stands in
                try:
                    col = [r[name] for r in rows]
                except KeyError:
                    raise invalid(f"instances: every instance must have input {name!r}. "
                                  f"Signature inputs: {sorted(specs)}"
                                  f"{examples_hint(set().union(*rows))}") from None
                feeds[name] = to_array(col, spec, f"input {name!r}")
            extra = set().union(*rows) - specs.keys()
            if extra:
                raise invalid(f"instances: unknown inputs {sorted(extra)}. "
                              f"Signature inputs: {sorted(specs)}{examples_hint(extra)}")
            return feeds, True
        if len(specs) != 1:
            raise invalid("instances must be objects naming each input when the signature "
                          f"has several inputs: {sorted(specs)}")
        name, spec = next(iter(specs.items()))
        return {name: to_array(rows, spec, f"input {name!r}")}, True
    cols = body["inputs"]
    if type(cols) is dict and not (len(cols) == 1 and "b64" in cols and len(specs) == 1
                                   and "b64" not in specs):
        unknown = cols.keys() - specs.keys()
        missing = specs.keys() - cols.keys() - sig.defaults.keys()
        if unknown or missing:
            raise invalid(f"inputs: unknown {sorted(unknown)}, missing {sorted(missing)}. "
                          f"Signature inputs: {sorted(specs)}{examples_hint(unknown)}")
        return {k: to_array(v, specs[k], f"input {k!r}")
                for k, v in cols.items()}, False
    if len(specs) != 1:
        raise invalid(f"inputs must be an object naming each input: {sorted(specs)}")
    name, spec = next(iter(specs.items()))
    return {name: to_array(cols, spec, f"input {name!r}")}, False


def _jsonable(name: str, arr: np.ndarray):
    if arr.dtype == object:
        b64 = name.endswith("_bytes")
        if arr.ndim == 1 and not b64:  # the common case: a batch of UTF-8 strings
            try:
                return [v.decode() for v in arr.tolist()]
            except (AttributeError, UnicodeDecodeError):
                pass
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
