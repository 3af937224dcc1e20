"""TF Serving's REST JSON tensors: a :predict body in, the signature's feeds out.

The rules and the messages are TF Serving's (util/json_tensor.cc FillPredictRequestFromJson):

- `instances` (row format): a list whose items are either all objects naming every
  input, or all plain values/lists for a signature of one input (a `{"b64": ...}` item
  is a value, not an object). Each item is one tensor of the batch: every item of an input
  must have the same size ("Expecting tensor size") and shape ("Expecting shape"); the
  batch is their stack.
- `inputs` (columnar format): one value for a single input, else an object with a value
  per input name (other keys are not read).
- A value's shape is read along its first elements; every list must then have that
  length at its level, and the leaves sit at its deepest level. Leaves must be of the
  input's type, as rapidjson types them: a number for float/double, an integer in range
  for the integer types (1.0 is not an integer), true/false for bool, a string or
  `{"b64": ...}` for string. Other dtypes cannot be written in JSON (UNIMPLEMENTED, 501).

Conversion happens before the batcher, so one bad request gets its own 400 and never
fails a batch it would have shared. Shapes are TensorFlow's to check when the signature
runs, as in TF Serving. Well-formed values are converted level by level with C-speed
checks (`_dense`); only a value that fails them is walked element by element
(`_walk`), to name its first error as TF Serving does.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Collection
from typing import Any

import numpy as np

from baton.serving.conventions import examples_hint
from baton.serving.json_parse import (
    INT64_MIN,
    UINT64_MAX,
    b64decode,
    debug_string,
    is_b64,
    json_type,
    loads,
)
from baton.serving.servable import Signature, TensorSpec
from baton.serving.status import Code, ServingError, invalid

__all__ = ["loads", "parse_predict", "feeds_from_json", "request_signature_name", "to_array"]

MAX_RANK = 64  # numpy's limit (TensorFlow's is 254): a deeper value is refused by name

# dtype name -> (allowed leaf types, integer range or None)
_INT32 = (-(2 ** 31), 2 ** 31 - 1)
_RULES: dict[str, tuple[frozenset, tuple[int, int] | None]] = {
    "float": (frozenset((int, float)), None), "double": (frozenset((int, float)), None),
    "int32": (frozenset((int,)), _INT32), "int16": (frozenset((int,)), _INT32),
    "int8": (frozenset((int,)), _INT32), "uint8": (frozenset((int,)), _INT32),
    "int64": (frozenset((int,)), (INT64_MIN, 2 ** 63 - 1)),
    "uint32": (frozenset((int,)), (0, 2 ** 32 - 1)),
    "uint64": (frozenset((int,)), (0, UINT64_MAX)),
    "bool": (frozenset((bool,)), None), "string": (frozenset((str,)), None),
}


_NAMES: dict[str, str] = {}


def _tf_name(spec: TensorSpec) -> str:
    """DataTypeString: DT_FLOAT -> float."""
    name = _NAMES.get(spec.tf_dtype)
    if name is None:
        name = _NAMES[spec.tf_dtype] = spec.tf_dtype.removeprefix("DT_").lower()
    return name


def _type_error(v: Any, name: str) -> ServingError:
    return invalid(f"JSON Value: {debug_string(v)} Type: {json_type(v)} is not of expected "
                   f"type: {name}")


def dense_shape(value: Any) -> list[int]:
    """GetDenseTensorShape: the lengths along the first elements."""
    shape = []
    while type(value) is list:
        shape.append(len(value))
        if not value or len(shape) > MAX_RANK:
            break
        value = value[0]
    if len(shape) > MAX_RANK:
        raise invalid(f"JSON Value: {debug_string(value)} is nested deeper than {MAX_RANK} "
                      "levels: a tensor has at most that many dimensions here")
    return shape


def _dense(value: Any, shape: list[int], spec: TensorSpec, name: str) -> np.ndarray | None:
    """The tensor, when every list has its level's length and every leaf is of the right
    type; None otherwise (then `_walk` finds the error)."""
    items = [value]
    for size in shape:
        if set(map(type, items)) != {list} or set(map(len, items)) != {size}:
            return None
        items = list(itertools.chain.from_iterable(items))
    allowed, bounds = _RULES[name]
    types = set(map(type, items))
    if not types <= allowed:
        return None
    if name == "string":
        arr = np.empty(len(items), dtype=object)
        arr[:] = [x.encode() for x in items]
        return arr.reshape(shape)
    if bounds is not None and items and not bounds[0] <= min(items) <= max(items) <= bounds[1]:
        return None
    if name in ("int16", "int8", "uint8"):  # int_val holds an int32; the tensor wraps it
        return np.array(items, dtype=np.int32).astype(spec.dtype).reshape(shape)
    try:
        with np.errstate(over="ignore"):  # a double beyond float32 is inf, as GetFloat
            return np.array(items, dtype=spec.dtype).reshape(shape)
    except OverflowError:  # an integer beyond a double (parsed by json.loads)
        return None


def _leaf(v: Any, spec: TensorSpec, name: str) -> Any:
    """AddValueToTensor (and the b64 case of FillTensorProto) for one leaf."""
    if type(v) is dict:
        if name != "string":
            raise _type_error(v, name)
        if not is_b64(v):
            raise invalid(f"JSON Value: {debug_string(v)} not formatted correctly for "
                          "base64 data")
        return b64decode(v)
    if name not in _RULES:
        raise ServingError(Code.UNIMPLEMENTED, f"Conversion of JSON Value: {debug_string(v)}"
                                               f" to type: {name}")
    allowed, bounds = _RULES[name]
    if type(v) not in allowed or (bounds is not None and not bounds[0] <= v <= bounds[1]):
        raise _type_error(v, name)
    if name in ("float", "double"):
        try:
            return float(v)
        except OverflowError:  # an integer beyond any double: rapidjson's number-too-big
            return float("inf") if v > 0 else float("-inf")
    return v.encode() if name == "string" else v


def _walk(value: Any, shape: list[int], spec: TensorSpec, name: str) -> np.ndarray:
    """FillTensorProto, depth first: the first error TF Serving would report."""
    rank = len(shape)
    leaves: list = []
    todo: list[tuple[Any, int]] = [(value, 0)]
    while todo:
        v, level = todo.pop()
        if type(v) is not list:
            if level != rank:
                raise invalid(f"JSON Value: {debug_string(v)} found at incorrect level: "
                              f"{level + 1} in the JSON DOM. Expected at level: {rank}")
            leaves.append(_leaf(v, spec, name))
            continue
        if level >= rank:
            raise invalid(f"Encountered list at unexpected level: {level} expected < {rank}")
        if len(v) != shape[level]:
            raise invalid(f"Encountered list at unexpected size: {len(v)} at level: {level} "
                          f"expected size: {shape[level]}")
        todo.extend((x, level + 1) for x in reversed(v))
    if name == "string":
        arr = np.empty(len(leaves), dtype=object)
        arr[:] = leaves
        return arr.reshape(shape)
    if name in ("int16", "int8", "uint8"):
        return np.array(leaves, dtype=np.int32).astype(spec.dtype).reshape(shape)
    with np.errstate(over="ignore"):
        return np.array(leaves, dtype=spec.dtype).reshape(shape)


def to_array(value: Any, spec: TensorSpec) -> np.ndarray:
    """One JSON value as a tensor of the input's dtype (GetDenseTensorShape + Fill)."""
    name = _tf_name(spec)
    shape = dense_shape(value)
    if name in _RULES:
        arr = _dense(value, shape, spec, name)
        if arr is not None:
            return arr
    return _walk(value, shape, spec, name)


