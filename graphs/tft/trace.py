"""How a `preprocessing_fn` becomes analyzer requests, phases and one final graph.

tf.Transform's model, kept: the user's function is traced into a TensorFlow graph; every
analyzer call (`tft.mean`, `tft.vocabulary`, ...) is a node whose value needs a full pass over
the data. Baton traces the function once per *phase*. In a phase, an analyzer whose value is
already known becomes a constant; one that is not yet known returns a placeholder (an op named
`baton_tft_pending_<k>`) and, if its own inputs do not depend on any placeholder, it is
*ready*: its inputs (per-batch reductions built in the graph, as tf.Transform's analyzers
reduce each batch before combining) are what the phase's graph returns. The data pass combines
every ready analyzer (graphs.tft.analyzers), and the next phase traces again with more values
known. An analyzer applied to values computed from another analyzer's result is therefore
computed one phase later, as tf.Transform does. Once nothing is pending, the last trace is the
transform itself: the graph that Beam applies to record batches and that the SavedModel serves.

Analyzers are identified by call order within one trace, so `preprocessing_fn` must call the
same analyzers in the same order every time it is traced (true of any function of its inputs'
structure, which is all a graph can depend on).

Resources the function creates while it is traced (lookup tables, its own or a vocabulary's;
variables) are collected, as tf.Transform's TF2 tracing collects them, so the module that
exports the graph tracks them; vocabulary files are `tf.saved_model.Asset`s, copied into the
SavedModel's `assets/` and found again wherever the SavedModel is moved.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

PENDING = "baton_tft_pending_"
_LOCAL = threading.local()


@dataclasses.dataclass
class Request:
    """A ready analyzer of this phase: its kind, its parameters and its input tensors."""

    kind: str
    params: dict[str, Any]
    inputs: list[Any]


@dataclasses.dataclass
class Trace:
    """One trace of the preprocessing_fn: what is known, what was asked, what was built."""

    resolved: Mapping[int, list[Any]]  # analyzer index -> its output values (numpy)
    requests: dict[int, Request] = dataclasses.field(default_factory=dict)
    pending: set[int] = dataclasses.field(default_factory=set)
    kinds: dict[int, str] = dataclasses.field(default_factory=dict)
    tables: list[Any] = dataclasses.field(default_factory=list)  # lookup tables (final trace)
    # ref of an int64 tensor's values -> (min, max): ints, or scalar tensors (a table's size)
    domains: dict[Any, tuple[Any, Any]] = dataclasses.field(default_factory=dict)
    vocab_files: dict[str, int] = dataclasses.field(default_factory=dict)  # file -> analyzer
    vocab_tensors: dict[Any, int] = dataclasses.field(default_factory=dict)  # path ref -> k
    vocab_meta: dict[int, dict[str, Any]] = dataclasses.field(default_factory=dict)
    assets: list[Any] = dataclasses.field(default_factory=list)  # tf.saved_model.Asset
    resources: list[Any] = dataclasses.field(default_factory=list)  # created while traced
    variables: list[Any] = dataclasses.field(default_factory=list)
    outputs: Any = None
    counter: int = 0
    prefix: str = ""  # vocabulary file names' prefix (`scoped`)
    scope_root: str = ""  # the graph name scope default vocabulary names are relative to

    @property
    def final(self) -> bool:
        return not self.pending


def sanitized_vocab_filename(name: str) -> str:
    """tf.Transform's file name rule: `[^\\w\\s-]` -> `_`, stripped, runs of `[-\\s]` -> `-`."""
    name = re.sub(r"[^\w\s-]", "_", name).strip()
    return re.sub(r"[-\s]+", "-", name)


def current() -> Trace:
    trace = getattr(_LOCAL, "trace", None)
    if trace is None:
        raise RuntimeError("baton.tft analyzers and mappers run inside a preprocessing_fn that "
                           "Baton traces (the transform stage, `baton transform --dry-run`, "
                           "baton.tft.analyze_and_transform), not on their own")
    return trace


@contextlib.contextmanager
def tracing(trace: Trace) -> Iterator[Trace]:
    previous = getattr(_LOCAL, "trace", None)
    _LOCAL.trace = trace
    try:
        yield trace
    finally:
        _LOCAL.trace = previous


