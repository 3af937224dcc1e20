"""tf.Transform's analyzers and mappers, with its names, arguments, defaults and output values.

Exported as `baton.tft`, so a TFX `preprocessing_fn` moves over by changing its import
(`import baton.tft as tft`). Each analyzer registers itself with the current trace
(graphs.tft.trace) with its per-batch reduction (graphs.tft.reduce) and returns tensors that
are constants once its values are known; the data side is graphs.tft.analyzers. This module
holds the numeric analyzers and the scaling mappers; vocabularies are graphs.tft.vocab,
quantiles, buckets and hashes graphs.tft.buckets.

Semantics follow tensorflow/transform's code (listed in docs/preprocessing.md): dtypes as
tf.Transform's maps (mean/var float32 for integers, the float's own; sum int64 for integers;
min/max the input's), `scale_to_z_score` with zero variance gives `x - mean`,
`scale_by_min_max` with min >= max gives `sigmoid(x)` on the output range; mean and var skip
NaN and infinities, min, max and sum propagate NaN; `elementwise` / `reduce_instance_dims=False`
reduce a sparse tensor per position over its present values, and refuse a ragged tensor.
"""

from __future__ import annotations

from typing import Any

from baton.graphs.tft import reduce as tft_reduce
from baton.graphs.tft import trace as tft_trace
from baton.graphs.tft.buckets import apply_buckets, bucketize, hash_strings, quantiles
from baton.graphs.tft.vocab import apply_vocabulary, compute_and_apply_vocabulary, vocabulary

tf_ = tft_reduce.tf_


def _shape(x: Any, reduce_instance_dims: bool, function: str) -> list[int | None]:
    return [] if reduce_instance_dims else tft_reduce.elementwise_shape(x, function)


# ------------------------------------------------------------------ numeric analyzers
def _mean_and_var(x: Any, reduce_instance_dims: bool, output_dtype: Any) -> tuple[Any, Any]:
    tf = tf_()
    dtype = tft_reduce.float_output(x.dtype, output_dtype)
    shape = _shape(x, reduce_instance_dims, "mean_and_var")
    mean, var = tft_trace.analyzer(
        "moments", lambda: tft_reduce.count_mean_var(tft_reduce.cast(x, dtype),
                                                     reduce_instance_dims),
        {"reduce_instance_dims": reduce_instance_dims, "output_dtype": dtype.name,
         "shape": shape}, [(dtype, shape), (dtype, shape)])
    return tf.cast(mean, dtype), tf.cast(var, dtype)


def mean(x: Any, reduce_instance_dims: bool = True, name: str | None = None,
         output_dtype: Any = None) -> Any:
    """The mean of the finite values of `x` over the dataset (0 for no values)."""
    return _mean_and_var(x, reduce_instance_dims, output_dtype)[0]


def var(x: Any, reduce_instance_dims: bool = True, name: str | None = None,
        output_dtype: Any = None) -> Any:
    """The biased (ddof=0) variance of the finite values of `x` over the dataset."""
    return _mean_and_var(x, reduce_instance_dims, output_dtype)[1]


def _min_and_max(x: Any, reduce_instance_dims: bool) -> tuple[Any, Any]:
    tf = tf_()
    dtype = x.dtype
    if not (dtype.is_floating or dtype.is_integer):
        raise TypeError(f"Tensor type {dtype.name!r} is not supported: min and max take numbers")
    if dtype in (tf.uint32, tf.uint64):
        raise TypeError(f"Tensor type {dtype.name!r} is not supported")
    shape = _shape(x, reduce_instance_dims, "min_and_max")
    nan_ignoring = (not reduce_instance_dims and isinstance(x, tf.SparseTensor)
                    and dtype.is_floating)
    lo, hi = tft_trace.analyzer(
        "min_max", lambda: tft_reduce.min_max(x, reduce_instance_dims),
        {"reduce_instance_dims": reduce_instance_dims, "output_dtype": dtype.name,
         "compute_dtype": dtype.name, "shape": shape, "nan_ignoring": nan_ignoring},
        [(dtype, shape), (dtype, shape)])
    return tf.cast(lo, dtype), tf.cast(hi, dtype)


def min(x: Any, reduce_instance_dims: bool = True, name: str | None = None) -> Any:  # noqa: A001
    """The minimum of `x` over the dataset, in x's dtype (NaN if a value is NaN)."""
    return _min_and_max(x, reduce_instance_dims)[0]