def _format_error(doc: dict, text: str) -> ServingError:
    return invalid(f"JSON Value: {debug_string(doc)} {text}")


def _status(e: ServingError) -> str:
    """absl::Status::ToString of an error, as TF Serving nests one in another."""
    return f"{e.code.name}: {e.message}"


def _rows(rows: list, specs: dict[str, TensorSpec],
          optional: Collection[str] = ()) -> dict[str, np.ndarray]:
    """FillTensorMapFromInstancesList. Inputs named in `optional` (those with a SignatureDef
    default) may be left out, by every row alike."""
    first = rows[0]
    if type(first) is not dict and len(specs) > 1:
        raise invalid("instances is a plain list, but expecting list of objects as multiple "
                      "input tensors required as per tensorinfo_map")
    objects = type(first) is dict and not is_b64(first)
    if not objects:
        name, spec = next(iter(specs.items()))
        # the whole list at once when every item has the same shape and leaf types (the
        # common case; an object among the items fails `_dense` and goes item by item)
        tf_name = _tf_name(spec)
        if tf_name in _RULES:
            arr = _dense(rows, dense_shape(rows), spec, tf_name)
            if arr is not None:
                return {name: arr}
    sizes: dict[str, int] = {}
    shapes: dict[str, list[int]] = {}
    parts: dict[str, list[np.ndarray]] = {k: [] for k in specs}
    for i, row in enumerate(rows):
        if objects:
            if type(row) is not dict or is_b64(row):
                raise invalid(f"Expecting object but got list at item {i} of input list")
            for key, item in row.items():
                try:
                    _add_item(item, key, specs, sizes, shapes, parts)
                except ServingError as e:
                    raise invalid(f"Failed to process element: {i} key: {key} of 'instances' "
                                  f"list. Error: {_status(e)}") from None
            if row.keys() != specs.keys() and not (
                    row.keys() <= specs.keys() and specs.keys() - row.keys() <= set(optional)
                    and row.keys() == first.keys()):
                raise invalid(f"Failed to process element: {i} of 'instances' list. JSON "
                              f"object: {debug_string(row)} keys must be equal to: "
                              f"{','.join(sorted(specs))}{examples_hint(row.keys())}")
        else:
            if type(row) is dict and not is_b64(row):
                raise invalid(f"Expecting value/list but got object at item {i} of input list")
            try:
                _add_item(row, next(iter(specs)), specs, sizes, shapes, parts)
            except ServingError as e:
                raise invalid(f"Failed to process element: {i} of 'instances' list. "
                              f"Error: {_status(e)}") from None
    return {k: np.stack(v) for k, v in parts.items() if v}


