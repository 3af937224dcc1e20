"""tf.Transform's analyzers and mappers, with its names, arguments, defaults and output values.

Exported as `baton.tft`, so a TFX `preprocessing_fn` moves over by changing its import
(`import baton.tft as tft`). Each analyzer registers itself with the current trace
(graphs.tft_trace) and returns tensors that are constants once its values are known; the data
side is graphs.tft_analyzers. Semantics follow tensorflow/transform's code where its docs
differ (listed in docs/preprocessing.md): `scale_to_z_score` with zero variance gives
`x - mean`; `scale_by_min_max` with min >= max gives `sigmoid(x)` on the output range; mean and
var skip NaN and infinities, min, max and sum propagate NaN; vocabularies are ordered by count
then by token bytes, descending; bucket boundaries keep duplicates and a value equal to a
boundary goes to the upper bucket.

One deliberate difference: `vocabulary()` returns the vocabulary's tokens (a string vector),
not the path of its file; pass it to `apply_vocabulary` as with tf.Transform, and find the file
with `TFTransformOutput.vocabulary_file_by_name`.
"""

from __future__ import annotations

import builtins
from typing import Any

from baton.graphs import tft_trace

_FLOAT = ("float16", "float32", "float64")


def _tf() -> Any:
    import tensorflow as tf

    return tf


def _values(x: Any) -> Any:
    tf = _tf()
    if isinstance(x, tf.RaggedTensor):
        return x.flat_values
    if isinstance(x, tf.SparseTensor):
        return x.values
    return x


def _map_values(x: Any, fn: Any) -> Any:
    """`fn` applied to the values of `x`, keeping a ragged or sparse structure."""
    tf = _tf()
    if isinstance(x, tf.RaggedTensor):
        return x.with_flat_values(fn(x.flat_values))
    if isinstance(x, tf.SparseTensor):
        return tf.SparseTensor(x.indices, fn(x.values), x.dense_shape)
    return fn(x)


def _refuse(function: str, **unsupported: Any) -> None:
    def default(v: Any) -> bool:
        return v is None or v is False or (isinstance(v, int | float | str)
                                           and v in (0, 0.0, "text"))

    given = {k: v for k, v in unsupported.items() if not default(v)}
    if given:
        raise NotImplementedError(
            f"tft.{function}: {', '.join(f'{k}={v!r}' for k, v in given.items())} is not "
            f"supported by baton.tft; leave {'it' if len(given) == 1 else 'them'} at the default")


def _float_dtype(x: Any, output_dtype: Any) -> Any:
    tf = _tf()
    if output_dtype is not None:
        return tf.as_dtype(output_dtype)
    dt = _values(x).dtype
    if dt.name in _FLOAT:
        return dt
    if dt.is_integer:
        return tf.float32
    raise TypeError(f"expected a numeric tensor. Received: {dt.name} tensor {getattr(x, 'name', x)}")


def _shape(x: Any, reduce_instance_dims: bool) -> list[int]:
    if reduce_instance_dims:
        return []
    return [int(d) for d in _values(x).shape[1:]]


def _dense(x: Any, function: str) -> None:
    tf = _tf()
    if isinstance(x, tf.RaggedTensor | tf.SparseTensor):
        raise NotImplementedError(f"tft.{function}: elementwise statistics of a ragged or sparse "
                                  "tensor are not supported by baton.tft")


# ------------------------------------------------------------------ numeric analyzers
def _mean_and_var(x: Any, reduce_instance_dims: bool, output_dtype: Any) -> tuple[Any, Any]:
    tf = _tf()
    dtype = _float_dtype(x, output_dtype)
    if not reduce_instance_dims:
        _dense(x, "mean/var")
    shape = _shape(x, reduce_instance_dims)
    mean, var = tft_trace.analyzer(
        "moments", [tf.cast(_values(x), dtype)],
        {"reduce_instance_dims": reduce_instance_dims, "output_dtype": dtype.name},
        [(dtype, shape), (dtype, shape)])
    return mean, var


def mean(x: Any, reduce_instance_dims: bool = True, name: str | None = None,
         output_dtype: Any = None) -> Any:
    """The mean of the finite values of `x` over the dataset (0 for no values)."""
    return _mean_and_var(x, reduce_instance_dims, output_dtype)[0]


def var(x: Any, reduce_instance_dims: bool = True, name: str | None = None,
        output_dtype: Any = None) -> Any:
    """The biased (ddof=0) variance of the finite values of `x` over the dataset."""
    return _mean_and_var(x, reduce_instance_dims, output_dtype)[1]