@contextlib.contextmanager
def scoped(prefix: str) -> Iterator[None]:
    """Vocabulary files named inside are stored as `<prefix><name>`: several functions run as
    one (tests that batch many preprocessing_fns in one pipeline) keep their files apart, as
    tf.Transform's name scopes keep default vocabulary names apart."""
    import tensorflow as tf

    trace = current()
    before = trace.prefix, trace.scope_root
    with tf.name_scope(prefix.strip("_") or "scoped"):
        trace.prefix = trace.prefix + prefix
        trace.scope_root = tf.compat.v1.get_default_graph().get_name_scope()
        try:
            yield
        finally:
            trace.prefix, trace.scope_root = before


def analyzer(kind: str, inputs: list[Any] | Callable[[], list[Any]], params: dict[str, Any],
             outputs: Sequence[tuple[Any, Sequence[int | None]]], *,
             raw: bool = False) -> list[Any]:
    """Register analyzer call number k of this trace; its values as tensors (constants once
    known, placeholders before). `inputs`: its per-batch input tensors, or a function making
    them (called only while the analyzer is unknown). `outputs`: (dtype, shape) of each.
    `raw`: once known, return the values themselves (numpy), not constants (a vocabulary
    becomes a file, not a constant in the graph)."""
    import tensorflow as tf

    trace = current()
    k = trace.counter
    trace.counter += 1
    trace.kinds[k] = kind
    if k in trace.resolved:
        if raw:
            return list(trace.resolved[k])
        return [tf.constant(v, dtype=dtype) for v, (dtype, _) in
                zip(trace.resolved[k], outputs, strict=False)]
    trace.pending.add(k)
    tensors = inputs() if callable(inputs) else inputs
    if not any(depends_on_pending(t) for t in tensors):
        trace.requests[k] = Request(kind, dict(params), list(tensors))
    # an unknown length (a vocabulary) is a placeholder of length 0
    return [placeholder(k, i, dtype, shape) for i, (dtype, shape) in enumerate(outputs)]


def placeholder(k: int, i: int, dtype: Any, shape: Sequence[int | None]) -> Any:
    """The stand-in for output `i` of analyzer `k` while its value is unknown."""
    import tensorflow as tf

    return tf.identity(tf.zeros([d or 0 for d in shape], dtype), name=f"{PENDING}{k}_{i}")


def scope_name() -> str:
    """The current graph name scope, relative to `scoped`'s: tf.Transform names a vocabulary
    file by default after its scope (`vocab_vocabulary_1`, `vocab_compute_and_apply_
    vocabulary_vocabulary`)."""
    import tensorflow as tf

    scope = tf.compat.v1.get_default_graph().get_name_scope()
    root = current().scope_root
    if root and scope.startswith(root + "/"):
        scope = scope[len(root) + 1:]
    return scope


def analyzer_index() -> int:
    """The index the next analyzer call of this trace gets."""
    return current().counter


def is_known(k: int) -> bool:
    return k in current().resolved


# The ops that fill a table in a graph: a file's or a dataset's initializer (InitializeTableV2,
# InitializeTableFromTextFileV2, InitializeTableFromDataset) and a KeyValueTensorInitializer's,
# which TensorFlow 2 builds as LookupTableImportV2 (not InitializeTableV2) in a function.
FILLS = ("InitializeTable", "LookupTableImport")


def depends_on_pending(tensor: Any) -> bool:
    """Whether `tensor` is computed from a placeholder of an analyzer not yet known."""
    import tensorflow as tf

    if isinstance(tensor, tf.RaggedTensor):
        return any(depends_on_pending(t) for t in (tensor.flat_values, *tensor.nested_row_splits))
    if isinstance(tensor, tf.SparseTensor):
        return depends_on_pending(tensor.values) or depends_on_pending(tensor.indices)
    if not hasattr(tensor, "op"):
        return False
    seen: set[str] = set()
    stack = [tensor.op]
    while stack:
        op = stack.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        if op.name.split("/")[-1].startswith(PENDING) or op.name.startswith(PENDING):
            return True
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
        # a lookup depends on what its table is initialized from (a table the function builds
        # from a vocabulary file waits for that vocabulary), as tf.Transform's graph analysis
        # follows table initializers
        stack.extend(c for t in op.inputs if t.dtype == tf.resource for c in t.consumers()
                     if c.type.startswith(FILLS))
    return False


