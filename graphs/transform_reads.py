"""Which raw columns a saved transform graph reads: the serving signature's required inputs.

A `preprocessing_fn` often reads a few of the raw columns (TFX's penguin function reads four of
seven); the serving signature used to demand every raw column all the same. The loaded
transform's `transform_features` takes every raw column, and calls the traced function through
a `PartitionedCall`, so the columns it reads are found by walking the function definitions back
from their outputs (and their stateful ops), into called functions, as TensorFlow prunes them
when it instantiates the function (graphs/tft/feed.py does the same walk on a traced graph).

Control flow with function bodies (`If`, `While`) counts every input as read: the walk never
calls a column unread that the graph may read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_CALLS = ("PartitionedCall", "StatefulPartitionedCall")


def read_columns(transform: Any) -> frozenset[str] | None:
    """The raw columns `transform.transform_features` reads; None when that cannot be told
    (then every column counts as read)."""
    import tensorflow as tf

    try:
        functions = transform.transform_features.concrete_functions
        concrete = functions[0]
        library = {f.signature.name: f for f in concrete.graph.as_graph_def().library.function}
        specs = tf.nest.flatten(concrete.structured_input_signature)
        used = _used_args(concrete.function_def, library, {})
    except (AttributeError, IndexError, KeyError, TypeError, ValueError):
        return None
    names = [s.name for s in specs]
    return frozenset(names[i] for i in used if i < len(names))


def _used_args(fdef: Any, library: Mapping[str, Any], memo: dict[str, frozenset[int]]
               ) -> frozenset[int]:
    """Positions of `fdef`'s input args its returned values and control outputs depend on."""
    key = fdef.signature.name
    if key in memo:
        return memo[key]
    memo[key] = frozenset(range(len(fdef.signature.input_arg)))  # a recursive call: all
    args = {a.name: i for i, a in enumerate(fdef.signature.input_arg)}
    nodes = {n.name: n for n in fdef.node_def}
    stack = [*fdef.ret.values(), *fdef.control_ret.values()]
    seen: set[str] = set()
    used: set[int] = set()
    while stack:
        name = stack.pop().lstrip("^").split(":")[0]
        if name in args:
            used.add(args[name])
            continue
        node = nodes.get(name)
        if node is None or name in seen:
            continue
        seen.add(name)
        callee = node.attr["f"].func.name if node.op in _CALLS else node.op
        if callee in library:
            data = [i for i in node.input if not i.startswith("^")]
            inner = _used_args(library[callee], library, memo)
            stack.extend(data[k] for k in inner if k < len(data))
            stack.extend(i for i in node.input if i.startswith("^"))
        else:
            stack.extend(node.input)
    memo[key] = frozenset(used)
    return memo[key]
