"""The analyzers' data side: mergeable accumulators over numpy batches, and their final values.

`accumulate(kind, params, arrays)` turns one batch's analyzer inputs (what a phase's graph
returned for that analyzer) into a partial accumulator; `merge(kind, a, b)` combines two in
any grouping and order (Beam's CombineFn contract); `finalize(kind, params, acc)` gives the
analyzer's output values, in the order `graphs.tft_api` declared them. Memory is bounded the
way the statistics' accumulators are: moments and extremes are a few numbers, a vocabulary one
count per distinct token, quantiles a fixed-size sketch (graphs.quantile_sketch).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from baton.graphs.quantile_sketch import QuantileSketch

EMPTY_VOCABULARY_TOKEN = b"49d0cd50-04bb-48c0-bc6f-5b575dce351a"  # tf.Transform's, for no tokens
KINDS = ("moments", "min_max", "sum", "size", "vocabulary", "quantiles")


def _values(x: np.ndarray, reduce_instance_dims: bool) -> np.ndarray:
    x = np.asarray(x)
    return x.reshape(-1) if reduce_instance_dims or x.ndim == 0 else x.reshape(len(x), -1)


def accumulate(kind: str, params: Mapping[str, Any], arrays: Sequence[np.ndarray]) -> Any:
    reduce = params.get("reduce_instance_dims", True)
    if kind == "moments":  # NaN and +-inf are left out, as tf.Transform's mean and var do
        x = _values(arrays[0], reduce).astype(np.float64)
        finite = np.isfinite(x)
        n = finite.sum(axis=0).astype(np.float64)
        safe = np.where(finite, x, 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(n > 0, safe.sum(axis=0) / np.where(n > 0, n, 1), 0.0)
        m2 = np.where(finite, (safe - mean) ** 2, 0.0).sum(axis=0)
        return (n, mean, m2)
    if kind == "min_max":  # NaN propagates, as tf.Transform's min and max
        x = _values(arrays[0], reduce).astype(np.float64)
        if not x.shape[0]:
            return (np.full(x.shape[1:], np.inf), np.full(x.shape[1:], -np.inf))
        return (np.min(x, axis=0), np.max(x, axis=0))
    if kind == "sum":  # NaN propagates
        return _values(arrays[0], reduce).astype(np.float64).sum(axis=0)
    if kind == "size":
        x = _values(arrays[0], reduce)
        return np.full(x.shape[1:], x.shape[0], np.int64)
    if kind == "vocabulary":  # (distinct tokens, counts), or the tokens themselves
        tokens = np.asarray(arrays[0]).reshape(-1)
        if len(arrays) > 1:
            out: dict[bytes, int] = {}
            for t, c in zip(tokens.tolist(), np.asarray(arrays[1]).reshape(-1).tolist(),
                            strict=True):
                b = _bytes(t)
                out[b] = out.get(b, 0) + int(c)
            return out
        uniq, n = np.unique(tokens.astype(object), return_counts=True)
        return {_bytes(t): int(c) for t, c in zip(uniq, n, strict=True)}
    if kind == "quantiles":
        sketch = QuantileSketch()
        x = np.asarray(arrays[0], np.float64).reshape(-1)
        sketch.add(x[~np.isnan(x)])
        return sketch
    raise ValueError(f"unknown analyzer kind {kind!r}; kinds: {', '.join(KINDS)}")


def merge(kind: str, a: Any, b: Any) -> Any:
    if kind == "moments":
        (na, ma, qa), (nb, mb, qb) = a, b
        n = na + nb
        with np.errstate(invalid="ignore", divide="ignore"):
            delta = mb - ma
            mean = np.where(n > 0, ma + delta * np.where(n > 0, nb / n, 0), 0.0)
            m2 = qa + qb + delta ** 2 * np.where(n > 0, na * nb / n, 0)
        return (n, mean, m2)
    if kind == "min_max":
        return (np.minimum(a[0], b[0]), np.maximum(a[1], b[1]))
    if kind in ("sum", "size"):
        return a + b
    if kind == "vocabulary":
        out = dict(a)
        for t, c in b.items():
            out[t] = out.get(t, 0) + c
        return out
    if kind == "quantiles":
        a.merge(b)
        return a
    raise ValueError(f"unknown analyzer kind {kind!r}")


def finalize(kind: str, params: Mapping[str, Any], acc: Any) -> list[Any]:
    """The analyzer's output values (numpy), as graphs.tft_api declared them."""
    dtype = np.dtype(params.get("output_dtype", "float32"))
    if kind == "moments":
        n, mean, m2 = acc
        with np.errstate(invalid="ignore", divide="ignore"):
            var = np.where(n > 0, m2 / np.where(n > 0, n, 1), 0.0)  # biased, as tft.var
        return [np.asarray(mean, dtype), np.asarray(var, dtype)]
    if kind == "min_max":
        return [np.asarray(acc[0], dtype), np.asarray(acc[1], dtype)]
    if kind == "sum":
        return [np.asarray(acc, dtype)]
    if kind == "size":
        return [np.asarray(acc, np.int64)]
    if kind == "vocabulary":
        return [np.asarray(vocabulary_order(acc, params), dtype=object)]
    if kind == "quantiles":  # [1, num_buckets - 1] float32, duplicates kept; empty data: zeros
        n = int(params["num_buckets"])
        bounds = acc.rank_quantiles(np.arange(1, n) / n) if n > 1 else np.zeros(0)
        return [np.asarray(bounds, np.float32).reshape(1, -1)]
    raise ValueError(f"unknown analyzer kind {kind!r}")


def vocabulary_order(counts: Mapping[bytes, int], params: Mapping[str, Any]) -> list[bytes]:
    """tf.Transform's vocabulary: most frequent first, ties by the token's bytes, descending;
    `frequency_threshold` keeps counts >= it; `top_k` the first k after that. Tokens that are
    empty or hold a newline are left out (they cannot be lines of a vocabulary file)."""
    threshold = params.get("frequency_threshold") or 0
    items = [(c, t) for t, c in counts.items()
             if c >= threshold and t and b"\n" not in t and b"\r" not in t]
    items.sort(key=lambda ct: (ct[0], ct[1]), reverse=True)
    top_k = params.get("top_k")
    if top_k is not None:
        items = items[: int(top_k)]
    return [t for _, t in items] or [EMPTY_VOCABULARY_TOKEN]


def _bytes(t: Any) -> bytes:
    return t if isinstance(t, bytes) else str(t).encode()
