"""The analyzers' data side: mergeable accumulators over per-batch reductions, and final values.

`accumulate(kind, params, arrays)` turns what a phase's graph returned for one analyzer on one
batch (its per-batch reduction, graphs.tft.reduce) into a partial accumulator; `merge(kind, a,
b)` combines two in any grouping and order (Beam's CombineFn contract; `None` is the empty
accumulator); `finalize(kind, params, acc)` gives the analyzer's output values, in the order
graphs.tft.api declared them, `acc=None` meaning no data at all. The merge rules are
tf.Transform's combiners' (analyzers.py: `NumPyCombiner`, `WeightedMeanAndVarCombiner`,
`QuantilesCombiner`; beam/analyzer_impls.py for vocabularies, graphs.tft.vocab_order). Memory
is bounded: moments and extremes are a few numbers per element, a vocabulary one entry per
distinct token, quantiles a sketch sized by the analyzer's epsilon (graphs.quantile_sketch).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from baton.graphs.quantile_sketch import QuantileSketch
from baton.graphs.tft import vocab_order as tft_vocab_order

EMPTY_VOCABULARY_TOKEN = tft_vocab_order.EMPTY_STRING_TOKEN
KINDS = ("moments", "min_max", "sum", "vocabulary", "quantiles")
MIN_SKETCH = 1 << 15  # distinct values held exactly at any epsilon (tf.Transform's sketch
# is exact on small data: its buffers hold thousands of values before they compact)
MAX_SKETCH = 1 << 20


def accumulate(kind: str, params: Mapping[str, Any], arrays: Sequence[np.ndarray]) -> Any:
    if kind == "moments":
        count, mean, var = (np.asarray(a, np.float64) for a in arrays)
        return (count, np.nan_to_num(mean), np.nan_to_num(var))
    if kind == "min_max":
        return (np.array(arrays[0]), np.array(arrays[1]), bool(params.get("nan_ignoring")))
    if kind == "sum":
        return np.array(arrays[0], dtype=np.dtype(params["output_dtype"]))
    if kind == "vocabulary":
        return tft_vocab_order.accumulate(params, arrays)
    if kind == "quantiles":
        return _sketches(params, arrays)
    raise ValueError(f"unknown analyzer kind {kind!r}; kinds: {', '.join(KINDS)}")


def merge(kind: str, a: Any, b: Any) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    if kind == "moments":
        return _merge_moments(a, b)
    if kind == "min_max":
        lo = _pad_pair(a[0], b[0], _missing(a[0], low=True))
        hi = _pad_pair(a[1], b[1], _missing(a[1], low=False))
        if a[2]:  # a sparse tensor's positions: NaN marks a position with no value
            return (np.fmin(*lo), np.fmax(*hi), True)
        return (np.minimum(*lo), np.maximum(*hi), False)
    if kind == "sum":
        x, y = _pad_pair(a, b, 0)
        return x + y
    if kind == "vocabulary":
        return tft_vocab_order.merge(a, b)
    if kind == "quantiles":
        for s, t in zip(a, b, strict=True):
            s.merge(t)
        return a
    raise ValueError(f"unknown analyzer kind {kind!r}")


def finalize(kind: str, params: Mapping[str, Any], acc: Any) -> list[Any]:
    """The analyzer's output values (numpy), as graphs.tft.api declared them."""
    dtype = np.dtype(params.get("output_dtype", "float32"))
    shape = [d if d is not None else 0 for d in params.get("shape", [])]
    if kind == "moments":
        if acc is None or not np.sum(acc[0]):
            return [np.zeros(shape, dtype), np.zeros(shape, dtype)]
        # an element no batch counted has no mean (tf.Transform's merge into its zero
        # accumulator divides 0 by 0 there: NaN)
        missing = np.asarray(acc[0]) == 0
        mean = np.where(missing, np.nan, acc[1])
        var = np.where(missing, np.nan, acc[2])
        return [np.asarray(mean, dtype), np.asarray(var, dtype)]
    if kind == "min_max":
        if acc is None:
            low = np.dtype(params["compute_dtype"])
            lo = np.full(shape, _default(low, True, params.get("nan_ignoring", False)), low)
            hi = np.full(shape, _default(low, False, params.get("nan_ignoring", False)), low)
            acc = (lo, hi)
        return [np.asarray(acc[0]).astype(dtype), np.asarray(acc[1]).astype(dtype)]
    if kind == "sum":
        return [np.zeros(shape, dtype) if acc is None else np.asarray(acc, dtype)]
    if kind == "vocabulary":
        return tft_vocab_order.finalize(params, acc)
    if kind == "quantiles":
        out_shape = params["output_shape"]
        n = int(params["num_buckets"])
        if acc is None or all(not len(s.values) for s in acc) or n < 2:
            return [np.zeros(out_shape, np.float32)]
        rows = [s.rank_quantiles(np.arange(1, n) / n) for s in acc]
        return [np.asarray(rows, np.float32).reshape(out_shape)]
    raise ValueError(f"unknown analyzer kind {kind!r}")


