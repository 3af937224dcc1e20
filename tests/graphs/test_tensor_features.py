"""Tensor features in the graphs layer: feature spec, transform graph, input pipeline, model
inputs, the CNN and the serving signatures all carry an image as one `[B, H, W, C]` tensor."""

from __future__ import annotations

import json

import numpy as np
import pytest

from baton.graphs import models
from baton.graphs import signatures as S
from baton.graphs.feature_spec import Feature, FeatureSpec, Image, Label, RawFeature
from baton.graphs.input_pipeline import make_dataset
from baton.graphs.model_spec import ModelSpec

SHAPE = (6, 5, 3)


def _spec(shape: tuple[int, ...] = SHAPE, extra: bool = True) -> FeatureSpec:
    """An image tensor feature, plus (extra) a scalar numeric and a vector tensor feature."""
    raw = [RawFeature("image", "float32", shape)]
    feats = [Feature("image", "numeric", shape=shape)]
    if extra:
        raw += [RawFeature("x", "float32"), RawFeature("v", "float32", (4,))]
        feats += [Feature("x", "numeric"), Feature("v", "numeric", shape=(4,))]
    return FeatureSpec(tuple(raw), tuple(feats), Label("label", "classification", ("a", "b", "c")),
                       images=(Image("image", shape),) if len(shape) == 3 else ())


def test_feature_spec_round_trips_tensor_features_and_keeps_scalar_json_unchanged(tmp_path):
    spec = _spec()
    again = FeatureSpec.load(spec.save(tmp_path))
    assert again == spec
    assert again.tensor("image").shape == SHAPE and again.tensor("x") is None
    assert [f.name for f in again.tensors] == ["image", "v"]
    data = json.loads((tmp_path / "feature_spec.json").read_text())
    assert data["features"][0] == {"name": "image", "kind": "numeric", "vocab_size": 0,
                                   "shape": list(SHAPE)}
    assert data["features"][1] == {"name": "x", "kind": "numeric", "vocab_size": 0}  # as before
    assert data["raw_features"][1] == {"name": "x", "dtype": "float32"}
    assert data["images"] == [{"name": "image", "shape": list(SHAPE)}]


def test_a_feature_spec_written_before_tensor_features_still_loads():
    """Pixel columns and `images` (the earlier layout) load and keep their meaning."""
    old = {"raw_features": [{"name": f"img_{i}", "dtype": "float32"} for i in range(4)],
           "features": [{"name": f"img_{i}", "kind": "numeric", "vocab_size": 0}
                        for i in range(4)],
           "label": {"name": "label", "task": "classification", "vocabulary": ["a", "b"]},
           "images": [{"name": "img", "shape": [2, 2, 1]}]}
    spec = FeatureSpec.from_dict(old)
    assert spec.images == (Image("img", (2, 2, 1)),) and spec.tensors == []
    assert spec.to_dict() == old