def _add_item(item, key, specs, sizes, shapes, parts) -> None:
    """AddInstanceItem: one item of one input, its size and shape checked against the
    first item's."""
    spec = specs.get(key)
    if spec is None:
        raise invalid(f"JSON object: does not have named input: {key}{examples_hint((key,))}")
    arr = to_array(item, spec)
    shape = list(arr.shape)
    if key not in sizes:
        sizes[key], shapes[key] = arr.size, shape
    elif sizes[key] != arr.size:
        raise invalid(f"Expecting tensor size: {sizes[key]} but got: {arr.size}")
    elif shapes[key] != shape:
        raise invalid(f"Expecting shape [{','.join(map(str, shapes[key]))}] but got: "
                      f"[{','.join(map(str, shape))}]")
    parts[key].append(arr)


def _columns(value: Any, specs: dict[str, TensorSpec],
             optional: Collection[str] = ()) -> dict[str, np.ndarray]:
    """FillTensorMapFromInputsMap; inputs named in `optional` may be left out."""
    if type(value) is not dict or is_b64(value):
        if len(specs) > 1:
            raise invalid("inputs is a plain value/list, but expecting an object as multiple "
                          "input tensors required as per tensorinfo_map")
        name, spec = next(iter(specs.items()))
        return {name: to_array(value, spec)}
    feeds = {}
    for name, spec in specs.items():
        if name not in value:
            if name in optional:
                continue  # the signature's default stands in (Signature.__call__)
            raise invalid(f"Missing named input: {name} in 'inputs' object."
                          f"{examples_hint(value.keys())}")
        feeds[name] = to_array(value[name], spec)
    return feeds


