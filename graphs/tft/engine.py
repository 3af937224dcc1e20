"""Analyze, then transform: a preprocessing_fn's phases over batches of raw columns.

The loop is the same wherever the batches come from: `Phases.next()` traces the function
with the analyzer values known so far (graphs.tft.trace) and returns the phase to compute,
or None once everything is known; `phase.accumulate(batch)` runs the phase's graph on one
record batch (tens of thousands of rows per TensorFlow call) and gives partial accumulators,
`merge_all` combines partials (the transform stage does it in a Beam CombineFn), and
`Phases.finish(phase, merged)` records the values. `analyze` is the in-memory driver (the dry
run, tests). `transform_fn` is the last trace: the graph applied to every batch and exported.

Batches are dicts of numpy arrays in the raw contract: float32 `[B]` with NaN for missing,
strings (bytes or str objects) `[B]` with "" for missing, float32 `[B, ...]` for a tensor
feature.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from baton.graphs.tft import analyzers as tft_analyzers
from baton.graphs.tft import feed as tft_feed
from baton.graphs.tft import trace as tft_trace

MAX_PHASES = 32


def raw_specs(raw: Sequence[tuple[str, str, Sequence[int]]]) -> dict[str, Any]:
    """`{name: tf.TensorSpec}` of the raw features: (name, "float32"|"string", shape)."""
    import tensorflow as tf

    return {name: tf.TensorSpec([None, *shape], tf.string if dtype == "string" else tf.float32,
                                name=name) for name, dtype, shape in raw}


@dataclasses.dataclass
class Phase:
    number: int
    trace: tft_trace.Trace
    concrete: Any

    @property
    def analyzers(self) -> dict[int, tft_trace.Request]:
        return self.trace.requests

    @functools.cached_property
    def inputs(self) -> frozenset[str]:
        """The raw features this phase reads (tft_feed.used_inputs): a batch needs only these."""
        return tft_feed.used_inputs(self.concrete)

    @functools.cached_property
    def feeder(self) -> tft_feed.Feeder:
        """The phase's graph fed with `inputs` only, string columns as `tft_feed.Codes`."""
        specs = dict(self.concrete.structured_input_signature[0][0])
        return tft_feed.Feeder(lambda raw: self.concrete(raw=raw), specs, self.inputs)

    @property
    def last(self) -> bool:
        """Whether every analyzer still unknown is computed by this phase (none waits on it)."""
        return set(self.trace.pending) <= set(self.trace.requests)

    def accumulate(self, batch: Mapping[str, Any]) -> dict[int, Any]:
        """This batch's partial accumulator for every analyzer of the phase. `batch` holds
        the raw features of `inputs` (strings as arrays of bytes or as `tft_feed.Codes`)."""
        out = self.feeder(batch)
        return {k: tft_analyzers.accumulate(
                    req.kind, req.params,
                    [_numpy(out[f"{k}/{i}"]) for i in range(_outputs(req))])
                for k, req in self.analyzers.items()}


def _outputs(req: tft_trace.Request) -> int:
    """How many arrays the phase's graph returns for an analyzer (tft_trace.trace_function)."""
    return len(req.inputs)


def merge_all(phase: Phase, parts: Iterable[Mapping[int, Any]]) -> dict[int, Any]:
    merged: dict[int, Any] = {}
    for part in parts:
        for k, acc in part.items():
            kind = phase.analyzers[k].kind
            merged[k] = acc if k not in merged else tft_analyzers.merge(kind, merged[k], acc)
    return merged


class Phases:
    """The analysis of one preprocessing_fn: which analyzers are known, which phase is next."""

    def __init__(self, preprocessing_fn: Callable[[dict[str, Any]], Any],
                 specs: Mapping[str, Any]) -> None:
        self.fn, self.specs = preprocessing_fn, dict(specs)
        self.resolved: dict[int, list[Any]] = {}
        self.number = 0
        self.done = False  # set by `finish` once the last phase is in: no trace to find out

    def next(self) -> Phase | None:
        if self.done:
            return None
        trace, concrete = tft_trace.trace_function(self.fn, self.specs, self.resolved,
                                                   analysis=True)
        if not trace.pending:
            return None
        if not trace.requests:  # cannot happen for a function of its inputs: say so if it does
            raise RuntimeError(f"analyzers {sorted(trace.pending)} wait on each other")
        if self.number >= MAX_PHASES:
            raise RuntimeError(f"more than {MAX_PHASES} analyzer phases")
        self.number += 1
        return Phase(self.number, trace, concrete)

    def finish(self, phase: Phase, merged: Mapping[int, Any]) -> None:
        self.resolved.update(finalize(finishing(phase), merged))
        self.done = phase.last


def finishing(phase: Phase) -> dict[int, tuple[str, dict[str, Any], None]]:
    """What `finalize` needs of a phase, picklable (no graph; a vocabulary's `key_fn` needs
    cloudpickle): each analyzer's kind and its parameters."""
    return {k: (req.kind, dict(req.params), None) for k, req in phase.analyzers.items()}


def finalize(spec: Mapping[int, tuple[str, dict[str, Any], Any]],
             merged: Mapping[int, Any]) -> dict[int, list[Any]]:
    """The analyzers' values from their merged accumulators (`spec`: `finishing(phase)`); an
    analyzer that saw no rows gets its value on no data."""
    return {k: tft_analyzers.finalize(kind, params, merged.get(k))
            for k, (kind, params, _) in spec.items()}


def analyze(preprocessing_fn: Callable[[dict[str, Any]], Any], specs: Mapping[str, Any],
            batches: Callable[[], Iterable[Mapping[str, np.ndarray]]]) -> dict[int, list[Any]]:
    """Every analyzer's values, one pass over `batches()` per phase (in memory)."""
    phases = Phases(preprocessing_fn, specs)
    while (phase := phases.next()) is not None:
        phases.finish(phase, merge_all(phase, (phase.accumulate(b) for b in batches())))
    return phases.resolved


def transform_fn(preprocessing_fn: Callable[[dict[str, Any]], Any], specs: Mapping[str, Any],
                 resolved: Mapping[int, list[Any]]) -> tuple[tft_trace.Trace, Any]:
    """The final trace: the concrete function raw -> transformed, and what it recorded."""
    trace, concrete = tft_trace.trace_function(preprocessing_fn, specs, resolved, analysis=False)
    if trace.pending:
        raise RuntimeError(f"analyzers {sorted(trace.pending)} have no values")
    return trace, concrete


def apply(concrete: Any, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The transformed batch (numpy); a ragged or sparse output stays a tf value."""
    out = concrete(**_feed(concrete, batch))
    return {k: _numpy(v) for k, v in out.items()}


def _feed(concrete: Any, batch: Mapping[str, np.ndarray]) -> dict[str, Any]:
    names = [s.name for s in concrete.structured_input_signature[0][0].values()]
    missing = [n for n in names if n not in batch]
    if missing:
        raise KeyError(f"the batch lacks raw features {missing}")
    return {"raw": {n: batch[n] for n in names}}



def _numpy(t: Any) -> Any:
    return t.numpy() if hasattr(t, "numpy") else t