def _min_and_max(x: Any, reduce_instance_dims: bool) -> tuple[Any, Any]:
    tf = _tf()
    v = _values(x)
    if not reduce_instance_dims:
        _dense(x, "min/max")
    shape = _shape(x, reduce_instance_dims)
    lo, hi = tft_trace.analyzer(
        "min_max", [v], {"reduce_instance_dims": reduce_instance_dims,
                         "output_dtype": v.dtype.name},
        [(v.dtype, shape), (v.dtype, shape)])
    return tf.cast(lo, v.dtype), tf.cast(hi, v.dtype)


def min(x: Any, reduce_instance_dims: bool = True, name: str | None = None) -> Any:  # noqa: A001
    """The minimum of `x` over the dataset, in x's dtype (NaN if a value is NaN)."""
    return _min_and_max(x, reduce_instance_dims)[0]


def max(x: Any, reduce_instance_dims: bool = True, name: str | None = None) -> Any:  # noqa: A001
    """The maximum of `x` over the dataset, in x's dtype (NaN if a value is NaN)."""
    return _min_and_max(x, reduce_instance_dims)[1]


def sum(x: Any, reduce_instance_dims: bool = True, name: str | None = None) -> Any:  # noqa: A001
    """The sum of `x` over the dataset: float32 for float16/32, int64 for signed integers."""
    tf = _tf()
    v = _values(x)
    out = {"float16": tf.float32, "float32": tf.float32, "float64": tf.float64}.get(
        v.dtype.name, tf.int64 if v.dtype.is_integer else None)
    if out is None:
        raise TypeError(f"tft.sum: expected a numeric tensor. Received: {v.dtype.name}")
    if not reduce_instance_dims:
        _dense(x, "sum")
    (total,) = tft_trace.analyzer("sum", [v], {"reduce_instance_dims": reduce_instance_dims,
                                              "output_dtype": out.name},
                                  [(out, _shape(x, reduce_instance_dims))])
    return total


def size(x: Any, reduce_instance_dims: bool = True, name: str | None = None) -> Any:
    """The number of elements of `x` over the dataset (NaNs counted), int64."""
    tf = _tf()
    if not reduce_instance_dims:
        _dense(x, "size")
    (n,) = tft_trace.analyzer("size", [_values(x)], {"reduce_instance_dims": reduce_instance_dims},
                              [(tf.int64, _shape(x, reduce_instance_dims))])
    return n


# ------------------------------------------------------------------ scaling mappers
def scale_to_z_score(x: Any, elementwise: bool = False, name: str | None = None,
                     output_dtype: Any = None) -> Any:
    """(x - mean) / std over the dataset; `x - mean` where the variance is 0."""
    tf = _tf()
    m, v = _mean_and_var(x, not elementwise, output_dtype)

    def scale(values: Any) -> Any:
        num = tf.cast(values, m.dtype) - m
        den = tf.sqrt(v)
        return tf.where(tf.not_equal(den, 0), num / tf.where(tf.equal(den, 0), tf.ones_like(den),
                                                              den), num)

    return _map_values(x, scale)


def scale_by_min_max(x: Any, output_min: float = 0.0, output_max: float = 1.0,
                     elementwise: bool = False, name: str | None = None) -> Any:
    """x scaled from [min, max] of the dataset to [output_min, output_max], float32; where
    min >= max (one distinct value, or no data), sigmoid(x) on that range."""
    tf = _tf()
    if output_min >= output_max:
        raise ValueError("output_min must be less than output_max")
    x = _map_values(x, lambda t: tf.cast(t, tf.float32))
    lo, hi = _min_and_max(x, not elementwise)

    def scale(values: Any) -> Any:
        ok = lo < hi
        span = tf.where(ok, hi - lo, tf.ones_like(hi))
        scaled = tf.where(ok, (values - lo) / span, tf.sigmoid(values))
        return scaled * (output_max - output_min) + output_min

    return _map_values(x, scale)


def scale_to_0_1(x: Any, elementwise: bool = False, name: str | None = None) -> Any:
    """scale_by_min_max to [0, 1]."""
    return scale_by_min_max(x, 0.0, 1.0, elementwise=elementwise, name=name)


