"""tft.vocabulary, tft.apply_vocabulary and tft.compute_and_apply_vocabulary (the graph side).

As in tf.Transform, `vocabulary()` returns the path of the vocabulary file: a string tensor
that `apply_vocabulary`, a `lookup_fn` or a table the function builds itself
(`tf.lookup.TextFileInitializer(path, ...)`) read. Once the analyzer is known the file is
written (graphs.tft.vocab_order: text lines, or a GZIP TFRecord file) into a directory of this
process, keyed by its content, and wrapped as a `tf.saved_model.Asset`, which the transform
SavedModel copies into `assets/` and finds again wherever it is moved. Before that, the path
is a placeholder, and what is computed from it waits for a later phase.

Each batch is reduced in the graph before it leaves TensorFlow, as tf.Transform's
`reduce_batch_weighted_counts` / `reduce_batch_weighted_cooccurrences` do: distinct tokens with
their counts, summed weights, or summed weights per label value (a sentinel token counts the
label's own distribution for mutual information).
"""

from __future__ import annotations

import atexit
import hashlib
import shutil
import tempfile
from pathlib import Path
from typing import Any

from baton.graphs.tft import reduce as tft_reduce
from baton.graphs.tft import trace as tft_trace
from baton.graphs.tft import vocab_order as tft_vocab_order

FILE_FORMATS = ("text", "tfrecord_gzip")
_DIR: list[Path] = []


def vocabulary(x: Any, *, top_k: Any = None, frequency_threshold: Any = None,
               vocab_filename: str | None = None, store_frequency: bool = False,
               reserved_tokens: Any = None, weights: Any = None, labels: Any = None,
               use_adjusted_mutual_info: bool = False, min_diff_from_avg: Any = None,
               coverage_top_k: Any = None, coverage_frequency_threshold: Any = None,
               key_fn: Any = None, fingerprint_shuffle: bool = False, file_format: str = "text",
               name: str | None = None) -> Any:
    """The distinct values of `x` (strings or integers; dense, sparse or ragged) as a
    vocabulary file, most frequent first (ties: token bytes descending); returns its path."""
    tf = tft_reduce.tf_()
    top_k, frequency_threshold = _limits(top_k, frequency_threshold, "top_k",
                                         "frequency_threshold")
    if (coverage_top_k or coverage_frequency_threshold) and not key_fn:
        raise ValueError("You must specify `key_fn` if you specify `coverage_top_k` or "
                         "`coverage_frequency_threshold` in `vocabulary`.")
    if key_fn and not (coverage_top_k or coverage_frequency_threshold):
        raise ValueError("You must specify `coverage_top_k` or `coverage_frequency_threshold` "
                         "if you specify `key_fn` in `vocabulary`.")
    _check_format(file_format)
    coverage_top_k, coverage_frequency_threshold = _limits(
        coverage_top_k, coverage_frequency_threshold, "coverage_top_k",
        "coverage_frequency_threshold")
    v = tft_reduce.values(x)
    if v.dtype != tf.string and not v.dtype.is_integer:
        raise ValueError(f"tft.vocabulary: expected tf.string or integer but got {v.dtype.name} "
                         f"(tensor {getattr(v, 'name', '?')!r}); a vocabulary of numbers needs "
                         "bucketize, or cast them to int64 first")
    if labels is not None and not tft_reduce.values(labels).dtype.is_integer:
        raise ValueError(f"expected integer labels but got {labels.dtype.name}")
    info_threshold = coverage_info = None
    if labels is not None:
        ordering = "weighted_mi" if weights is not None else "mi"
        info_threshold, frequency_threshold = frequency_threshold, 0.0
        coverage_info, coverage_frequency_threshold = coverage_frequency_threshold, 0.0
    else:
        ordering = "weighted" if weights is not None else "frequency"
    trace = tft_trace.current()
    k = tft_trace.analyzer_index()
    with tf.name_scope(name or "vocabulary"):  # tf.Transform's default file name: the scope's
        default = ("vocab_frequency_" if store_frequency else "vocab_") + tft_trace.scope_name()
    filename = trace.prefix + tft_trace.sanitized_vocab_filename(vocab_filename or default)
    params = {"ordering": ordering, "top_k": top_k, "frequency_threshold": frequency_threshold,
              "informativeness_threshold": info_threshold, "key_fn": key_fn,
              "coverage_top_k": coverage_top_k,
              "coverage_frequency_threshold": coverage_frequency_threshold,
              "coverage_informativeness_threshold": coverage_info,
              "use_adjusted_mutual_info": use_adjusted_mutual_info,
              "min_diff_from_avg": min_diff_from_avg, "fingerprint_shuffle": fingerprint_shuffle,
              "store_frequency": bool(store_frequency), "file_format": file_format,
              "reserved_tokens": _reserved(reserved_tokens), "integer": v.dtype != tf.string,
              "filter_newlines": v.dtype == tf.string and file_format == "text",
              "vocab_filename": filename}
    known = k in trace.resolved
    out = tft_trace.analyzer("vocabulary", lambda: _batch_inputs(x, weights, labels, ordering),
                             params, [(tf.string, [])], raw=True)
    trace.vocab_files[filename] = k
    if not known:
        path = out[0]
    else:
        tokens, values = out
        path = _asset(trace, filename, params, tokens, values)
        trace.vocab_meta[k] = {**params, "path": str(path[1]), "size": len(tokens)}
        path = path[0]
    trace.vocab_tensors[path.ref()] = k
    return path


