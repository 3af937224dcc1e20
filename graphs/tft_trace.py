"""How a `preprocessing_fn` becomes analyzer requests, phases and one final graph.

tf.Transform's model, kept: the user's function is traced into a TensorFlow graph; every
analyzer call (`tft.mean`, `tft.vocabulary`, ...) is a node whose value needs a full pass over
the data. Baton traces the function once per *phase*. In a phase, an analyzer whose value is
already known becomes a constant; one that is not yet known returns a placeholder (an op named
`baton_tft_pending_<k>`) and, if its own inputs do not depend on any placeholder, it is
*ready*: its input tensors are what the phase's graph returns. The data pass computes every
ready analyzer (graphs.tft_analyzers, mergeable accumulators), and the next phase traces again
with more values known. An analyzer applied to values computed from another analyzer's result
is therefore computed one phase later, as tf.Transform does. Once nothing is pending, the last
trace is the transform itself: the graph that Beam applies to record batches and that the
SavedModel serves.

Analyzers are identified by call order within one trace, so `preprocessing_fn` must call the
same analyzers in the same order every time it is traced (true of any function of its inputs'
structure, which is all a graph can depend on).
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
    domains: dict[Any, tuple[int, int]] = dataclasses.field(default_factory=dict)  # ref -> ids
    vocab_files: dict[str, int] = dataclasses.field(default_factory=dict)  # file -> analyzer
    vocab_tensors: dict[Any, int] = dataclasses.field(default_factory=dict)  # ref -> analyzer
    outputs: Any = None
    counter: int = 0

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


def analyzer(kind: str, inputs: list[Any], params: dict[str, Any],
             outputs: Sequence[tuple[Any, Sequence[int | None]]]) -> list[Any]:
    """Register analyzer call number k of this trace; its values as tensors (constants once
    known, placeholders before). `outputs`: (dtype, shape) of each output."""
    import tensorflow as tf

    trace = current()
    k = trace.counter
    trace.counter += 1
    trace.kinds[k] = kind
    if k in trace.resolved:
        return [tf.constant(v, dtype=dtype) for v, (dtype, _) in
                zip(trace.resolved[k], outputs, strict=True)]
    trace.pending.add(k)
    if not any(depends_on_pending(t) for t in inputs):
        trace.requests[k] = Request(kind, dict(params), list(inputs))
    # an unknown length (a vocabulary) is a placeholder of length 0
    return [tf.identity(tf.zeros([d or 0 for d in shape], dtype), name=f"{PENDING}{k}_{i}")
            for i, (dtype, shape) in enumerate(outputs)]


def analyzer_index() -> int:
    """The index the next analyzer call of this trace gets."""
    return current().counter


def depends_on_pending(tensor: Any) -> bool:
    """Whether `tensor` is computed from a placeholder of an analyzer not yet known."""
    import tensorflow as tf

    if isinstance(tensor, tf.RaggedTensor):
        return any(depends_on_pending(t) for t in (tensor.flat_values, *tensor.nested_row_splits))
    if isinstance(tensor, tf.SparseTensor):
        return depends_on_pending(tensor.values)
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
    return False


def trace_function(preprocessing_fn: Callable[[dict[str, Any]], Any], raw_specs: Mapping[str, Any],
                   resolved: Mapping[int, list[Any]], *, analysis: bool) -> tuple[Trace, Any]:
    """Trace `preprocessing_fn` over `raw_specs` with the analyzer values known so far.

    `analysis=True`: the concrete function returns the ready analyzers' inputs, keyed
    `"<k>/<i>"` (a ragged or sparse input as its flat values; a vocabulary's tokens already
    counted, `<k>/0` the distinct tokens and `<k>/1` their counts, by TensorFlow's hash-based
    unique rather than a numpy sort of Python strings); False: the preprocessing_fn's outputs
    (every analyzer must be known).
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
        out = {}
        for k, req in trace.requests.items():
            if req.kind == "vocabulary":  # counted in the graph: distinct tokens and counts
                tokens, _, counts = tf.unique_with_counts(tf.reshape(_flat(req.inputs[0]), [-1]),
                                                          out_idx=tf.int64)
                out[f"{k}/0"], out[f"{k}/1"] = tokens, counts
                continue
            for i, t in enumerate(req.inputs):
                out[f"{k}/{i}"] = _flat(t)
        return out

    concrete = _function(tf, fn, dict(raw_specs), analysis).get_concrete_function()
    trace.outputs = box.get("outputs")
    return trace, concrete


# An analysis phase's graph returns only its analyzers' inputs, but tf.function's automatic
# control dependencies would make it run every stateful op of the preprocessing_fn too: each
# vocabulary lookup already resolved in an earlier phase (with its input columns and string
# splitting), measured at 60% of a census-like function's second phase. Without them TensorFlow
# prunes the phase's graph to what its outputs need. The exported (final) graph keeps them.
# (TensorFlow's `_disable_acd` attribute; a TensorFlow that refuses it gets the plain function.)
def _function(tf: Any, fn: Callable[..., Any], specs: dict[str, Any], analysis: bool) -> Any:
    if analysis:
        try:
            return tf.function(fn, input_signature=[specs], autograph=False,
                               experimental_attributes={"_disable_acd": True})
        except ValueError:
            pass
    return tf.function(fn, input_signature=[specs], autograph=False)


def _flat(t: Any) -> Any:
    import tensorflow as tf

    if isinstance(t, tf.RaggedTensor):
        return t.flat_values
    if isinstance(t, tf.SparseTensor):
        return t.values
    return t
