"""The tf.data reader of the `transformed` artifact, used by training and evaluation.

Records are columnar chunks (each feature a raw little-endian byte string of `n` values, see
`pipeline.dataplane.records.transformed_io`), so parsing is batched by construction: one
`parse_single_example` + `decode_raw` per chunk of thousands of rows. The pipeline:

    files -> [shard per worker] -> interleave(TFRecordDataset, AUTOTUNE) -> map(parse, AUTOTUNE)
          -> [cache] -> [repeat] -> [window shuffle] -> rebatch(batch_size) -> prefetch(AUTOTUNE)

No stage works per row: `rebatch` slices and concatenates chunks, and shuffling permutes
windows of `shuffle_buffer` rows drawn from a shuffled buffer of chunks (see
`_window_shuffle`).
Under a multi-worker strategy pass `input_context` (from `distribute_datasets_from_function`):
files are sharded per input pipeline when there are at least as many files as pipelines,
otherwise rows are. Without it, TensorFlow's AUTO policy applies (by file when there are
enough files, else by data), so `experimental_distribute_dataset` shards correctly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

WINDOW_VALUES = 1 << 23  # at most ~8M values (32 MB of float32) per shuffle window


def _files(transformed_dir: str | Path, split: str) -> list[str]:
    d = Path(transformed_dir) / split
    files = sorted(str(p) for p in d.glob("*.tfrecord"))
    if not files:
        raise FileNotFoundError(f"no transformed shards for split {split!r} in {d}")
    return files


def column_dtypes(feature_spec: Any) -> dict[str, str]:
    """Column name -> dtype of a transformed record (features and the label)."""
    cols = {f.name: f.dtype for f in feature_spec.features}
    cols[feature_spec.label.name] = (
        "int64" if feature_spec.label.task == "classification" else "float32")
    return cols


LENGTHS = "$row_lengths_"  # pipeline.dataplane.records.transformed_io's keys
INDICES = "$indices"
WIDTH = "$width"  # a narrowed int64 array's bytes per value (absent: 8)


def _int64(tf: Any, raw: Any, width: Any) -> Any:
    """A stored int64 array's values: raw little-endian bytes of `width` bytes per value
    (transformed_io narrows an int64 array to int8, int16 or int32 when its values fit)."""
    def as_int64(dtype: Any) -> Any:
        return lambda: tf.cast(tf.io.decode_raw(raw, dtype, little_endian=True), tf.int64)

    known = tf.debugging.Assert(tf.reduce_any(tf.equal(width, [1, 2, 4, 8])),
                                ["a transformed chunk's int64 array has width", width])
    with tf.control_dependencies([known]):
        index = (tf.cast(width >= 2, tf.int32) + tf.cast(width >= 4, tf.int32)
                 + tf.cast(width >= 8, tf.int32))
    return tf.switch_case(index, [as_int64(tf.int8), as_int64(tf.int16), as_int64(tf.int32),
                                  lambda: tf.io.decode_raw(raw, tf.int64, little_endian=True)])


def ragged_rank(feature: Any) -> int:
    """Stored ragged levels of a ragged feature: up to its last ragged (None) dimension; the
    uniform dimensions after it are the values' own (pipeline.dataplane.records.transformed_io)."""
    shape = tuple(getattr(feature, "shape", ()))
    last = max((i for i, d in enumerate(shape) if d is None), default=0)
    return last + 1