def _merge_moments(a: Any, b: Any) -> Any:
    """tf.Transform's `WeightedMeanAndVarCombiner` merge (unweighted): the larger count first;
    an element counted nowhere ends with a NaN mean (0 / 0), as there."""
    (ca, ma, va), (cb, mb, vb) = a, b
    if np.sum(ca) < np.sum(cb):
        (ca, ma, va), (cb, mb, vb) = (cb, mb, vb), (ca, ma, va)
    if np.sum(ca) == 0:
        return (cb, mb, vb)
    ca, cb = _pad_pair(ca, cb, 0.0)
    ma, mb = _pad_pair(ma, mb, 0.0)
    va, vb = _pad_pair(va, vb, 0.0)
    total = ca + cb
    with np.errstate(invalid="ignore", divide="ignore"):
        share = cb / total
        mean = ma + share * (mb - ma)
        var = va + share * (vb - va + (mb - mean) * (mb - ma))
    return (total, mean, var)


def _pad_pair(a: np.ndarray, b: np.ndarray, fill: Any) -> tuple[np.ndarray, np.ndarray]:
    """Elementwise accumulators of a varying shape (a sparse tensor whose dense shape depends
    on the batch) padded to the same shape with `fill`, as tf.Transform pads them."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape == b.shape:
        return a, b
    shape = tuple(max(x, y) for x, y in zip(a.shape, b.shape, strict=True))

    def pad(v: np.ndarray) -> np.ndarray:
        return np.pad(v, [(0, s - d) for s, d in zip(shape, v.shape, strict=True)],
                      constant_values=fill)

    return pad(a), pad(b)


def _missing(v: np.ndarray, low: bool) -> Any:
    if v.dtype.kind == "f":
        return np.nan
    info = np.iinfo(v.dtype)
    return info.max if low else info.min


def _default(dtype: np.dtype, low: bool, nan_ignoring: bool) -> Any:
    """An extreme over no data: +-inf for floats (NaN for a sparse tensor's positions), the
    dtype's max (as the min) and min (as the max) for integers, as tf.Transform's defaults."""
    if dtype.kind == "f":
        return np.nan if nan_ignoring else (np.inf if low else -np.inf)
    info = np.iinfo(dtype)
    return info.max if low else info.min


def sketch_size(epsilon: float) -> int:
    """Points a quantile sketch keeps: data with at most this many distinct values is held
    whole (its boundaries exact), and beyond it the rank error stays well within `epsilon`
    (tf.Transform's contract): 32,768 points, more for an epsilon under 1/8,192."""
    if not epsilon or epsilon <= 0:
        return MAX_SKETCH
    return int(min(MAX_SKETCH, max(MIN_SKETCH, math.ceil(4.0 / epsilon))))


def _sketches(params: Mapping[str, Any], arrays: Sequence[np.ndarray]) -> list[QuantileSketch]:
    """One sketch per feature (elementwise quantiles: one per element of an instance). NaN
    values, and values whose weight is NaN, are left out."""
    features = int(params.get("features", 1))
    x = np.asarray(arrays[0], np.float64).reshape(-1, features)
    w = np.asarray(arrays[1], np.float64).reshape(-1, features) if len(arrays) > 1 else None
    size = sketch_size(float(params.get("epsilon", 0.01)))
    out = []
    for f in range(features):
        sketch = QuantileSketch(size)
        col = x[:, f]
        keep = ~np.isnan(col)
        if w is not None:
            keep &= ~np.isnan(w[:, f])
            sketch.add(col[keep], w[keep, f])
        else:
            sketch.add(col[keep])
        out.append(sketch)
    return out
