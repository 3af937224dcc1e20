"""Tensor columns in the data plane: written as one float_list per row (and a fixed-size list
in the Arrow copy), read back from either, summarised as one feature by statistics, checked
by validate, transformed over all of their values."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from baton.errors import StageError
from baton.pipeline.dataplane.records.example_codec import encode_batch
from baton.pipeline.dataplane.records.examples_writer import ExamplesWriter
from baton.pipeline.dataplane.records.reader import ABSENT, read_batches, tensor_values
from baton.pipeline.dataplane.records.schema_file import Column, ExamplesSchema, shard_files
from baton.pipeline.dataplane.statistics import accumulators as A
from baton.pipeline.dataplane.statistics import stats, validation
from baton.pipeline.testing import run_stage

SHAPE = (4, 3, 2)
K = 24


def _images(n: int = 10) -> np.ndarray:
    x = np.arange(n * K, dtype=np.float32).reshape(n, *SHAPE) / (n * K)
    x[3] = np.nan  # a missing image
    x[5, 1, 1, 1] = np.nan  # a NaN inside an image
    return x


def test_codec_writes_a_tensor_as_one_float_list_and_a_missing_tensor_as_absent():
    x = _images(6)
    label = np.array(["a", "b", "a", "b", "a", "b"], object)
    for i, rec in enumerate(encode_batch(["image", "label"], [x, label], [True, False])):
        f = tf.train.Example.FromString(rec).features.feature
        if i == 3:
            assert "image" not in f
            continue
        np.testing.assert_array_equal(np.array(f["image"].float_list.value, np.float32),
                                      x[i].reshape(-1))


def _write(tmp_path: Path, n: int = 10) -> tuple[Path, list[Column], np.ndarray]:
    cols = [Column("image", "float32", SHAPE), Column("x", "float32"), Column("label", "string")]
    x = _images(n)
    w = ExamplesWriter(tmp_path, cols, "label", {"train": 1.0}, 0, 1000)
    w.write_batch({"image": x, "x": np.arange(n, dtype=np.float32),
                   "label": np.array(["a", "b"] * (n // 2), object)}, split="train")
    w.close()
    ExamplesSchema(tuple(cols), "label", splits={"train": n}, images={"image": SHAPE}).save(tmp_path)
    return tmp_path, cols, x


@pytest.mark.parametrize("keep_nan", [False, True])
def test_arrow_copy_and_tfrecords_read_the_same_tensor(tmp_path, keep_nan):
    examples, cols, x = _write(tmp_path)
    shard = shard_files(examples, "train")[0]
    arrow = list(read_batches(shard, cols, keep_nan=keep_nan))
    (examples / "columnar" / "train" / "part-00000.arrow").unlink()  # the TFRecord path
    parsed = list(read_batches(shard, cols, keep_nan=keep_nan))
    a, p = (np.concatenate([tensor_values(b.column("image")) for b in bs]) for bs in (arrow, parsed))
    want = x.reshape(len(x), K).copy()
    if keep_nan:
        want[3] = ABSENT  # a missing tensor; the NaN inside image 5 stays a NaN
    np.testing.assert_array_equal(a, want)
    np.testing.assert_array_equal(p, want)


def test_statistics_summarise_a_tensor_as_one_feature_and_validate_checks_its_shape():
    acc = A.new_accumulators([Column("image", "float32", SHAPE)])["image"]
    assert isinstance(acc, A.TensorAcc)
    x = _images().reshape(10, K).copy()
    x[3] = ABSENT
    half = A.TensorAcc(SHAPE)
    half.add(x[:5], keep_nan=True)
    rest = A.TensorAcc(SHAPE)
    rest.add(x[5:], keep_nan=True)
    merged = half.merge(rest)
    s = stats.split_stats({"image": merged})
    f = s["features"]["image"]
    assert s["rows"] == 10 and f["shape"] == list(SHAPE)
    assert (f["count"], f["missing"], f["values"], f["nan"]) == (9, 1, 9 * K - 1, 1)
    finite = _images().reshape(-1)
    finite = finite[np.isfinite(finite)]
    assert f["mean"] == pytest.approx(float(finite.mean()), rel=1e-6)
    assert f["min"] == pytest.approx(float(finite.min())) and f["max"] == pytest.approx(
        float(finite.max()))
    assert sum(f["histogram"]["counts"]) == pytest.approx(9 * K - 1, rel=0.01)
    full = {"splits": {"train": s}}
    schema = stats.infer_schema(full, "label", "classification")
    assert schema["features"]["image"]["shape"] == list(SHAPE)
    kinds = {a.kind for a in validation.check(full, schema, drift_threshold=0.1,
                                              max_unseen_fraction=0.0, range_tolerance=0.0)}
    assert kinds == {"non_finite"}  # the NaN inside image 5
    bigger = json.loads(json.dumps(full))
    bigger["splits"]["train"]["features"]["image"]["shape"] = [8, 3, 2]
    found = validation.check(bigger, schema, drift_threshold=0.1, max_unseen_fraction=0.0,
                             range_tolerance=0.0)
    assert [(a.kind, a.message) for a in found] == [
        ("type_mismatch", "expected float32[4, 3, 2], found float32[8, 3, 2]")]


@pytest.mark.slow
def test_statistics_and_transform_stages_on_a_tensor_column(tmp_path):
    examples, _, x = _write(tmp_path / "examples", 40)
    out, _ = run_stage("statistics", {}, {"examples": examples}, tmp_path)
    f = json.loads((out["statistics"] / "statistics.json").read_text())["splits"]["train"][
        "features"]["image"]
    assert (f["count"], f["missing"], f["shape"]) == (39, 1, list(SHAPE))
    assert "tensor [4, 3, 2]" in (out["statistics"] / "statistics.txt").read_text()
    with pytest.raises(StageError, match=r"kind 'bucketize' does not fit a tensor column of "
                                         r"shape \[4, 3, 2\]"):
        run_stage("transform", {"columns": {"image": {"kind": "bucketize"}}},
                  {"examples": examples}, tmp_path, run_id="bad")
    t, _ = run_stage("transform", {"images": "zscore"}, {"examples": examples}, tmp_path)
    analysis = json.loads((t["transform_graph"] / "analysis.json").read_text())
    op = next(o for o in analysis["features"] if o["name"] == "image")
    finite = x[np.isfinite(x)].astype(np.float64)
    assert op["shape"] == list(SHAPE) and op["mean"] == pytest.approx(finite.mean(), rel=1e-6)
    meta = json.loads((t["transformed"] / "metadata.json").read_text())
    assert meta["shapes"] == {"image": list(SHAPE)}
    from baton.graphs.feature_spec import FeatureSpec
    from baton.graphs.input_pipeline import make_dataset

    spec = FeatureSpec.load(t["transform_graph"])
    assert spec.tensor("image").shape == SHAPE and spec.images[0].shape == SHAPE
    feats, _ = next(iter(make_dataset(t["transformed"], "train", spec, 64)))
    got = feats["image"].numpy()
    assert got.shape == (40, *SHAPE)
    graph = tf.saved_model.load(str(t["transform_graph"]))
    again = graph.transform_features({"image": tf.constant(x), "x": tf.zeros(40)})["image"]
    np.testing.assert_array_equal(got, again.numpy())  # the Beam rows equal the graph's
    assert abs(float(got[~np.isnan(x)].mean())) < 1e-5  # one z-score over all values
    assert np.all(got[3] == 0)  # the missing image


@pytest.mark.slow
def test_examples_written_before_tensor_columns_still_transform_and_build_the_cnn(tmp_path):
    """Pixel columns `image_<i>` with an `images` entry (the earlier layout) keep working."""
    from baton.graphs import models
    from baton.graphs.feature_spec import FeatureSpec

    n, k = 20, 8  # 2x2x2 images
    cols = [Column(f"image_{i}", "float32") for i in range(k)] + [Column("label", "string")]
    w = ExamplesWriter(tmp_path / "examples", cols, "label", {"train": 1.0}, 0, 1000)
    pixels = np.random.default_rng(0).random((n, k), dtype=np.float32)
    w.write_batch({**{f"image_{i}": pixels[:, i] for i in range(k)},
                   "label": np.array(["a", "b"] * (n // 2), object)}, split="train")
    w.close()
    ExamplesSchema(tuple(cols), "label", splits={"train": n},
                   images={"image": (2, 2, 2)}).save(tmp_path / "examples")
    t, _ = run_stage("transform", {}, {"examples": tmp_path / "examples"}, tmp_path)
    spec = FeatureSpec.load(t["transform_graph"])
    assert spec.tensors == [] and len(spec.features) == k and spec.images[0].shape == (2, 2, 2)
    model = models.build_model("cnn", spec, models.CNNConfig(filters=(2,)))
    assert model.get_layer("image").output.shape[1:] == (2, 2, 2)