def _chunk_parser(feature_spec: Any) -> Any:
    """`record -> (features, label)`: one stored chunk of rows, decoded column by column. A
    ragged feature is a tf.RaggedTensor; a sparse one is, until `_finish`, the ragged rows of
    its values (and of its indices), so that rebatching and shuffling treat it like the rest."""
    import tensorflow as tf

    label = feature_spec.label.name
    features = {f.name: f for f in feature_spec.features}
    spec: dict[str, Any] = {}

    def stored(key: str, int64: bool) -> None:
        spec[key] = tf.io.FixedLenFeature([], tf.string)
        if int64:
            spec[key + WIDTH] = tf.io.FixedLenFeature([], tf.int64, default_value=8)

    y_int = feature_spec.label.task == "classification"
    stored(label, y_int)
    for f in feature_spec.features:
        if f.dtype == "string":
            spec[f.name] = tf.io.VarLenFeature(tf.string)
        else:
            stored(f.name, f.dtype == "int64")
        levels = ragged_rank(f) if f.encoding == "ragged" else (
            1 if f.encoding == "sparse" else 0)
        for k in range(levels):
            stored(f"{f.name}{LENGTHS}{k}", True)
        if f.encoding == "sparse" and len(f.shape) > 1:
            stored(f"{f.name}{INDICES}", True)

    def ints(raw: Any, key: str) -> Any:
        return _int64(tf, raw[key], raw[key + WIDTH])

    def values(raw: Any, f: Any, inner: tuple[Any, ...]) -> Any:
        if f.dtype == "string":
            v = raw[f.name].values
        elif f.dtype == "int64":
            v = ints(raw, f.name)
        else:
            v = tf.io.decode_raw(raw[f.name], tf.as_dtype(f.dtype), little_endian=True)
        return tf.reshape(v, [-1, *inner])

    def lengths(raw: Any, name: str, k: int) -> Any:
        return ints(raw, f"{name}{LENGTHS}{k}")

    def parse(record):  # noqa: ANN001, ANN202
        raw = tf.io.parse_single_example(record, spec)
        out = {}
        for name, f in features.items():
            if f.encoding == "dense":
                out[name] = values(raw, f, tuple(f.shape))
            elif f.encoding == "ragged":
                r = ragged_rank(f)
                v = values(raw, f, tuple(d for d in f.shape[r:]))
                out[name] = tf.RaggedTensor.from_nested_row_lengths(
                    v, [lengths(raw, name, k) for k in range(r)], validate=False)
            else:
                counts = lengths(raw, name, 0)
                out[name] = tf.RaggedTensor.from_row_lengths(values(raw, f, ()), counts,
                                                             validate=False)
                if len(f.shape) > 1:
                    idx = tf.reshape(ints(raw, f"{name}{INDICES}"), [-1, len(f.shape)])
                    out[f"{name}{INDICES}"] = tf.RaggedTensor.from_row_lengths(
                        idx, counts, validate=False)
        y = ints(raw, label) if y_int else tf.io.decode_raw(raw[label], tf.float32,
                                                              little_endian=True)
        return out, y

    # plain TensorFlow (Python loops over the spec only): autograph's conversion of it cost
    # ~1 s of each dataset's construction on 2 cores, more under load
    return tf.autograph.experimental.do_not_convert(parse)


def _finish(feature_spec: Any) -> Any:
    """The map turning sparse features' ragged rows into tf.SparseTensors (after batching):
    a 2-D one left-aligned (tf.Transform's VarLenFeature, as its written examples read
    back), a larger one at its stored indices with its dense shape (unknown dimensions: the
    batch's largest index + 1). None when there is no sparse feature."""
    import tensorflow as tf

    sparse = [f for f in feature_spec.features if f.encoding == "sparse"]
    if not sparse:
        return None

    def finish(features, labels):  # noqa: ANN001, ANN202
        out = dict(features)
        for f in sparse:
            rows = out[f.name]
            if len(f.shape) <= 1:
                out[f.name] = rows.to_sparse()
                continue
            idx = out.pop(f"{f.name}{INDICES}")
            positions = idx.flat_values
            indices = tf.concat([tf.expand_dims(rows.value_rowids(), 1), positions], axis=1)
            known = tf.constant([d if d is not None else 0 for d in f.shape], tf.int64)
            seen = tf.reduce_max(tf.concat([positions + 1, tf.zeros([1, len(f.shape)],
                                                                     tf.int64)], 0), axis=0)
            dims = tf.where(known > 0, known, seen)
            out[f.name] = tf.SparseTensor(indices, rows.flat_values,
                                          tf.concat([[rows.nrows()], dims], 0))
        return out, labels

    return tf.autograph.experimental.do_not_convert(finish)


def read_chunks(transformed_dir: str | Path, split: str, feature_spec: Any) -> Any:
    """The split's rows once, in file order, as the chunks were stored (no rebatch, no
    prefetch): what `graphs.row_table` loads. Re-batching to a fixed size would copy every row
    once more, and on a 1 GB split of images each fresh copy cost ~1.4 s on one core here (the
    kernel's first touch of the new pages), which a slowed worker pays before its first step."""
    import tensorflow as tf

    ds = tf.data.TFRecordDataset(_files(transformed_dir, split), buffer_size=4 << 20)
    ds = ds.map(_chunk_parser(feature_spec))
    finish = _finish(feature_spec)
    return ds if finish is None else ds.map(finish)


