"""Per-batch reductions in the graph, and the dtype rules of tf.Transform's numeric analyzers.

tf.Transform reduces every batch inside TensorFlow before its combiners merge the batches
(tensorflow_transform/tf_utils.py: `reduce_batch_count_mean_and_var`,
`reduce_batch_minus_min_and_max`); baton.tft does the same, so an analysis phase returns a few
numbers per batch instead of its rows, and dense, sparse and ragged inputs reduce as there:

- `reduce_instance_dims=True` reduces the values of any tensor (a sparse or ragged tensor's
  present values);
- `False` reduces the batch dimension only: a dense tensor elementwise, a sparse tensor per
  position over the values present there (a position with none gets no count); a ragged tensor
  is refused, as tf.Transform refuses it.

NaN and infinities are left out of counts, means and variances; extremes propagate NaN except
where a sparse tensor's position holds no value.
"""

from __future__ import annotations

from typing import Any

# tf.Transform's output dtypes (analyzers.py _FLOAT_OUTPUT_DTYPE_MAP, _SUM_OUTPUT_DTYPE_MAP)
FLOAT_OUTPUT = {"float16": "float16", "float32": "float32", "float64": "float64",
                "int8": "float32", "int16": "float32", "int32": "float32", "int64": "float32",
                "uint8": "float32", "uint16": "float32", "uint32": "float32",
                "uint64": "float32"}
SUM_OUTPUT = {"float16": "float32", "float32": "float32", "float64": "float64",
              "int8": "int64", "int16": "int64", "int32": "int64", "int64": "int64",
              "uint8": "uint64", "uint16": "uint64", "uint32": "uint64", "uint64": "uint64"}


def tf_() -> Any:
    import tensorflow as tf

    return tf


def values(x: Any) -> Any:
    """The values of a dense, sparse or ragged tensor (a dense tensor is its own values)."""
    tf = tf_()
    if isinstance(x, tf.RaggedTensor):
        return x.flat_values
    if isinstance(x, tf.SparseTensor):
        return x.values
    return x


def compose(x: Any) -> Any:
    """A function putting new values in the structure of `x` (sparse, ragged or dense)."""
    tf = tf_()
    if isinstance(x, tf.SparseTensor):
        return lambda v: tf.SparseTensor(x.indices, v, x.dense_shape)
    if isinstance(x, tf.RaggedTensor):
        return lambda v: tf.RaggedTensor.from_nested_row_splits(v, x.nested_row_splits,
                                                                validate=False)
    return lambda v: v


def map_values(x: Any, fn: Any) -> Any:
    return compose(x)(fn(values(x)))


def is_composite(x: Any) -> bool:
    tf = tf_()
    return isinstance(x, tf.SparseTensor | tf.RaggedTensor)


def cast(x: Any, dtype: Any) -> Any:
    tf = tf_()
    return map_values(x, lambda v: tf.cast(v, dtype))


def float_output(dtype: Any, output_dtype: Any = None) -> Any:
    """mean/var's output dtype: `output_dtype`, else float32 for integers, the float's own."""
    tf = tf_()
    if output_dtype is not None:
        return tf.as_dtype(output_dtype)
    name = FLOAT_OUTPUT.get(tf.as_dtype(dtype).name)
    if name is None:
        raise TypeError(f"Tensor type {tf.as_dtype(dtype).name!r} is not supported: a numeric "
                        "(float or integer) tensor is expected")
    return tf.as_dtype(name)


def elementwise_shape(x: Any, function: str) -> list[int | None]:
    """The per-instance shape an elementwise (reduce_instance_dims=False) result has."""
    tf = tf_()
    if isinstance(x, tf.RaggedTensor):
        raise NotImplementedError(f"Elementwise {function} does not support RaggedTensors "
                                  "(as in tf.Transform); reduce_instance_dims=True reduces "
                                  "their values")
    return list(x.shape[1:]) if x.shape.rank is not None else [None]


def _finite(v: Any) -> Any:
    tf = tf_()
    if v.dtype.is_floating:
        return tf.math.is_finite(v)
    return tf.ones_like(v, dtype=tf.bool)


def _sparse_sum(x: Any, v: Any) -> Any:
    """Sum over the batch of a sparse tensor's positions, `v` its (new) values."""
    tf = tf_()
    out = tf.sparse.reduce_sum(tf.SparseTensor(x.indices, v, x.dense_shape), axis=0)
    out.set_shape(x.shape[1:])
    return out