# ------------------------------------------------------------------ vocabularies
def vocabulary(x: Any, *, top_k: int | None = None, frequency_threshold: float | None = None,
               vocab_filename: str | None = None, store_frequency: bool = False,
               reserved_tokens: Any = None, weights: Any = None, labels: Any = None,
               use_adjusted_mutual_info: bool = False, min_diff_from_avg: Any = None,
               coverage_top_k: int | None = None, coverage_frequency_threshold: Any = None,
               key_fn: Any = None, fingerprint_shuffle: bool = False, file_format: str = "text",
               name: str | None = None) -> Any:
    """The tokens of `x` (strings or integers, any shape, ragged or sparse too) by count then
    token bytes, descending; counts >= `frequency_threshold`, then the first `top_k`."""
    tf = _tf()
    _refuse("vocabulary", store_frequency=store_frequency, reserved_tokens=reserved_tokens,
            weights=weights, labels=labels, use_adjusted_mutual_info=use_adjusted_mutual_info,
            min_diff_from_avg=min_diff_from_avg, coverage_top_k=coverage_top_k,
            coverage_frequency_threshold=coverage_frequency_threshold, key_fn=key_fn,
            fingerprint_shuffle=fingerprint_shuffle, file_format=file_format)
    if top_k is not None and top_k <= 0:
        raise ValueError(f"top_k must be positive. Received: top_k={top_k}")
    if frequency_threshold is not None and frequency_threshold < 0:
        raise ValueError("frequency_threshold must be non-negative. "
                         f"Received: frequency_threshold={frequency_threshold}")
    v = _values(x)
    if v.dtype != tf.string and not v.dtype.is_integer:
        raise TypeError(f"tft.vocabulary: x must be a string or integer tensor. Received: "
                        f"{v.dtype.name} tensor {v.name!r}; a vocabulary of numbers needs "
                        "bucketize, or cast them to int64 first")
    tokens = v if v.dtype == tf.string else tf.strings.as_string(v)
    k = tft_trace.analyzer_index()
    filename = tft_trace.sanitized_vocab_filename(
        vocab_filename if vocab_filename is not None else f"vocab_{k}")
    trace = tft_trace.current()
    trace.vocab_files[filename] = k
    (vocab,) = tft_trace.analyzer(
        "vocabulary", [tokens], {"top_k": top_k, "frequency_threshold": frequency_threshold,
                                 "vocab_filename": filename, "integer": v.dtype != tf.string},
        [(tf.string, [None])])
    trace.vocab_tensors[vocab.ref()] = k
    return vocab


def apply_vocabulary(x: Any, deferred_vocab_filename_tensor: Any, *, default_value: int = -1,
                     num_oov_buckets: int = 0, lookup_fn: Any = None, file_format: str = "text",
                     name: str | None = None) -> Any:
    """Ids of `x` in a vocabulary from `vocabulary()`: its line number; unknown tokens get
    `default_value`, or with `num_oov_buckets` Fingerprint64(token) % buckets + size."""
    tf = _tf()
    _refuse("apply_vocabulary", lookup_fn=lookup_fn, file_format=file_format)
    trace = tft_trace.current()
    k = trace.vocab_tensors.get(deferred_vocab_filename_tensor.ref())
    if k is None:
        raise ValueError("tft.apply_vocabulary: deferred_vocab_filename_tensor must be what "
                         "tft.vocabulary returned in this preprocessing_fn")
    v = _values(x)
    if v.dtype != tf.string and not v.dtype.is_integer:
        raise TypeError(f"tft.apply_vocabulary: x must be a string or integer tensor. "
                        f"Received: {v.dtype.name} tensor {v.name!r}")
    if k not in trace.resolved:  # an analysis phase: a placeholder that depends on the vocab
        dep = tf.cast(tf.size(deferred_vocab_filename_tensor) * 0, tf.int64)
        return _map_values(x, lambda t: tf.zeros_like(t, tf.int64) + dep)
    tokens = list(trace.resolved[k][0])
    with tf.init_scope():
        init = tf.lookup.KeyValueTensorInitializer(
            tf.constant(tokens, tf.string), tf.range(len(tokens), dtype=tf.int64))
        table = (tf.lookup.StaticVocabularyTable(init, num_oov_buckets) if num_oov_buckets > 0
                 else tf.lookup.StaticHashTable(init, tf.constant(default_value, tf.int64)))
    trace.tables.append(table)
    size_ = len(tokens)
    lo, hi = ((0, size_ + num_oov_buckets - 1) if num_oov_buckets > 0
              else (builtins.min(0, default_value), builtins.max(size_ - 1, default_value)))
    out = _map_values(x, lambda t: table.lookup(
        t if t.dtype == tf.string else tf.strings.as_string(t)))
    trace.domains[_values(out).ref()] = (lo, hi)
    return out