def trace_function(preprocessing_fn: Callable[[dict[str, Any]], Any], raw_specs: Mapping[str, Any],
                   resolved: Mapping[int, list[Any]], *, analysis: bool) -> tuple[Trace, Any]:
    """Trace `preprocessing_fn` over `raw_specs` with the analyzer values known so far.

    `analysis=True`: the concrete function returns the ready analyzers' inputs, keyed
    `"<k>/<i>"` (each a per-batch reduction the analyzer built: a vocabulary's distinct tokens
    and their counts, counted by TensorFlow's hash-based unique rather than a numpy sort of
    Python strings; moments; extremes...); False: the preprocessing_fn's outputs (every
    analyzer must be known).
    """
    import tensorflow as tf

    trace = Trace(resolved=resolved)
    box: dict[str, Any] = {}

    def fn(raw: dict[str, Any]) -> dict[str, Any]:
        with tracing(trace):
            outputs = preprocessing_fn(dict(raw))
        box["outputs"] = outputs
        if not analysis:
            return outputs
        _initializers_first(tf.compat.v1.get_default_graph())
        return {f"{k}/{i}": t for k, req in trace.requests.items()
                for i, t in enumerate(req.inputs)}

    with _collecting(trace):
        concrete = _function(tf, fn, dict(raw_specs), analysis).get_concrete_function()
    trace.outputs = box.get("outputs")
    return trace, concrete


def _initializers_first(graph: Any) -> None:
    """Each table the function initializes in its own graph: every other op that uses the
    table waits for its initializer. An analysis phase's graph runs without automatic control
    dependencies (`_function`), so a lookup could otherwise run before the table is filled
    and fail ("Table not initialized"; seen under load, and whenever the file is large). The
    control edge is the one automatic control dependencies would add (TensorFlow's own
    `_add_control_input`); the phase still runs only what its outputs need, so a table whose
    file is not known yet is neither filled nor read."""
    import tensorflow as tf

    for init in [op for op in graph.get_operations() if op.type.startswith(FILLS)]:
        handles, seen = [init.inputs[0]], set()
        while handles:
            handle = handles.pop()
            for user in handle.consumers():
                if user is init or user.name in seen:
                    continue
                seen.add(user.name)
                if user.type == "Identity" and user.outputs[0].dtype == tf.resource:
                    handles.append(user.outputs[0])
                elif not user.type.startswith(FILLS):
                    user._add_control_input(init)


@contextlib.contextmanager
def _collecting(trace: Trace) -> Iterator[None]:
    """Collect the resources (lookup tables) and variables the function creates while traced:
    TensorFlow lifts their creation out of the graph, so the exported module must track them
    (tf.Transform's TF2 tracing does the same, with TensorFlow's resource tracker)."""
    import tensorflow as tf

    try:
        from tensorflow.python.trackable import resource as tracking
    except ImportError:  # a TensorFlow without it: only the tables baton.tft made are tracked
        tracking = None

    def creator(next_creator: Any, **kwargs: Any) -> Any:
        var = next_creator(**kwargs)
        trace.variables.append(var)
        return var

    with contextlib.ExitStack() as stack:
        tracker = None
        if tracking is not None:
            tracker = tracking.ResourceTracker()
            stack.enter_context(tracking.resource_tracker_scope(tracker))
        stack.enter_context(tf.variable_creator_scope(creator))
        yield
    if tracker is not None:
        trace.resources = list(tracker.resources)


# An analysis phase's graph returns only its analyzers' inputs, but tf.function's automatic
# control dependencies would make it run every stateful op of the preprocessing_fn too: each
# vocabulary lookup already resolved in an earlier phase (with its input columns and string
# splitting), measured at 60% of a census-like function's second phase. Without them TensorFlow
# prunes the phase's graph to what its outputs need; the tables the function fills in its graph
# are ordered by hand (`_initializers_first`). The exported (final) graph keeps them.
# (TensorFlow's `_disable_acd` attribute; a TensorFlow that refuses it gets the plain function.)
def _function(tf: Any, fn: Callable[..., Any], specs: dict[str, Any], analysis: bool) -> Any:
    if analysis:
        try:
            return tf.function(fn, input_signature=[specs], autograph=False,
                               experimental_attributes={"_disable_acd": True})
        except ValueError:
            pass
    return tf.function(fn, input_signature=[specs], autograph=False)