def max(x: Any, reduce_instance_dims: bool = True, name: str | None = None) -> Any:  # noqa: A001
    """The maximum of `x` over the dataset, in x's dtype (NaN if a value is NaN)."""
    return _min_and_max(x, reduce_instance_dims)[1]


def sum(x: Any, reduce_instance_dims: bool = True, name: str | None = None) -> Any:  # noqa: A001
    """The sum of `x` over the dataset: float32 for float16/32, float64 for float64, int64 for
    signed and uint64 for unsigned integers."""
    tf = tf_()
    if not reduce_instance_dims and isinstance(x, tf.SparseTensor) and \
            x.dtype in (tf.uint8, tf.uint16):
        x = tft_reduce.cast(x, tf.int64)
    out = tft_reduce.SUM_OUTPUT.get(x.dtype.name)
    if out is None:
        raise TypeError(f"Tensor type {x.dtype.name!r} is not supported: sum takes numbers")
    if not reduce_instance_dims and isinstance(x, tf.SparseTensor) and out == "uint64":
        raise TypeError(f"Data type {x.dtype.name!r} is not supported")
    dtype = tf.as_dtype(out)
    shape = _shape(x, reduce_instance_dims, "sum")
    (total,) = tft_trace.analyzer(
        "sum", lambda: [tft_reduce.batch_sum(x, reduce_instance_dims, dtype)],
        {"reduce_instance_dims": reduce_instance_dims, "output_dtype": out, "shape": shape},
        [(dtype, shape)])
    return total


def size(x: Any, reduce_instance_dims: bool = True, name: str | None = None) -> Any:
    """The number of elements of `x` over the dataset (NaNs counted), int64."""
    return sum(tft_reduce.ones_like(x), reduce_instance_dims)


# ------------------------------------------------------------------ scaling mappers
def scale_to_z_score(x: Any, elementwise: bool = False, name: str | None = None,
                     output_dtype: Any = None) -> Any:
    """(x - mean) / std over the dataset; `x - mean` where the variance is 0."""
    tf = tf_()
    m, v = _mean_and_var(x, not elementwise, output_dtype)
    m, v = _at_values(x, elementwise, m, v)

    def scale(values: Any) -> Any:
        num = tf.cast(values, m.dtype) - m
        den = tf.sqrt(v)
        ok = tf.cast(tf.zeros_like(num) + tf.cast(tf.not_equal(den, 0), num.dtype), tf.bool)
        return tf.where(ok, tf.math.divide(num, den), num)

    return tft_reduce.map_values(x, scale)


def scale_by_min_max(x: Any, output_min: float = 0.0, output_max: float = 1.0,
                     elementwise: bool = False, name: str | None = None) -> Any:
    """x scaled from [min, max] of the dataset to [output_min, output_max], float32; where
    min >= max (one distinct value, or no data), sigmoid(x) on that range."""
    tf = tf_()
    if output_min >= output_max:
        raise ValueError("output_min must be less than output_max")
    x = tft_reduce.cast(x, tf.float32)
    lo, hi = _min_and_max(x, not elementwise)
    lo, hi = _at_values(x, elementwise, lo, hi)

    def scale(values: Any) -> Any:
        num = values - lo
        ok = tf.cast(tf.zeros_like(num) + tf.cast(lo < hi, num.dtype), tf.bool)
        scaled = tf.where(ok, num / (hi - lo), tf.sigmoid(values))
        return scaled * (output_max - output_min) + output_min

    return tft_reduce.map_values(x, scale)


def scale_to_0_1(x: Any, elementwise: bool = False, name: str | None = None) -> Any:
    """scale_by_min_max to [0, 1]."""
    return scale_by_min_max(x, 0.0, 1.0, elementwise=elementwise, name=name)


def _at_values(x: Any, elementwise: bool, *stats: Any) -> list[Any]:
    """Elementwise statistics of a sparse tensor taken at its values' positions."""
    tf = tf_()
    if not elementwise or not isinstance(x, tf.SparseTensor):
        return list(stats)
    return [tf.gather_nd(s, x.indices[:, 1:]) for s in stats]


SUPPORTED = ("TFTransformOutput", "apply_buckets", "apply_vocabulary", "bucketize",
             "compute_and_apply_vocabulary", "hash_strings", "max", "mean", "min", "quantiles",
             "scale_by_min_max", "scale_to_0_1", "scale_to_z_score", "size", "sum", "var",
             "vocabulary")
__all__ = [n for n in SUPPORTED if n != "TFTransformOutput"]
_ = (apply_buckets, bucketize, hash_strings, quantiles, apply_vocabulary,
     compute_and_apply_vocabulary, vocabulary)
