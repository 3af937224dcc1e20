"""The built-in column kinds as a preprocessing_fn: one implementation, on baton.tft.

`transform.config.columns` (and the `numeric:`/`categorical:`/`images:` defaults) is a
shorthand. The stage resolves it to a plan, column -> {"kind", "buckets", "top_k",
"min_frequency", "oov_buckets"}, and `ColumnsFn(plan)` is the preprocessing_fn it stands for,
written with baton.tft's analyzers and mappers. It runs on exactly the machinery a user's
function runs on (graphs.tft.trace phases, the Beam analyze and apply passes, the exported
graphs.tft.module SavedModel), so there is no second copy of the arithmetic anywhere: the graph
Beam applies is the graph that serves.

Each kind, on one raw column `x` (float32 with NaN for missing, string with "" for missing):

- zscore:     tft.mean / tft.var of the finite values; (x - mean) / std, x - mean where the
              variance is 0 (tf.Transform's rule); NaN -> 0
- minmax:     tft.min / tft.max of the finite values; (x - min) / (max - min), x - min where
              max == min; NaN -> 0
- identity:   x; NaN -> 0
- bucketize:  tft.quantiles(x, buckets) (epsilon min(1/buckets, 0.01), tf.Transform's
              bucketize default) and tft.apply_buckets; NaN -> buckets (its own id), so ids
              are 0..buckets and the feature's vocab_size is buckets + 1
- vocabulary: tft.vocabulary over the non-missing values (top_k, min_frequency as
              frequency_threshold), ordered as tf.Transform orders it (count, then bytes,
              descending); id = rank for a known value, V (the vocabulary's size) for missing,
              V + 1 + Fingerprint64(x) % oov_buckets for an unknown value
- hash:       Fingerprint64(x) % buckets (tft.hash_strings); "" -> buckets

A tensor feature (an image `[H, W, C]`, a vector `[D]`) takes the numeric kinds, elementwise
with one mean/variance or min/max over all of its values. `analysis_ops` turns the analyzer
values back into the per-column constants of `analysis.json`, which an edge device applies
beside the TFLite model (pipeline/release/tflite.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from baton.graphs.tft import api as tft
from baton.graphs.tft import trace as tft_trace
from baton.graphs.tft.vocab import vocabulary_size

NUMERIC_KINDS = ("zscore", "minmax", "identity")
CATEGORICAL_KINDS = ("bucketize", "vocabulary", "hash")
# analyzers each kind calls, in call order (graphs.tft.trace numbers them by call order)
ANALYZERS = {"zscore": ("moments",), "minmax": ("min_max", "min_max"),  # tft.min, tft.max
             "bucketize": ("quantiles",), "vocabulary": ("vocabulary",), "identity": (),
             "hash": ()}


def bucketize_epsilon(buckets: int) -> float:
    return min(1.0 / buckets, 0.01)


@dataclasses.dataclass(frozen=True)
class ColumnsFn:
    """The plan's preprocessing_fn; also its own function source (pipeline.dataplane.transform.fn_source)
    for the Beam workers: it pickles as the plan."""

    plan: Mapping[str, Mapping[str, Any]]
    where: str = "transform.columns"

    def load(self) -> ColumnsFn:
        return self

    def __call__(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        return {name: _apply(name, step, inputs[name]) for name, step in self.plan.items()}

    def analysis_ops(self, resolved: Mapping[int, list[Any]],
                     shapes: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Per column: its kind and the constants it was computed with (analysis.json)."""
        ops = []
        k = 0
        for name, step in self.plan.items():
            kind = step["kind"]
            op: dict[str, Any] = {"name": name, "source": name, "kind": kind}
            if shapes.get(name):
                op["shape"] = [int(d) for d in shapes[name]]
            values = [resolved[k + i] for i in range(len(ANALYZERS[kind]))]
            k += len(values)
            if kind == "zscore":
                op.update(mean=float(values[0][0]), var=float(values[0][1]))
            elif kind == "minmax":
                op.update(min=float(values[0][0]), max=float(values[1][1]))
            elif kind == "bucketize":
                op["boundaries"] = [float(b) for b in values[0][0].reshape(-1)]
            elif kind == "vocabulary":
                op["vocabulary"] = [bytes(t).decode("utf-8", "replace") for t in values[0][0]]
                op["oov_buckets"] = int(step["oov_buckets"])
            elif kind == "hash":
                op["buckets"] = int(step["buckets"])
            ops.append(op)
        return ops


def _tf() -> Any:
    import tensorflow as tf

    return tf


def _ids(out: Any, lo: int, hi: int) -> Any:
    """Record the id range of a derived id tensor (the feature spec's vocab_size)."""
    tft_trace.current().domains[out.ref()] = (lo, hi)
    return out


def _apply(name: str, step: Mapping[str, Any], x: Any) -> Any:
    tf = _tf()
    kind = step["kind"]
    if kind in NUMERIC_KINDS:
        x = tf.cast(x, tf.float32)
        missing = tf.math.is_nan(x)
        if kind == "zscore":
            y = tft.scale_to_z_score(x)
        elif kind == "minmax":
            finite = tf.boolean_mask(x, tf.math.is_finite(x))
            lo, hi = tft.min(finite), tft.max(finite)
            span = hi - lo
            y = tf.where(span > 0, (x - lo) / tf.where(span > 0, span, tf.ones_like(span)),
                         x - lo)
        else:
            y = x
        return tf.where(missing, tf.zeros_like(y), y)
    if kind == "bucketize":
        buckets = int(step["buckets"])
        x = tf.cast(x, tf.float32)
        bounds = tft.quantiles(x, buckets, bucketize_epsilon(buckets))
        ids = tft.apply_buckets(x, bounds)
        n = buckets - 1  # boundaries
        return _ids(tf.where(tf.math.is_nan(x), tf.constant(n + 1, tf.int64), ids), 0, n + 1)
    missing = tf.equal(x, "")
    if kind == "hash":
        buckets = int(step["buckets"])
        h = tft.hash_strings(x, buckets)
        return _ids(tf.where(missing, tf.constant(buckets, tf.int64), h), 0, buckets)
    if kind != "vocabulary":
        raise ValueError(f"unknown column kind {kind!r}; kinds are "
                         f"{[*NUMERIC_KINDS, *CATEGORICAL_KINDS]}")
    oov = int(step["oov_buckets"])
    min_frequency = int(step.get("min_frequency", 1))
    vocab = tft.vocabulary(tf.boolean_mask(x, tf.logical_not(missing)), top_k=step.get("top_k"),
                           frequency_threshold=min_frequency if min_frequency > 1 else None,
                           vocab_filename=name)
    ids = tft.apply_vocabulary(x, vocab, num_oov_buckets=oov)
    size = vocabulary_size(vocab)
    out = tf.where(missing, size, tf.where(ids >= size, ids + 1, ids))
    domain = tft_trace.current().domains.get(ids.ref())
    return _ids(out, 0, domain[1] + 1) if domain is not None else out