def make_dataset(
    transformed_dir: str | Path,
    split: str,
    feature_spec: Any,
    batch_size: int,
    *,
    shuffle: bool = False,
    repeat: bool = False,
    seed: int | None = None,
    input_context: Any = None,
    cache: bool = False,
    drop_remainder: bool = False,
    shuffle_buffer: int = 16_384,
) -> Any:
    """A `tf.data.Dataset` of `(features: dict[str, Tensor[B]], label: Tensor[B])`.

    A tensor feature (one with a `shape` in the feature spec) is `[B, *shape]`, e.g. an image
    `[B, H, W, C]`.

    Args:
        transformed_dir: the `transformed` artifact directory.
        split: "train" or "eval" (any split the transform wrote).
        feature_spec: `graphs.feature_spec.FeatureSpec` (from transform_graph/feature_spec.json).
        batch_size: rows per batch yielded by this dataset (per replica under a strategy).
        shuffle: shuffle files, chunks and rows (rows within windows of `shuffle_buffer` rows
            drawn from a shuffled buffer of chunks), reproducibly when `seed` is given.
        repeat: repeat forever (training by steps).
        input_context: a `tf.distribute.InputContext` to shard for this input pipeline.
        cache: cache the parsed chunks in memory after the first pass.
    """
    import tensorflow as tf

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1. Received: batch_size={batch_size}")
    files = _files(transformed_dir, split)
    parse = _chunk_parser(feature_spec)

    # Rows held at once by the shuffle window (and the row-sharding batch) are bounded in
    # values, so a window of images stays tens of MB instead of 16384 images.
    row_values = sum(f.size if getattr(f, "shape", ()) and getattr(f, "dense", True) else 1
                     for f in feature_spec.features)
    shuffle_buffer = max(batch_size, min(shuffle_buffer, WINDOW_VALUES // max(row_values, 1)))

    deterministic = seed is not None or not shuffle  # a seed promises a reproducible order
    ds = tf.data.Dataset.from_tensor_slices(files)
    by_file = True
    if input_context is not None and input_context.num_input_pipelines > 1:
        if len(files) >= input_context.num_input_pipelines:
            ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        else:
            by_file = False
    if shuffle:
        ds = ds.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
    ds = ds.interleave(
        lambda f: tf.data.TFRecordDataset(f, buffer_size=4 << 20),
        cycle_length=min(4, len(files)), num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=deterministic,
    )
    ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
    if cache:
        ds = ds.cache()
    if not by_file:
        ds = ds.unbatch().shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        ds = ds.batch(max(1, min(4096, WINDOW_VALUES // max(row_values, 1))))
    if repeat:
        ds = ds.repeat()
    if shuffle:
        ds = _window_shuffle(tf, ds, shuffle_buffer, seed)
    ds = ds.rebatch(batch_size, drop_remainder=drop_remainder)
    if input_context is not None:  # sharded above; a strategy must not shard again
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.OFF)
        ds = ds.with_options(options)
    finish = _finish(feature_spec)
    if finish is not None:
        ds = ds.map(finish, num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
    return ds.prefetch(tf.data.AUTOTUNE)


def _window_shuffle(tf: Any, ds: Any, window: int, seed: int | None) -> Any:
    """Shuffle rows without a per-row tf.data element.

    Chunks are shuffled in a buffer of chunks (mixing files and positions), regrouped into
    windows of `window` rows, and each window is permuted with one gather. Per-row
    `unbatch().shuffle().batch()` costs a tf.data element per row and capped the pipeline
    below the train step's rate; this costs a few vectorised ops per window.
    """
    ds = ds.shuffle(64, seed=seed, reshuffle_each_iteration=True)
    ds = ds.rebatch(window)
    seeds = tf.data.Dataset.random(seed=seed).batch(2)

    def permute(batch, s):  # noqa: ANN001, ANN202
        features, target = batch
        order = tf.random.experimental.stateless_shuffle(
            tf.range(tf.shape(target)[0]), seed=tf.cast(s % (2**31), tf.int64))
        return {k: tf.gather(v, order) for k, v in features.items()}, tf.gather(target, order)

    return tf.data.Dataset.zip((ds, seeds)).map(permute, num_parallel_calls=tf.data.AUTOTUNE)