def apply_vocabulary(x: Any, deferred_vocab_filename_tensor: Any, *, default_value: Any = -1,
                     num_oov_buckets: int = 0, lookup_fn: Any = None, file_format: str = "text",
                     name: str | None = None) -> Any:
    """Ids of `x` in a vocabulary file: its line number; unknown tokens get `default_value`,
    or with `num_oov_buckets`, Fingerprint64(token) % buckets + size. `lookup_fn(x, path)`
    returns (ids, table size) instead of the default table."""
    return _apply(x, deferred_vocab_filename_tensor, default_value, num_oov_buckets, lookup_fn,
                  file_format, store_frequency=False)


def compute_and_apply_vocabulary(
        x: Any, *, default_value: Any = -1, top_k: Any = None, frequency_threshold: Any = None,
        num_oov_buckets: int = 0, vocab_filename: str | None = None, weights: Any = None,
        labels: Any = None, use_adjusted_mutual_info: bool = False,
        min_diff_from_avg: Any = 0.0, coverage_top_k: Any = None,
        coverage_frequency_threshold: Any = None, key_fn: Any = None,
        fingerprint_shuffle: bool = False, file_format: str = "text",
        store_frequency: bool = False, reserved_tokens: Any = None,
        name: str | None = None) -> Any:
    """vocabulary(x, ...) then apply_vocabulary(x, it, ...). With store_frequency and text
    files, spaces in string tokens are written and looked up as `__SPACE__` (tf.Transform's
    workaround: a line is `<count> <token>`, split at its first space)."""
    tf = tft_reduce.tf_()
    if store_frequency and file_format == "text" and tft_reduce.values(x).dtype == tf.string:
        x = tft_reduce.map_values(x, lambda t: tf.strings.regex_replace(t, " ", "__SPACE__"))
    with tf.name_scope(name or "compute_and_apply_vocabulary"):
        return _compute_and_apply(
            x, default_value, top_k, frequency_threshold, num_oov_buckets, vocab_filename,
            weights, labels, use_adjusted_mutual_info, min_diff_from_avg, coverage_top_k,
            coverage_frequency_threshold, key_fn, fingerprint_shuffle, file_format,
            store_frequency, reserved_tokens)


def _compute_and_apply(x: Any, default_value: Any, top_k: Any, frequency_threshold: Any,
                       num_oov_buckets: int, vocab_filename: Any, weights: Any, labels: Any,
                       use_adjusted_mutual_info: bool, min_diff_from_avg: Any,
                       coverage_top_k: Any, coverage_frequency_threshold: Any, key_fn: Any,
                       fingerprint_shuffle: bool, file_format: str, store_frequency: bool,
                       reserved_tokens: Any) -> Any:
    path = vocabulary(
        x, top_k=top_k, frequency_threshold=frequency_threshold, vocab_filename=vocab_filename,
        store_frequency=store_frequency, reserved_tokens=reserved_tokens, weights=weights,
        labels=labels, use_adjusted_mutual_info=use_adjusted_mutual_info,
        min_diff_from_avg=min_diff_from_avg, coverage_top_k=coverage_top_k,
        coverage_frequency_threshold=coverage_frequency_threshold, key_fn=key_fn,
        fingerprint_shuffle=fingerprint_shuffle, file_format=file_format)
    return _apply(x, path, default_value, num_oov_buckets, None, file_format, store_frequency)


