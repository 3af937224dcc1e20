"""The tf.data reader of the `transformed` artifact, used by training and evaluation.

Records are columnar chunks (each feature a raw little-endian byte string of `n` values, see
`pipeline.dataplane.transformed_io`), so parsing is batched by construction: one
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

_NUMPY_TO_TF = {"float32": "float32", "int64": "int64"}
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


def _chunk_parser(feature_spec: Any) -> Any:
    """`record -> (features, label)`: one stored chunk of rows, decoded column by column."""
    import tensorflow as tf

    dtypes = column_dtypes(feature_spec)
    label = feature_spec.label.name
    tf_dtypes = {k: tf.as_dtype(_NUMPY_TO_TF[v]) for k, v in dtypes.items()}
    spec = {k: tf.io.FixedLenFeature([], tf.string) for k in dtypes}
    shapes = {f.name: tuple(f.shape) for f in feature_spec.features if getattr(f, "shape", ())}

    def parse(record):  # noqa: ANN001, ANN202
        raw = tf.io.parse_single_example(record, spec)
        cols = {k: tf.io.decode_raw(raw[k], tf_dtypes[k], little_endian=True) for k in dtypes}
        for k, shape in shapes.items():  # a tensor feature's chunk: n * prod(shape) values
            cols[k] = tf.reshape(cols[k], [-1, *shape])
        return {k: v for k, v in cols.items() if k != label}, cols[label]

    return parse


def read_chunks(transformed_dir: str | Path, split: str, feature_spec: Any) -> Any:
    """The split's rows once, in file order, as the chunks were stored (no rebatch, no
    prefetch): what `graphs.row_table` loads. Re-batching to a fixed size would copy every row
    once more, and on a 1 GB split of images each fresh copy cost ~1.4 s on one core here (the
    kernel's first touch of the new pages), which a slowed worker pays before its first step."""
    import tensorflow as tf

    ds = tf.data.TFRecordDataset(_files(transformed_dir, split), buffer_size=4 << 20)
    return ds.map(_chunk_parser(feature_spec))


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
    row_values = sum(f.size if getattr(f, "shape", ()) else 1 for f in feature_spec.features)
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
