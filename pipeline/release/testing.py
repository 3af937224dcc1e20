"""Small upstream artifacts that follow docs/artifacts.md, for testing the release stages alone.

The release stages (evaluate, export, check, edge, push) consume `examples`, `transform_graph`
and `model` written by other stages. These builders write tiny but contract-exact versions of
those artifacts from the bundled penguins CSV, so release tests do not depend on (or wait for)
the real ingest/transform/train stages. Built once per process and cached: tests must treat the
returned directories as read-only.
"""

from __future__ import annotations

import atexit
import csv
import dataclasses
import functools
import json
import math
import shutil
import tempfile
from pathlib import Path

from baton.graphs.feature_spec import Feature, FeatureSpec, Label, RawFeature
from baton.graphs.transform import ANALYSIS_FILE
from baton.strategies.job import HISTORY_FILE, MODEL_FILE, TRAIN_INFO_FILE

DATA = Path(__file__).resolve().parents[1] / "data" / "penguins.csv"
NUMERIC = ("bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g")
CATEGORICAL = ("island", "sex")
LABEL = "species"
CLASSES = ("Adelie", "Chinstrap", "Gentoo")


@dataclasses.dataclass(frozen=True)
class Upstream:
    """Directories of the fixture artifacts (the inputs release stages receive)."""

    examples: Path
    transform_graph: Path
    model: Path
    spec: FeatureSpec


def read_rows() -> list[dict[str, float | str]]:
    """Penguins rows: floats (NaN when missing) and strings ("" when missing)."""
    rows = []
    with DATA.open() as f:
        for rec in csv.DictReader(f):
            row: dict[str, float | str] = {}
            for k in NUMERIC:
                row[k] = float("nan") if rec[k] == "NA" else float(rec[k])
            for k in (*CATEGORICAL, LABEL):
                row[k] = "" if rec[k] == "NA" else rec[k]
            rows.append(row)
    return rows


def write_examples(out: Path, rows: list[dict], eval_every: int = 3) -> Path:
    """An `examples` artifact: train/ and eval/ TFRecords of tf.Example plus schema.json."""
    import tensorflow as tf

    splits: dict[str, list[dict]] = {"train": [], "eval": []}
    for i, row in enumerate(rows):
        splits["eval" if i % eval_every == 0 else "train"].append(row)
    for split, part in splits.items():
        (out / split).mkdir(parents=True, exist_ok=True)
        with tf.io.TFRecordWriter(str(out / split / "data-00000-of-00001.tfrecord")) as w:
            for row in part:
                w.write(to_example(row).SerializeToString())
    schema = {
        "columns": [{"name": k, "dtype": "float32"} for k in NUMERIC]
        + [{"name": k, "dtype": "string"} for k in (*CATEGORICAL, LABEL)],
        "label": LABEL,
        "rows": {k: len(v) for k, v in splits.items()},
    }
    (out / "schema.json").write_text(json.dumps(schema, indent=2))
    return out


def to_example(row: dict):
    """A tf.train.Example: float_list for numbers, bytes_list for strings, absent when missing."""
    import tensorflow as tf

    feats = {}
    for k, v in row.items():
        if isinstance(v, float):
            if not math.isnan(v):
                feats[k] = tf.train.Feature(float_list=tf.train.FloatList(value=[v]))
        elif v != "":
            feats[k] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[v.encode()]))
    return tf.train.Example(features=tf.train.Features(feature=feats))


def feature_spec(rows: list[dict]) -> tuple[FeatureSpec, dict]:
    """The spec and analyzer results (means, stds, vocabularies) of the fixture transform."""
    analysis: dict = {"mean": {}, "std": {}, "vocab": {}}
    for k in NUMERIC:
        vals = [float(r[k]) for r in rows if not math.isnan(float(r[k]))]
        mean = sum(vals) / len(vals)
        analysis["mean"][k] = mean
        analysis["std"][k] = math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals)) or 1.0
    for k in CATEGORICAL:
        analysis["vocab"][k] = sorted({str(r[k]) for r in rows if r[k]})
    spec = FeatureSpec(
        raw_features=tuple(RawFeature(k, "float32") for k in NUMERIC)
        + tuple(RawFeature(k, "string") for k in CATEGORICAL),
        # id 0 is missing/out-of-vocabulary, so vocab_size is len(vocab) + 1
        features=tuple(Feature(k, "numeric") for k in NUMERIC)
        + tuple(Feature(k, "categorical", len(analysis["vocab"][k]) + 1) for k in CATEGORICAL),
        label=Label(LABEL, "classification", CLASSES),
    )
    return spec, analysis


def write_transform_graph(out: Path, spec: FeatureSpec, analysis: dict,
                          numeric: tuple[str, ...] = NUMERIC) -> Path:
    """A `transform_graph` artifact: a SavedModel with `transform_features` + feature_spec.json."""
    import tensorflow as tf

    class Transform(tf.Module):
        def __init__(self):
            super().__init__()
            self.tables = {}
            for k, vocab in analysis["vocab"].items():
                init = tf.lookup.KeyValueTensorInitializer(
                    tf.constant(vocab), tf.range(1, len(vocab) + 1, dtype=tf.int64)
                )
                self.tables[k] = tf.lookup.StaticHashTable(init, default_value=0)

        @tf.function(
            input_signature=[
                {k: tf.TensorSpec([None], tf.float32, name=k) for k in numeric}
                | {k: tf.TensorSpec([None], tf.string, name=k) for k in CATEGORICAL}
            ]
        )
        def transform_features(self, raw):
            out = {}
            for k in numeric:
                x = (raw[k] - analysis["mean"][k]) / analysis["std"][k]
                out[k] = tf.where(tf.math.is_nan(x), tf.zeros_like(x), x)
            for k in CATEGORICAL:
                out[k] = self.tables[k].lookup(raw[k])
            return out

    out.mkdir(parents=True, exist_ok=True)
    tf.saved_model.save(Transform(), str(out))
    spec.save(out)
    (out / ANALYSIS_FILE).write_text(json.dumps(analysis, indent=2))
    return out