@pytest.mark.parametrize(("make", "message"), [
    # a dense feature's dimensions are known (ragged and sparse ones may have None)
    (lambda: Feature("c", "categorical", 3, shape=(None,)), r"shape must be a tuple of positive"),
    (lambda: Feature("c", "categorical", 3, encoding="packed"), r"encoding must be dense, "),
    (lambda: Feature("x", "numeric", shape=(0, 2)), r"shape must be a tuple of positive"),
    (lambda: RawFeature("s", "string", (2,)), r"tensor features are numeric"),
    (lambda: FeatureSpec((), (Feature("image", "numeric", shape=(2, 2, 1)),), Label("y"),
                         images=(Image("image", (2, 2, 3)),)), r"its feature has shape \(2, 2, 1\)"),
])
def test_bad_tensor_features_name_what_was_received(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_model_spec_inputs_have_the_tensor_shapes():
    inputs = ModelSpec.from_feature_spec(_spec()).inputs
    assert tuple(inputs["image"].shape) == (None, *SHAPE)
    assert tuple(inputs["x"].shape) == (None,)
    assert tuple(inputs["v"].shape) == (None, 4)


def _identity_transform(path) -> None:
    """The transform the stage exports for an image column of kind identity."""
    from baton.graphs.column_kinds import ColumnsFn
    from baton.graphs.tft import module as tft_module

    fn, raw = ColumnsFn({"image": {"kind": "identity"}}), [("image", "float32", SHAPE)]
    label = {"name": "label", "dtype": "string", "task": "classification",
             "vocabulary": ["a", "b", "c"]}
    tft_module.save(tft_module.build_module(fn, raw, label, {}), path)


def test_input_pipeline_yields_tensor_features_as_batches_of_tensors(tmp_path):
    import tensorflow as tf

    from baton.pipeline.dataplane.records.transformed_io import write_chunks

    spec = _spec()
    n = 50
    image = np.arange(n * np.prod(SHAPE), dtype=np.float32).reshape(n, *SHAPE)
    cols = {"image": image, "x": np.arange(n, dtype=np.float32),
            "v": np.arange(n * 4, dtype=np.float32).reshape(n, 4),
            "label": np.arange(n, dtype=np.int64) % 3}
    (tmp_path / "train").mkdir()
    with tf.io.TFRecordWriter(str(tmp_path / "train" / "part-00000.tfrecord")) as w:
        write_chunks(w, cols, chunk_rows=7)
    batches = list(make_dataset(tmp_path, "train", spec, 16))
    feats, label = batches[0]
    assert feats["image"].shape == (16, *SHAPE) and feats["v"].shape == (16, 4)
    assert feats["x"].shape == (16,) and label.shape == (16,)
    got = np.concatenate([b[0]["image"].numpy() for b in batches])
    np.testing.assert_array_equal(got, image)
    shuffled = list(make_dataset(tmp_path, "train", spec, 16, shuffle=True, seed=1))
    rows = np.concatenate([b[0]["x"].numpy() for b in shuffled]).astype(int)
    assert sorted(rows) == list(range(n)) and list(rows) != list(range(n))
    images = np.concatenate([b[0]["image"].numpy() for b in shuffled])
    np.testing.assert_array_equal(images, image[rows])  # rows stay whole when shuffled


def test_cnn_takes_the_image_tensor_as_it_arrives(tmp_path):
    import keras

    spec = FeatureSpec.from_dict(_spec().to_dict())
    model = models.build_model("cnn", spec, models.CNNConfig(filters=(4,)))
    assert tuple(model.get_layer("image").output.shape) == (None, *SHAPE)  # the Input itself
    assert model.get_layer("conv_0").input.shape[1:] == SHAPE
    batch = {"image": np.random.default_rng(1).random((2, *SHAPE), dtype=np.float32),
             "x": np.zeros(2, np.float32), "v": np.zeros((2, 4), np.float32)}
    out = np.asarray(model(batch))
    assert out.shape == (2, 3)
    model.save(tmp_path / "cnn.keras")
    np.testing.assert_allclose(np.asarray(keras.models.load_model(tmp_path / "cnn.keras")(batch)),
                               out, rtol=1e-6)
    # an image_shape with as many values reshapes it; one with another count is refused
    other = models.build_model("cnn", spec, models.CNNConfig(image_shape=(5, 6, 3), filters=(4,)))
    assert other.get_layer("conv_0").input.shape[1:] == (5, 6, 3)
    with pytest.raises(ValueError, match=r"image 'image' has shape \(6, 5, 3\) \(90 values\); "
                                         r"set image_shape to \[6, 5, 3\]"):
        models.build_model("cnn", spec, models.CNNConfig(image_shape=(8, 8, 1)))


def test_mlp_flattens_tensor_features():
    spec = _spec()
    model = models.build_model("mlp", spec)
    assert model.get_layer("image_col").output.shape[1:] == (int(np.prod(SHAPE)),)
    out = model({"image": np.zeros((3, *SHAPE), np.float32), "x": np.zeros(3, np.float32),
                 "v": np.ones((3, 4), np.float32)})
    assert np.asarray(out).shape == (3, 3)


def test_serving_signature_takes_the_image_as_one_input(tmp_path):
    import tensorflow as tf

    spec = _spec(extra=False)
    _identity_transform(tmp_path / "transform")
    transform = tf.saved_model.load(str(tmp_path / "transform"))
    model = models.build_model("cnn", spec, models.CNNConfig(filters=(4,)))
    S.save(S.build_module(transform, model, spec), tmp_path / "1", spec)
    loaded = tf.saved_model.load(str(tmp_path / "1"))
    serving = loaded.signatures["serving_default"]
    assert serving.structured_input_signature[1]["image"].shape.as_list() == [None, *SHAPE]
    assert loaded.signatures["predict_transformed"].structured_input_signature[1][
        "image"].shape.as_list() == [None, *SHAPE]
    image = np.random.default_rng(2).random((2, *SHAPE), dtype=np.float32)
    out = serving(image=tf.constant(image))
    want = tf.nn.softmax(model({"image": image})).numpy()
    np.testing.assert_allclose(out["probabilities"].numpy(), want, rtol=1e-5, atol=1e-6)
    # classify parses a tf.Example whose image is one float_list of H*W*C values
    ex = tf.train.Example(features=tf.train.Features(feature={"image": tf.train.Feature(
        float_list=tf.train.FloatList(value=image[0].reshape(-1)))}))
    scores = loaded.signatures["classify"](inputs=tf.constant([ex.SerializeToString()]))["scores"]
    np.testing.assert_allclose(scores.numpy()[0], want[0], rtol=1e-5, atol=1e-6)
    # warmup requests carry the image as one [1, H, W, C] tensor and replay
    logs = S.warmup_logs({"image": image}, [ex.SerializeToString()] * 2, spec, "m")
    assert list(logs[0].predict_log.request.inputs["image"].tensor_shape.dim[i].size
                for i in range(4)) == [1, *SHAPE]
    np.testing.assert_allclose(S.run_log(loaded, logs[0])["probabilities"][0], want[0],
                               rtol=1e-5, atol=1e-6)