def request_signature_name(body: Any) -> str:
    """ParseJson's object check and FillSignature: the body's signature_name ("" if none)."""
    if type(body) is not dict:
        raise invalid(f"JSON Value: {debug_string(body)} Is not object")
    name = body.get("signature_name", "")
    if type(name) is not str:
        raise invalid(f"JSON Value: {debug_string(body)} not formatted correctly. "
                      "'signature_name' key must be a string value.")
    return name


def feeds_from_json(body: Any, sig: Signature) -> tuple[dict[str, np.ndarray], bool]:
    """(feeds, row_format) for a :predict body already parsed, whose signature_name was
    checked (rest.py does, before resolving the signature)."""
    if type(body) is not dict:
        raise _format_error(body, "Is not object")
    specs = sig.inputs
    if not specs:
        raise invalid(f"Failed to get input map for signature: {sig.name or 'DEFAULT'}")
    has_rows, has_cols = "instances" in body, "inputs" in body
    if has_rows:
        if has_cols:
            raise _format_error(body, "Not formatted correctly expecting only one of 'inputs' "
                                      "or 'instances' keys to exist ")
        rows = body["instances"]
        if type(rows) is not list:
            raise _format_error(body, "Expecting 'instances' to be an list/array")
        if not rows:
            raise _format_error(body, "No values in 'instances' array")
        return _rows(rows, specs, sig.defaults.keys()), True
    if has_cols:
        return _columns(body["inputs"], specs, sig.defaults.keys()), False
    raise invalid("Missing 'inputs' or 'instances' key")


class _RowPlan:
    """How to turn `instances` rows of scalars into a signature's inputs, in few numpy calls.

    Built once per signature whose every input is a batch of scalars (shape [None]) of a
    JSON-writable dtype: the raw-feature signatures Baton exports. Inputs are grouped by
    dtype; one itemgetter call per row and one np.array call per group convert a whole
    group. `key` is the batching key those arrays have (see batcher.Task), so the request
    does not compute it again. Any row the plan cannot take goes to the general path,
    which raises its own error: messages never depend on which path ran.
    """

    __slots__ = ("names", "groups", "where", "key")

    def __init__(self, sig: Signature):
        specs = sig.inputs
        self.names = tuple(specs)
        by_dtype: dict[tuple, list[str]] = {}
        for k, s in specs.items():
            by_dtype.setdefault((s.dtype, _tf_name(s)), []).append(k)
        self.groups = tuple((dt, name, _RULES[name], _getter(ks))
                            for (dt, name), ks in by_dtype.items())
        where = {k: (i, j) for i, ks in enumerate(by_dtype.values()) for j, k in enumerate(ks)}
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
    if sig.inputs and all(s.shape == (None,) and _tf_name(s) in _RULES
                          for s in sig.inputs.values()):
        plan = _RowPlan(sig)
    sig.cache["rest_row_plan"] = plan
    return plan


def _rows_fast(rows: list, plan: _RowPlan) -> dict[str, np.ndarray] | None:
    """Feeds for rows that are dicts of exactly the inputs, each a JSON scalar of its
    input's type; None for anything else."""
    n = len(plan.names)
    for r in rows:
        if type(r) is not dict or len(r) != n:  # with every name present: no extras
            return None
    blocks = []
    try:
        for dtype, name, (allowed, bounds), get in plan.groups:
            cols = list(zip(*map(get, rows), strict=True))  # one tuple per input
            flat = list(itertools.chain.from_iterable(cols))
            if not set(map(type, flat)) <= allowed:
                return None
            if name == "string":
                block = np.empty((len(cols), len(rows)), dtype=object)
                block[...] = [[x.encode() for x in col] for col in cols]
            else:
                if bounds is not None and not bounds[0] <= min(flat) <= max(flat) <= bounds[1]:
                    return None
                raw = np.int32 if name in ("int16", "int8", "uint8") else dtype
                with np.errstate(over="ignore"):
                    block = np.array(cols, dtype=raw).astype(dtype, copy=False)
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
