"""tft.quantiles, tft.bucketize, tft.apply_buckets and tft.hash_strings.

Semantics of tensorflow_transform 1.21 (analyzers.quantiles, mappers.bucketize /
apply_buckets / hash_strings): boundaries are float32 `[1, num_buckets - 1]` (elementwise:
the instance shape + `[num_buckets - 1]`) and keep duplicates; NaN values and values whose
weight is NaN are left out of them; `apply_buckets` counts the boundaries <= x (a value on a
boundary goes up, NaN to the last bucket), comparing in the wider of x's and the boundaries'
dtypes; the result keeps x's dense, sparse or ragged structure and records the id range
[0, number of boundaries].
"""

from __future__ import annotations

import builtins
import math
from typing import Any

from baton.graphs.tft import reduce as tft_reduce
from baton.graphs.tft import trace as tft_trace


def quantiles(x: Any, num_buckets: int, epsilon: float, weights: Any = None,
              reduce_instance_dims: bool = True, name: str | None = None) -> Any:
    """Bucket boundaries of `x` over the dataset, within `epsilon` of rank error."""
    tf = tft_reduce.tf_()
    num_buckets = int(num_buckets)
    if reduce_instance_dims:
        feature_shape: list[int] = []
    else:
        if tft_reduce.is_composite(x):
            raise ValueError("tft.quantiles: reduce_instance_dims=False needs a dense x")
        feature_shape = [int(d) if d is not None else -1 for d in x.shape[1:]]
        if any(d < 0 for d in feature_shape):
            raise ValueError(f"tft.quantiles: reduce_instance_dims=False needs x's instance "
                             f"shape to be known. Received: {x.shape}")
    features = math.prod(feature_shape) if feature_shape else 1
    out_shape = (feature_shape or [1]) + [builtins.max(num_buckets - 1, 0)]

    def inputs() -> list[Any]:
        v = tft_reduce.values(x)
        values = tf.reshape(tf.cast(v, tf.float64), [-1, features])
        if weights is None:
            return [values]
        w = tf.cast(tft_reduce.values(weights), tf.float64)
        if not tft_reduce.is_composite(x) and x.shape.rank and x.shape.rank > 1:
            per_row = math.prod(int(d) for d in x.shape[1:])
            w_row = math.prod(int(d) for d in w.shape[1:]) if w.shape.rank else 1
            if w_row != per_row:  # one weight per row weighs each value of its row
                w = tf.broadcast_to(tf.reshape(w, [-1, w_row])[:, :1], [tf.shape(v)[0], per_row])
        return [values, tf.reshape(w, [-1, features])]

    (bounds,) = tft_trace.analyzer(
        "quantiles", inputs, {"num_buckets": num_buckets, "epsilon": float(epsilon),
                              "features": features, "output_shape": out_shape,
                              "weighted": weights is not None},
        [(tf.float32, out_shape)])
    return bounds


def apply_buckets(x: Any, bucket_boundaries: Any, name: str | None = None) -> Any:
    """Bucket ids: the number of boundaries <= x (a value on a boundary goes up; NaN last)."""
    tf = tft_reduce.tf_()
    bounds = tf.convert_to_tensor(bucket_boundaries)
    if bounds.shape.rank is not None and bounds.shape.rank != 2:
        raise ValueError(f"tft.apply_buckets: bucket_boundaries must have rank 2 ([1, n]). "
                         f"Received: shape {bounds.shape}")
    flat = tf.reshape(bounds, [-1])

    def assign(values: Any) -> Any:
        v = tf.reshape(values, [-1])
        b = flat
        if _limit(v.dtype) > _limit(b.dtype):  # the wider dtype holds both
            b = tf.cast(b, v.dtype)
        else:
            v = tf.cast(v, b.dtype)
        ids = tf.searchsorted(b, v, side="right", out_type=tf.int64)
        return tf.reshape(ids, tf.shape(values))

    out = tft_reduce.map_values(x, assign)
    n = bounds.shape[-1] if bounds.shape.rank == 2 else None
    tft_trace.current().domains[tft_reduce.values(out).ref()] = (
        (0, int(n)) if n is not None else
        (0, tf.cast(tf.shape(bounds)[1], tf.int64)))
    return out


def bucketize(x: Any, num_buckets: int, epsilon: float | None = None, weights: Any = None,
              elementwise: bool = False, name: str | None = None) -> Any:
    """apply_buckets(x, quantiles(x, num_buckets, epsilon)); epsilon min(1/num_buckets, 0.01).
    elementwise: each element of an instance bucketized by its own boundaries."""
    tf = tft_reduce.tf_()
    if not isinstance(num_buckets, int):
        raise TypeError(f"num_buckets must be an int, got {type(num_buckets)}")
    if num_buckets < 1:
        raise ValueError(f"Invalid num_buckets {num_buckets}")
    if tft_reduce.is_composite(x) and elementwise:
        raise ValueError("bucketize requires `x` to be dense if `elementwise=True`")
    eps = epsilon if epsilon is not None else builtins.min(1.0 / num_buckets, 0.01)
    bounds = quantiles(tft_reduce.values(x), num_buckets, eps, weights,
                       reduce_instance_dims=not elementwise)
    if not elementwise:
        return apply_buckets(x, bounds)
    features = math.prod(int(d) for d in x.shape[1:])
    per = tf.reshape(bounds, [features, -1])
    cols = tf.reshape(x, [-1, features])
    out = [apply_buckets(cols[:, i], per[i][None, :]) for i in range(features)]
    return tf.reshape(tf.stack(out, axis=1), [-1, *x.shape[1:]])


def hash_strings(strings: Any, hash_buckets: int, key: Any = None, name: str | None = None) -> Any:
    """Fingerprint64 % hash_buckets (to_hash_bucket_fast); with `key`, keyed SipHash."""
    tf = tft_reduce.tf_()
    if not isinstance(strings, tf.Tensor | tf.SparseTensor | tf.RaggedTensor) or \
            strings.dtype != tf.string:
        raise TypeError("Input to hash_strings must be a `Tensor`, `SparseTensor`, or "
                        f"`RaggedTensor` of dtype string; got {getattr(strings, 'dtype', strings)}")
    if key is None:
        out = tft_reduce.map_values(
            strings, lambda t: tf.strings.to_hash_bucket_fast(t, hash_buckets))
    else:
        out = tft_reduce.map_values(
            strings, lambda t: tf.strings.to_hash_bucket_strong(t, hash_buckets, list(key)))
    # (tf.Transform records no id range here; Baton's feature spec keeps it for its models)
    tft_trace.current().domains[tft_reduce.values(out).ref()] = (0, hash_buckets - 1)
    return out


def _limit(dtype: Any) -> float:
    return float(dtype.max)