def compute_and_apply_vocabulary(
        x: Any, *, default_value: int = -1, top_k: int | None = None,
        frequency_threshold: float | None = None, num_oov_buckets: int = 0,
        vocab_filename: str | None = None, weights: Any = None, labels: Any = None,
        use_adjusted_mutual_info: bool = False, min_diff_from_avg: float = 0.0,
        coverage_top_k: int | None = None, coverage_frequency_threshold: Any = None,
        key_fn: Any = None, fingerprint_shuffle: bool = False, file_format: str = "text",
        store_frequency: bool = False, reserved_tokens: Any = None,
        name: str | None = None) -> Any:
    """vocabulary(x, ...) then apply_vocabulary(x, it, ...)."""
    vocab = vocabulary(
        x, top_k=top_k, frequency_threshold=frequency_threshold, vocab_filename=vocab_filename,
        store_frequency=store_frequency, reserved_tokens=reserved_tokens, weights=weights,
        labels=labels, use_adjusted_mutual_info=use_adjusted_mutual_info,
        min_diff_from_avg=min_diff_from_avg or None, coverage_top_k=coverage_top_k,
        coverage_frequency_threshold=coverage_frequency_threshold, key_fn=key_fn,
        fingerprint_shuffle=fingerprint_shuffle, file_format=file_format)
    return apply_vocabulary(x, vocab, default_value=default_value,
                            num_oov_buckets=num_oov_buckets)


# ------------------------------------------------------------------ buckets and hashes
def quantiles(x: Any, num_buckets: int, epsilon: float, weights: Any = None,
              reduce_instance_dims: bool = True, name: str | None = None) -> Any:
    """Bucket boundaries of the finite values of `x`: float32 `[1, num_buckets - 1]`."""
    tf = _tf()
    _refuse("quantiles", weights=weights)
    if not reduce_instance_dims:
        raise NotImplementedError("tft.quantiles: reduce_instance_dims=False is not supported "
                                  "by baton.tft")
    (bounds,) = tft_trace.analyzer(
        "quantiles", [tf.cast(_values(x), tf.float32)],
        {"num_buckets": int(num_buckets), "epsilon": float(epsilon)},
        [(tf.float32, [1, builtins.max(int(num_buckets) - 1, 0)])])
    return bounds


def apply_buckets(x: Any, bucket_boundaries: Any, name: str | None = None) -> Any:
    """Bucket ids: the number of boundaries <= x (a value on a boundary goes up; NaN last)."""
    tf = _tf()
    bounds = tf.reshape(tf.cast(bucket_boundaries, tf.float32), [-1])

    def assign(values: Any) -> Any:
        flat = tf.reshape(tf.cast(values, tf.float32), [-1])
        ids = tf.searchsorted(bounds, flat, side="right", out_type=tf.int64)
        ids = tf.where(tf.math.is_nan(flat), tf.size(bounds, out_type=tf.int64), ids)
        return tf.reshape(ids, tf.shape(values))

    out = _map_values(x, assign)
    n = int(bucket_boundaries.shape[-1]) if bucket_boundaries.shape[-1] is not None else None
    if n is not None:
        tft_trace.current().domains[_values(out).ref()] = (0, n)
    return out


def bucketize(x: Any, num_buckets: int, epsilon: float | None = None, weights: Any = None,
              elementwise: bool = False, name: str | None = None) -> Any:
    """apply_buckets(x, quantiles(x, num_buckets, epsilon)); epsilon min(1/num_buckets, 0.01)."""
    if not isinstance(num_buckets, int):
        raise TypeError(f"num_buckets must be an int. Received: {num_buckets!r}")
    if num_buckets < 1:
        raise ValueError(f"Invalid num_buckets {num_buckets}")
    if elementwise:
        raise NotImplementedError("tft.bucketize: elementwise=True is not supported by baton.tft")
    eps = epsilon if epsilon is not None else builtins.min(1.0 / num_buckets, 0.01)
    return apply_buckets(x, quantiles(x, num_buckets, eps, weights=weights))


def hash_strings(strings: Any, hash_buckets: int, key: Any = None, name: str | None = None) -> Any:
    """Fingerprint64 % hash_buckets (to_hash_bucket_fast); with `key`, keyed SipHash."""
    tf = _tf()
    v = _values(strings)
    if v.dtype != tf.string:
        raise TypeError(f"tft.hash_strings: strings must be a string tensor. Received: "
                        f"{v.dtype.name} tensor {v.name!r}")
    if key is None:
        out = _map_values(strings, lambda t: tf.strings.to_hash_bucket_fast(t, hash_buckets))
    else:
        out = _map_values(strings, lambda t: tf.strings.to_hash_bucket_strong(t, hash_buckets,
                                                                              list(key)))
    # (tf.Transform records no domain here; Baton's feature spec needs the id range)
    tft_trace.current().domains[_values(out).ref()] = (0, hash_buckets - 1)
    return out


SUPPORTED = ("TFTransformOutput", "apply_buckets", "apply_vocabulary", "bucketize", "compute_and_apply_vocabulary",
             "hash_strings", "max", "mean", "min", "quantiles", "scale_by_min_max",
             "scale_to_0_1", "scale_to_z_score", "size", "sum", "var", "vocabulary")