def count_mean_var(x: Any, reduce_instance_dims: bool) -> list[Any]:
    """[count, mean, var] of this batch (NaN and infinities left out), `x` already cast to
    the output dtype: scalars, or elementwise of x's per-instance shape."""
    tf = tf_()
    if reduce_instance_dims or not isinstance(x, tf.SparseTensor):
        v = values(x) if reduce_instance_dims else x
        axis = None if reduce_instance_dims else 0
        ok = _finite(v)
        zeros = tf.zeros_like(v)
        count = tf.reduce_sum(tf.cast(ok, v.dtype), axis=axis)
        mean = tf.math.divide_no_nan(tf.reduce_sum(tf.where(ok, v, zeros), axis=axis), count)
        dev = tf.where(ok, v - mean, zeros)
        var = tf.math.divide_no_nan(tf.reduce_sum(tf.square(dev), axis=axis), count)
        return [count, mean, var]
    ok = _finite(x.values)
    count = _sparse_sum(x, tf.cast(ok, x.dtype))
    total = _sparse_sum(x, tf.where(ok, x.values, tf.zeros_like(x.values)))
    mean = tf.math.divide_no_nan(total, count)
    at = tf.gather_nd(mean, x.indices[:, 1:])
    dev = tf.where(ok, x.values - at, tf.zeros_like(x.values))
    var = tf.math.divide_no_nan(_sparse_sum(x, tf.square(dev)), count)
    return [count, mean, var]


def min_max(x: Any, reduce_instance_dims: bool) -> list[Any]:
    """[min, max] of this batch (NaN propagates). Elementwise over a sparse tensor a position
    with no value holds the analyzer's missing value (NaN for floats; for integers the
    dtype's max as the min and its min as the max, so the merge ignores it)."""
    tf = tf_()
    if reduce_instance_dims:
        v = values(x)
        return [tf.reduce_min(v), tf.reduce_max(v)]
    if not isinstance(x, tf.SparseTensor):
        return [tf.reduce_min(x, axis=0), tf.reduce_max(x, axis=0)]
    present = _sparse_sum(x, tf.ones_like(x.values, tf.int64)) > 0
    if x.dtype.is_floating:
        neg = tf.SparseTensor(x.indices, -x.values, x.dense_shape)
        lo, hi = -tf.sparse.reduce_max(neg, axis=0), tf.sparse.reduce_max(x, axis=0)
        missing_lo = missing_hi = tf.constant(float("nan"), x.dtype)
    else:  # -max(-x) would overflow at the dtype's min: the minimum by segments
        lo, hi = _segment(x, tf.math.unsorted_segment_min), _segment(x, tf.math.unsorted_segment_max)
        missing_lo = tf.constant(x.dtype.max, x.dtype)
        missing_hi = tf.constant(x.dtype.min, x.dtype)
    lo = tf.where(present, lo, tf.fill(tf.shape(lo), missing_lo))
    hi = tf.where(present, hi, tf.fill(tf.shape(hi), missing_hi))
    lo.set_shape(x.shape[1:])
    hi.set_shape(x.shape[1:])
    return [lo, hi]


def _segment(x: Any, reduce: Any) -> Any:
    """A per-position reduction of a sparse tensor over its batch (`reduce`: a TensorFlow
    unsorted segment op), shaped as one instance."""
    tf = tf_()
    shape = tf.cast(x.dense_shape[1:], tf.int64)
    strides = tf.math.cumprod(shape, exclusive=True, reverse=True)
    pos = tf.reduce_sum(x.indices[:, 1:] * strides, axis=1)
    return tf.reshape(reduce(x.values, pos, tf.reduce_prod(shape)), shape)


def batch_sum(x: Any, reduce_instance_dims: bool, out_dtype: Any) -> Any:
    """The sum of this batch in the analyzer's output dtype."""
    tf = tf_()
    if reduce_instance_dims:
        return tf.reduce_sum(tf.cast(values(x), out_dtype))
    if isinstance(x, tf.SparseTensor):
        return _sparse_sum(x, tf.cast(x.values, out_dtype))
    return tf.reduce_sum(tf.cast(x, out_dtype), axis=0)


def ones_like(x: Any) -> Any:
    """int64 ones in the structure of `x` (what tft.size sums)."""
    tf = tf_()
    return map_values(x, lambda v: tf.ones_like(v, tf.int64))