def vocabulary_size(path: Any) -> Any:
    """The number of entries of a vocabulary `vocabulary()` returned, an int64 scalar (a
    placeholder that waits for it while it is unknown)."""
    tf = tft_reduce.tf_()
    trace = tft_trace.current()
    k = trace.vocab_tensors.get(path.ref())
    if k is None:
        raise ValueError("vocabulary_size: the path must be what tft.vocabulary returned")
    if k in trace.vocab_meta:
        return tf.constant(trace.vocab_meta[k]["size"], tf.int64)
    return tf.cast(tf.strings.length(path), tf.int64) * 0


def _apply(x: Any, path: Any, default_value: Any, num_oov_buckets: int, lookup_fn: Any,
           file_format: str, store_frequency: bool) -> Any:
    tf = tft_reduce.tf_()
    _check_format(file_format)
    v = tft_reduce.values(x)
    if v.dtype != tf.string and not v.dtype.is_integer:
        raise ValueError(f"tft.apply_vocabulary: expected tf.string or tf.int[8|16|32|64] but "
                         f"got {v.dtype.name} (tensor {getattr(v, 'name', '?')!r})")
    if path is None or (isinstance(path, bytes | str) and not path):
        raise ValueError("`deferred_vocab_filename_tensor` must not be empty.")
    trace = tft_trace.current()
    if isinstance(path, bytes | str):
        path = tf.constant(path)
    if tft_trace.depends_on_pending(path):  # the vocabulary is computed in this phase
        dep = tf.cast(tf.strings.length(path), tf.int64) * 0
        return tft_reduce.map_values(x, lambda t: tf.zeros_like(t, tf.int64) + dep)
    if lookup_fn is not None:
        result, size = lookup_fn(x, path)
        result = tft_reduce.map_values(result, tf.identity)
    else:
        k = trace.vocab_tensors.get(path.ref())
        meta = trace.vocab_meta.get(k, {}) if k is not None else {}
        source = meta.get("path") or tf.get_static_value(path)
        if source is None:
            raise ValueError("tft.apply_vocabulary: deferred_vocab_filename_tensor must be what "
                             "tft.vocabulary returned, or a constant path")
        source = source.decode() if isinstance(source, bytes) else str(source)
        fmt = meta.get("file_format", file_format)
        frequency = meta.get("store_frequency", store_frequency) if store_frequency else False
        with tf.init_scope():
            table, size = _table(source, fmt, frequency, v.dtype, num_oov_buckets,
                                 default_value)
        trace.tables.append(table)
        keys = v if v.dtype == tf.string else tf.cast(v, tf.int64)
        result = tft_reduce.compose(x)(_lookup(table, keys, size, num_oov_buckets))
    static = tf.get_static_value(size) if not isinstance(size, int) else size
    size = int(static) if static is not None else size
    if num_oov_buckets > 0:
        lo: Any = 0
        hi: Any = size - 1
    elif isinstance(size, int):
        lo, hi = min(0, default_value), max(size - 1, default_value)
    else:
        lo = tf.minimum(tf.constant(0, tf.int64), tf.cast(default_value, tf.int64))
        hi = tf.maximum(tf.cast(size, tf.int64) - 1, tf.cast(default_value, tf.int64))
    values = tft_reduce.values(result)
    if values.dtype == tf.int64:
        trace.domains[values.ref()] = (lo, hi)
    return result


