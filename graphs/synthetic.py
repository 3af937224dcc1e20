"""Synthetic transformed data with a learnable signal, for tests and benchmarks.

It has exactly the element structure of `graphs.input_pipeline.make_dataset`
(`(features: dict of [B] tensors, label [B] int64)`), so loops, strategies and models can be
tested and benchmarked without the data plane, and a benchmark's input pipeline cost is the cost
of an in-memory dataset only.
"""

from __future__ import annotations

from typing import Any

from baton.graphs.feature_spec import Feature, FeatureSpec, Label, RawFeature


def synthetic_spec(
    numeric: int = 4, categorical: tuple[int, ...] = (3,), classes: int = 3
) -> FeatureSpec:
    """A spec with `numeric` float features `x0..`, categoricals `c0..` (vocab sizes given)."""
    feats = [Feature(f"x{i}", "numeric") for i in range(numeric)]
    feats += [Feature(f"c{i}", "categorical", v) for i, v in enumerate(categorical)]
    raw = [RawFeature(f.name, "float32" if f.kind == "numeric" else "string") for f in feats]
    return FeatureSpec(
        tuple(raw),
        tuple(feats),
        Label("label", "classification", tuple(str(i) for i in range(classes))),
    )


def synthetic_arrays(spec: FeatureSpec, n: int, seed: int = 0) -> tuple[dict[str, Any], Any]:
    """`n` examples whose label is a (noisy-free) function of the features: learnable to ~100%."""
    import numpy as np

    rng = np.random.default_rng(seed)
    k = spec.label.num_classes
    score = np.zeros((n, k), np.float32)
    feats: dict[str, Any] = {}
    for i, f in enumerate(spec.features):
        if f.kind == "numeric":
            x = rng.standard_normal(n).astype(np.float32)
            score[:, i % k] += x
        else:
            x = rng.integers(0, f.vocab_size, n).astype(np.int64)
            score[np.arange(n), x % k] += 0.5
        feats[f.name] = x
    return feats, score.argmax(axis=1).astype(np.int64)


def synthetic_dataset(
    spec: FeatureSpec,
    n: int,
    batch_size: int,
    *,
    seed: int = 0,
    shuffle: bool = False,
    repeat: bool = False,
    input_context: Any = None,
    drop_remainder: bool = False,
) -> Any:
    """A cached in-memory tf.data pipeline of `n` synthetic examples (the same `n` for any seed)."""
    import tensorflow as tf

    feats, labels = synthetic_arrays(spec, n, seed=0)
    ds = tf.data.Dataset.from_tensor_slices((feats, labels))
    if input_context is not None and input_context.num_input_pipelines > 1:
        ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    ds = ds.cache()
    if shuffle:
        ds = ds.shuffle(min(n, 10_000), seed=seed, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()
    return ds.batch(batch_size, drop_remainder=drop_remainder).prefetch(tf.data.AUTOTUNE)
