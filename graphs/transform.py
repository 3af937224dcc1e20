"""The transform as a TensorFlow graph, built from the analyzer results (`analysis.json`).

The Beam pipeline computes the analysis (means, variances, vocabularies, quantile boundaries)
and applies it to the training data with numpy. This module turns the same analysis into a
`tf.Module` whose `transform_features` is a `tf.function`: training-time code, the exported
SavedModel and the serving signature all call it, so raw features at serving time get exactly
the training transform (no train/serve skew). A test feeds identical rows through both paths
and requires identical outputs.

Semantics shared with `pipeline.dataplane.apply` (change both together):
- zscore:     NaN -> 0, else (x - mean) * (1 / std)      (std 1 when the variance is 0)
- minmax:     NaN -> 0, else (x - min) * (1 / (max - min)) (range 1 when max == min)
- identity:   NaN -> 0, else x
- bucketize:  id = #boundaries <= x, NaN -> len(boundaries) + 1; vocab_size = len + 2
- vocabulary: id = index in vocabulary; "" (missing) -> V; unknown -> V + 1 + hash % oov
- hash:       id = hash(x) % buckets; "" -> buckets; vocab_size = buckets + 1
All arithmetic is float32 with the two constants rounded to float32 once. Multiplying by a
reciprocal (rather than dividing) is deliberate: Grappler rewrites division by a constant into
multiplication, so dividing would differ from numpy by one ulp.
Hashes are TensorFlow's `to_hash_bucket_fast` (FarmHash fingerprint64) on both paths.

A tensor feature (an image `[H, W, C]`, a vector `[D]`; `shape` in its raw_features and
features entries) takes the numeric kinds only, applied elementwise with one mean/variance or
min/max over all of its values: a NaN element becomes 0, a missing tensor (all NaN) zeros.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ANALYSIS_FILE = "analysis.json"
NUMERIC_KINDS = ("zscore", "minmax", "identity")
CATEGORICAL_KINDS = ("bucketize", "vocabulary", "hash")


def vocab_size(op: Mapping[str, Any]) -> int:
    """The id range of a categorical transform (0 for numeric ones)."""
    kind = op["kind"]
    if kind == "bucketize":
        return len(op["boundaries"]) + 2
    if kind == "vocabulary":
        return len(op["vocabulary"]) + 1 + int(op["oov_buckets"])
    if kind == "hash":
        return int(op["buckets"]) + 1
    return 0


def scale_params(op: Mapping[str, Any]) -> tuple[float, float]:
    """(offset, scale) of a numeric transform: y = (x - offset) * scale, both in float32."""
    kind = op["kind"]
    if kind == "zscore":
        std = float(op["var"]) ** 0.5
        return float(op["mean"]), 1.0 / std if std > 0 else 1.0
    if kind == "minmax":
        rng = float(op["max"]) - float(op["min"])
        return float(op["min"]), 1.0 / rng if rng > 0 else 1.0
    return 0.0, 1.0


def load_analysis(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    return json.loads((p / ANALYSIS_FILE if p.is_dir() else p).read_text())


def build_module(analysis: Mapping[str, Any]) -> Any:
    """A `tf.Module` with `transform_features(raw)` and `transform_label(raw_label)`.

    `raw` maps every raw feature name to a `[None]` tensor (float32 with NaN for missing,
    string with "" for missing), or `[None, *shape]` for a tensor feature (`shape` in its
    raw_features entry); the result maps transformed feature names to tensors of the same
    shapes (float32 numeric, int64 categorical). `transform_label` maps raw labels to int64 class ids
    (-1 for an unknown class) or float32 regression targets.
    """
    import tensorflow as tf

    raw_specs = {
        r["name"]: tf.TensorSpec([None, *r.get("shape", ())],
                                 tf.float32 if r["dtype"] == "float32" else tf.string,
                                 name=r["name"])
        for r in analysis["raw_features"]
    }
    label = analysis["label"]
    label_dtype = tf.string if label["dtype"] == "string" else tf.float32

    class TransformModule(tf.Module):
        def __init__(self) -> None:
            super().__init__(name="baton_transform")
            self.tables = {}
            for op in analysis["features"]:
                if op["kind"] == "vocabulary" and op["vocabulary"]:
                    self.tables[op["name"]] = vocabulary_table(tf, op["vocabulary"])
            if label["task"] == "classification":
                self.label_table = vocabulary_table(tf, label["vocabulary"])
            self.analysis_json = tf.Variable(json.dumps(analysis), trainable=False)

        @tf.function(input_signature=[raw_specs], autograph=False)
        def transform_features(self, raw):
            return {op["name"]: _apply_op(tf, self.tables, op, raw[op["source"]])
                    for op in analysis["features"]}

        @tf.function(input_signature=[tf.TensorSpec([None], label_dtype, name="label")],
                     autograph=False)
        def transform_label(self, raw_label):
            return apply_label(tf, label["task"], getattr(self, "label_table", None), raw_label)

    return TransformModule()


def apply_label(tf, task, table, raw_label):  # noqa: ANN001, ANN201
    """Class ids (int64, -1 for an unknown class) or float32 targets: `transform_label` of both
    transform modules (this one and graphs.tft_module's)."""
    if task == "classification":
        return table.lookup(raw_label)
    return tf.cast(raw_label, tf.float32)


def vocabulary_table(tf, vocabulary):  # noqa: ANN001, ANN201
    keys = tf.constant(list(vocabulary), tf.string)
    values = tf.range(len(vocabulary), dtype=tf.int64)
    return tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, values), -1)


def _apply_op(tf, tables, op, x):  # noqa: ANN001, ANN202
    kind = op["kind"]
    if kind in NUMERIC_KINDS:
        offset, scale = scale_params(op)
        x = tf.cast(x, tf.float32)
        missing = tf.math.is_nan(x)
        if kind == "identity":
            y = x
        else:
            y = (x - tf.constant(offset, tf.float32)) * tf.constant(scale, tf.float32)
        return tf.where(missing, tf.zeros_like(y), y)
    if kind == "bucketize":
        boundaries = [float(b) for b in op["boundaries"]]
        x = tf.cast(x, tf.float32)
        ids = tf.cast(tf.raw_ops.Bucketize(input=x, boundaries=boundaries), tf.int64)
        return tf.where(tf.math.is_nan(x), tf.constant(len(boundaries) + 1, tf.int64), ids)
    missing = tf.equal(x, "")
    if kind == "hash":
        buckets = int(op["buckets"])
        ids = tf.strings.to_hash_bucket_fast(x, buckets)
        return tf.where(missing, tf.constant(buckets, tf.int64), ids)
    v, oov = len(op["vocabulary"]), int(op["oov_buckets"])
    found = tables[op["name"]].lookup(x) if v else tf.fill(tf.shape(x), tf.constant(-1, tf.int64))
    unknown = v + 1 + tf.strings.to_hash_bucket_fast(x, oov)
    ids = tf.where(found >= 0, found, unknown)
    return tf.where(missing, tf.constant(v, tf.int64), ids)


def save(analysis: Mapping[str, Any], directory: str | Path) -> Path:
    """Export the transform SavedModel to `directory` (plus `analysis.json` beside it)."""
    import tensorflow as tf

    d = Path(directory)
    module = build_module(analysis)
    tf.saved_model.save(module, str(d))
    (d / ANALYSIS_FILE).write_text(json.dumps(analysis, indent=1) + "\n")
    return d