def _table(path: str, file_format: str, store_frequency: bool, dtype: Any, num_oov_buckets: int,
           default_value: Any) -> tuple[Any, int]:
    """(a lookup table over a vocabulary file, its size with the OOV buckets, as tf.Transform
    counts it): tf.Transform's `_make_construct_vocabulary_table_function`, key = the line (the
    token after the value with store_frequency), value = its line number. With one OOV bucket
    the table's default is -1 and `_lookup` maps it to the size."""
    tf = tft_reduce.tf_()
    key_dtype = tf.string if dtype == tf.string else tf.int64
    if file_format == "text":
        kwargs = {"delimiter": " "} if store_frequency else {}
        init = tf.lookup.TextFileInitializer(
            path, key_dtype=key_dtype,
            key_index=1 if store_frequency else tf.lookup.TextFileIndex.WHOLE_LINE,
            value_dtype=tf.int64, value_index=tf.lookup.TextFileIndex.LINE_NUMBER, **kwargs)
    else:
        def entry(i: Any, record: Any) -> tuple[Any, Any]:
            key = tf.strings.split(record, " ", maxsplit=1)[-1] if store_frequency else record
            if key_dtype != tf.string:
                key = tf.strings.to_number(key, tf.int64)
            return key, i

        ds = tf.data.TFRecordDataset(path, compression_type="GZIP").enumerate().map(entry)
        init = tf.data.experimental.DatasetInitializer(ds)
        tft_trace.current().tables.append(ds)  # the SavedModel must track the dataset too
    if num_oov_buckets > 1:
        table = tf.lookup.StaticVocabularyTable(init, num_oov_buckets, lookup_key_dtype=key_dtype)
        return table, int(table.size().numpy())
    table = tf.lookup.StaticHashTable(init, tf.constant(-1 if num_oov_buckets else default_value,
                                                         tf.int64))
    return table, int(table.size().numpy()) + num_oov_buckets


def _lookup(table: Any, keys: Any, size: int, num_oov_buckets: int) -> Any:
    """The ids of `keys`. One OOV bucket is the vocabulary's size for every unknown key: the
    table's -1 becomes it, the ids TensorFlow's StaticVocabularyTable gives, without
    fingerprinting every key (known or not) to pick its bucket, 4% of the text benchmark's
    transform CPU time."""
    tf = tft_reduce.tf_()
    ids = table.lookup(keys)
    if num_oov_buckets != 1:
        return ids
    return tf.where(ids >= 0, ids, tf.constant(size - 1, tf.int64))


def _batch_inputs(x: Any, weights: Any, labels: Any, ordering: str) -> list[Any]:
    """This batch's reduction: distinct tokens and their counts or summed weights, or (with
    labels) summed weights per label value, plus the sentinel entry of the label's own
    distribution (tf.Transform's `reduce_batch_weighted_cooccurrences`)."""
    tf = tft_reduce.tf_()
    v = tft_reduce.values(x)
    flat = tf.reshape(v, [-1])
    tokens = flat if flat.dtype == tf.string else tf.strings.as_string(tf.cast(flat, tf.int64))
    w = None if weights is None else tf.reshape(tf.cast(tft_reduce.values(weights), tf.float32),
                                                [-1])
    uniq, idx, counts = tf.unique_with_counts(tokens, out_idx=tf.int64)
    if ordering == "frequency":
        return [uniq, counts]
    n = tf.size(uniq, out_type=tf.int64)
    if ordering == "weighted":
        return [uniq, tf.math.unsorted_segment_sum(w, idx, n)]
    if isinstance(labels, tf.SparseTensor | tf.RaggedTensor):
        raise NotImplementedError("tft.vocabulary: labels as a SparseTensor or RaggedTensor "
                                  "(multi-label) are not supported by baton.tft; supported: a "
                                  "dense integer tensor, one label per row or per element of x")
    lab = tf.cast(labels, tf.int64)
    if isinstance(x, tf.SparseTensor | tf.RaggedTensor):
        rows = tf.reshape(lab, [-1])
        y = tf.gather(rows, x.indices[:, 0] if isinstance(x, tf.SparseTensor) else _rows_of(x))
    elif lab.shape.rank == v.shape.rank:  # a label per element of x
        y = rows = tf.reshape(lab, [-1])
    else:  # a label per row, for every element of the row
        rows = tf.reshape(lab, [-1])
        shaped = tf.reshape(rows, tf.concat([tf.shape(rows), tf.ones(tf.rank(v) - 1, tf.int32)],
                                            0))
        y = tf.reshape(tf.broadcast_to(shaped, tf.shape(v)), [-1])
    ones = tf.ones_like(y, tf.float32) if w is None else w
    width = tf.maximum(tf.reduce_max(rows), 0) + 1
    cell = tf.where(y < 0, tf.constant(-1, tf.int64), idx * width + y)
    positives = tf.reshape(tf.math.unsorted_segment_sum(ones, cell, n * width), [n, width])
    same = w is not None and not isinstance(x, tf.SparseTensor | tf.RaggedTensor) and (
        lab.shape.rank == v.shape.rank or v.shape.rank == 1)
    row_w = w if same else tf.ones_like(rows, tf.float32)
    sentinel = tf.reshape(tf.math.unsorted_segment_sum(
        row_w, tf.where(rows < 0, tf.constant(-1, tf.int64), rows), width), [1, width])
    uniq = tf.concat([uniq, tf.constant([tft_vocab_order.SENTINEL])], 0)
    positives = tf.concat([positives, sentinel], 0)
    counts = tf.concat([counts, tf.size(rows, out_type=tf.int64)[None]], 0)
    if ordering == "mi":
        return [uniq, positives, counts]
    summed = tf.concat([tf.math.unsorted_segment_sum(ones, idx, n),
                        tf.reduce_sum(row_w)[None]], 0)
    return [uniq, summed, positives, counts]