def build_model(spec: FeatureSpec, hidden: int = 8):
    """A small Keras 3 functional model: dict of [B] tensors -> logits [B, C]."""
    import keras

    inputs, parts = {}, []
    for f in spec.features:
        if f.kind == "numeric":
            x = keras.Input(shape=(), dtype="float32", name=f.name)
            inputs[f.name] = x
            parts.append(keras.layers.Reshape((1,))(x))
        else:
            x = keras.Input(shape=(), dtype="int64", name=f.name)
            inputs[f.name] = x
            parts.append(keras.layers.Embedding(f.vocab_size, 2)(x))
    h = keras.layers.Concatenate()(parts)
    h = keras.layers.Dense(hidden, activation="relu")(h)
    logits = keras.layers.Dense(spec.label.num_classes)(h)
    return keras.Model(inputs, logits)


def write_model(out: Path, transform_dir: Path, rows: list[dict], spec: FeatureSpec,
                epochs: int = 30, seed: int = 0) -> Path:
    """A `model` artifact (model.keras + history.json) trained briefly on the fixture rows."""
    import keras
    import numpy as np
    import tensorflow as tf

    keras.utils.set_random_seed(seed)
    transform = tf.saved_model.load(str(transform_dir))
    raw = columns(rows, spec)
    feats = {k: v.numpy() for k, v in transform.transform_features(raw).items()}
    labels = np.array([CLASSES.index(str(r[LABEL])) for r in rows])
    model = build_model(spec)
    model.compile(
        optimizer=keras.optimizers.Adam(0.05),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    hist = model.fit(feats, labels, epochs=epochs, batch_size=64, verbose=0)
    out.mkdir(parents=True, exist_ok=True)
    model.save(out / MODEL_FILE)
    history = {k: [float(x) for x in v] for k, v in hist.history.items()}
    (out / HISTORY_FILE).write_text(json.dumps(history))
    (out / TRAIN_INFO_FILE).write_text(json.dumps({"steps": epochs * 4, "strategy": "default"}))
    return out


def columns(rows: list[dict], spec: FeatureSpec) -> dict:
    """Raw rows as the transform's input: {name: tf.Tensor[N]} (float32 or string)."""
    import tensorflow as tf

    out = {}
    for f in spec.raw_features:
        dtype = tf.string if f.dtype == "string" else tf.float32
        out[f.name] = tf.constant([r[f.name] for r in rows], dtype=dtype)
    return out


def scratch(prefix: str) -> Path:
    """A temporary directory removed when the process exits."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, root, True)
    return root


@functools.cache
def upstream() -> Upstream:
    """The fixture artifacts, built once per process under a temporary directory."""
    root = scratch("baton-release-fixture-")
    rows = read_rows()
    spec, analysis = feature_spec(rows)
    examples = write_examples(root / "examples", rows)
    tg = write_transform_graph(root / "transform_graph", spec, analysis)
    train = [r for i, r in enumerate(rows) if i % 3 != 0]
    model = write_model(root / "model", tg, train, spec)
    return Upstream(examples, tg, model, spec)


@functools.cache
def weak_model(epochs: int = 0, seed: int = 1) -> Path:
    """A model artifact that has (almost) not been trained: it fails any sensible gate."""
    up = upstream()
    root = scratch("baton-weak-model-")
    rows = [r for i, r in enumerate(read_rows()) if i % 3 != 0]
    return write_model(root / "model", up.transform_graph, rows, up.spec, epochs=epochs, seed=seed)


@functools.cache
def regression_upstream() -> Upstream:
    """Regression fixture: predict body_mass_g (grams / 1000) from the other columns.

    The model is built but not trained: tests of the regression path need its shapes and
    signatures, not its accuracy.
    """
    root = scratch("baton-regression-fixture-")
    rows = read_rows()
    label = "body_mass_g"
    numeric = tuple(k for k in NUMERIC if k != label)
    for r in rows:
        r[LABEL] = ""  # species is not a feature here: keep it out of the examples
    _, analysis = feature_spec(rows)
    spec = FeatureSpec(
        raw_features=tuple(RawFeature(k, "float32") for k in numeric)
        + tuple(RawFeature(k, "string") for k in CATEGORICAL),
        features=tuple(Feature(k, "numeric") for k in numeric)
        + tuple(Feature(k, "categorical", len(analysis["vocab"][k]) + 1) for k in CATEGORICAL),
        label=Label(label, "regression"),
    )
    examples = write_examples(root / "examples", rows)
    tg = write_transform_graph(root / "transform_graph", spec, analysis, numeric)
    (root / "model").mkdir()
    build_model(spec).save(root / "model" / MODEL_FILE)
    return Upstream(examples, tg, root / "model", spec)