def _rows_of(x: Any) -> Any:
    """The row (batch index) of each flat value of a ragged tensor."""
    tf = tft_reduce.tf_()
    splits = x.nested_row_splits
    ids = tf.ragged.row_splits_to_segment_ids(splits[-1])
    for outer in reversed(splits[:-1]):
        ids = tf.gather(tf.ragged.row_splits_to_segment_ids(outer), ids)
    return ids


def _asset(trace: Any, filename: str, params: dict[str, Any], tokens: Any,
           values: Any) -> tuple[Any, Path]:
    """The vocabulary file written (once per content) and its asset path tensor."""
    tf = tft_reduce.tf_()
    lines = tft_vocab_order.lines(params, tokens, values)
    digest = hashlib.sha1(b"\n".join(lines) + params["file_format"].encode()).hexdigest()[:16]
    name = filename + (".tfrecord.gz" if params["file_format"] == "tfrecord_gzip" else "")
    path = _asset_dir() / digest / name
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{name}.tmp")
        tft_vocab_order.write(tmp, params, tokens, values)
        tmp.replace(path)
    with tf.init_scope():
        asset = tf.saved_model.Asset(str(path))
    trace.assets.append(asset)
    return asset.asset_path, path


def _asset_dir() -> Path:
    """This process's directory of vocabulary files (removed when it exits): the transform
    SavedModel copies the files it uses into its own `assets/`."""
    if not _DIR:
        d = Path(tempfile.mkdtemp(prefix="baton-tft-vocab-"))
        atexit.register(shutil.rmtree, d, ignore_errors=True)
        _DIR.append(d)
    return _DIR[0]


def _limits(top_k: Any, threshold: Any, k_name: str, t_name: str) -> tuple[Any, Any]:
    """tf.Transform's `_get_top_k_and_frequency_threshold`: numbers or their strings."""
    if top_k is not None:
        top_k = int(top_k)
        if top_k <= 0:
            raise ValueError(f"{k_name} must be positive, but got: {top_k!r}")
    if threshold is not None:
        threshold = float(threshold)
        if threshold < 0:
            raise ValueError(f"{t_name} must be non-negative, but got: {threshold!r}")
    return top_k, threshold


def _check_format(file_format: str) -> None:
    if file_format not in FILE_FORMATS:
        raise ValueError(f'"{file_format}" is not an accepted file_format. It should be one of: '
                         f"{FILE_FORMATS}")


def _reserved(tokens: Any) -> list[bytes] | None:
    if tokens is None:
        return None
    tf = tft_reduce.tf_()
    if isinstance(tokens, tf.Tensor):
        value = tf.get_static_value(tokens)
        if value is None:
            raise ValueError("reserved_tokens must be known when the function is traced (a list "
                             "or a constant tensor)")
        tokens = value.tolist() if hasattr(value, "tolist") else value
    return [t if isinstance(t, bytes) else str(t).encode() for t in tokens]
