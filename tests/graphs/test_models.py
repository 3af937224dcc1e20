"""Model builders: shapes, dtypes, serialisation, and errors that name what was received."""

from __future__ import annotations

import numpy as np
import pytest

from baton.graphs import models
from baton.graphs.feature_spec import Feature, FeatureSpec, Image, Label, RawFeature
from baton.graphs.synthetic import synthetic_arrays, synthetic_spec
from tests.strategies.jobs import train_job


def _batch(spec: FeatureSpec, n: int = 5) -> dict:
    feats, _ = synthetic_arrays(spec, n)
    return feats


@pytest.mark.parametrize("kind", ["mlp", "wide_deep"])
def test_tabular_models_return_logits_per_class(kind: str) -> None:
    spec = synthetic_spec(3, (4, 2), classes=3)
    model = models.build_model(kind, spec)
    assert sorted(model.input) == sorted(f.name for f in spec.features)
    out = np.asarray(model(_batch(spec)))
    assert out.shape == (5, 3)
    assert np.all(np.isfinite(out))


def test_wide_deep_has_an_embedding_per_categorical_and_a_wide_part() -> None:
    spec = synthetic_spec(2, (10, 7), classes=2)
    model = models.build_model("wide_deep", spec, models.WideDeepConfig(embedding_dim=5))
    names = [layer.name for layer in model.layers]
    assert {"c0_embedding", "c1_embedding", "wide_logits", "deep_logits"} <= set(names)
    assert model.get_layer("c0_embedding").embeddings.shape == (10, 5)


def test_cnn_reshapes_pixel_features_into_an_image() -> None:
    spec = synthetic_spec(16, (), classes=4)
    model = models.build_model("cnn", spec, models.CNNConfig(image_shape=(4, 4, 1), filters=(4,)))
    assert model.get_layer("image").output.shape[1:] == (4, 4, 1)
    assert np.asarray(model(_batch(spec))).shape == (5, 4)


def test_cnn_refuses_a_spec_with_the_wrong_number_of_pixels() -> None:
    with pytest.raises(ValueError, match=r"needs 64 numeric pixel features.*Received: 3"):
        models.build_model("cnn", synthetic_spec(3, ()), models.CNNConfig(image_shape=(8, 8, 1)))
    with pytest.raises(ValueError, match=r"records no image.*Received: image_shape=\(\)"):
        models.build_model("cnn", synthetic_spec(3, ()), models.CNNConfig())


def _image_spec(shape: tuple[int, int, int] = (3, 4, 2)) -> FeatureSpec:
    """A spec with an image (pixels after a numeric and a categorical feature) and extras."""
    pixels = [Feature(f"img_{i}", "numeric") for i in range(shape[0] * shape[1] * shape[2])]
    feats = (Feature("x", "numeric"), Feature("c", "categorical", 4), *pixels)
    raw = tuple(RawFeature(f.name, "float32" if f.kind == "numeric" else "string") for f in feats)
    return FeatureSpec(raw, feats, Label("label", "classification", ("a", "b", "c")),
                       images=(Image("img", shape),))


def test_cnn_takes_the_image_and_its_shape_from_the_feature_spec(tmp_path) -> None:
    import keras

    spec = FeatureSpec.from_dict(_image_spec().to_dict())  # the images survive a round trip
    assert spec.images == (Image("img", (3, 4, 2)),)
    model = models.build_model("cnn", spec, models.CNNConfig(filters=(4,)))
    assert model.get_layer("image").output.shape[1:] == (3, 4, 2)
    batch = _batch(spec, 2)
    # pixel img_i is image[h, w, c] with i = (h * 4 + w) * 2 + c: the stack keeps that order
    image = np.arange(24, dtype=np.float32).reshape(3, 4, 2)
    for i in range(24):
        batch[f"img_{i}"] = np.full(2, image.reshape(-1)[i], np.float32)
    probe = keras.Model(model.inputs, model.get_layer("image").output)
    np.testing.assert_array_equal(np.asarray(probe(batch))[0], image)
    out = np.asarray(model(batch))
    assert out.shape == (2, 3)
    batch["x"] = batch["x"] + 100  # features outside the image are not part of the model
    np.testing.assert_allclose(np.asarray(model(batch)), out, rtol=1e-6)
    model.save(tmp_path / "cnn.keras")
    again = keras.models.load_model(tmp_path / "cnn.keras")  # keras.ops.stack: no custom objects
    np.testing.assert_allclose(np.asarray(again(batch)), out, rtol=1e-6)


def test_cnn_image_shape_must_fit_the_spec_image() -> None:
    spec = _image_spec((3, 4, 2))
    model = models.build_model("cnn", spec, models.CNNConfig(image_shape=(4, 3, 2), filters=(4,)))
    assert model.get_layer("image").output.shape[1:] == (4, 3, 2)  # same count: config wins
    with pytest.raises(ValueError, match=r"image 'img' has shape \(3, 4, 2\).*set image_shape to "
                                         r"\[3, 4, 2\].*Received: image_shape=\(8, 8, 1\)"):
        models.build_model("cnn", spec, models.CNNConfig(image_shape=(8, 8, 1)))
    with pytest.raises(ValueError, match="1 of 24 pixels are not numeric features, e.g. 'img_0'"):
        FeatureSpec(spec.raw_features, spec.features[3:], spec.label, spec.images)


def test_regression_has_one_output() -> None:
    spec = FeatureSpec(
        (RawFeature("x", "float32"),), (Feature("x", "numeric"),), Label("y", "regression")
    )
    assert np.asarray(models.build_model("mlp", spec)({"x": np.zeros(2, np.float32)})).shape == (
        2,
        1,
    )


def test_saved_model_keras_reloads_without_custom_objects(tmp_path) -> None:
    import keras

    spec = synthetic_spec(2, (3,))
    model = models.build_model("mlp", spec, models.MLPConfig(categorical="one_hot"))
    model.save(tmp_path / "m.keras")
    again = keras.models.load_model(tmp_path / "m.keras")
    batch = _batch(spec)
    np.testing.assert_allclose(np.asarray(again(batch)), np.asarray(model(batch)), rtol=1e-6)


def test_same_seed_gives_same_initial_weights() -> None:
    spec = synthetic_spec(2, (3,))
    a = models.build_model("mlp", spec, seed=7).get_weights()
    b = models.build_model("mlp", spec, seed=7).get_weights()
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: models.MLPConfig(hidden_units=()), r"Received: hidden_units=\(\)"),
        (lambda: models.MLPConfig(dropout=1.5), r"Received: dropout=1.5"),
        (lambda: models.CNNConfig(image_shape=(8, 8)), r"Received: image_shape=\(8, 8\)"),
        (lambda: models.build_model("rnn", synthetic_spec()), r"Received: model='rnn'"),
    ],
)
def test_bad_configs_name_the_value_received(make, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()


def test_an_empty_image_shape_from_the_train_job_means_the_spec_image() -> None:
    """What the train stage passes for an unset image_shape (`[]`) builds the spec's image."""
    from baton.strategies.task import build_fn

    job = train_job(feature_spec=_image_spec((4, 4, 1)).to_dict(), model="cnn",
                   model_config={"image_shape": [], "filters": [4], "dense_units": 8})
    model, _ = build_fn(job)()
    assert model.get_layer("image").output.shape[1:] == (4, 4, 1)


def _mixed_spec() -> FeatureSpec:
    """Outputs of every kind a preprocessing_fn can write (issue 34), beside usable ones."""
    feats = (Feature("x", "numeric"), Feature("i", "categorical", 4, min_id=-1),
             Feature("q", "categorical", 3, (1,)), Feature("tok", "categorical", 9, (None,),
                                                           "ragged"),
             Feature("s", "string"), Feature("n", "integer"),
             Feature("sp", "numeric", 0, (None,), "sparse"))
    raw = (RawFeature("x", "float32"),)
    return FeatureSpec(raw, feats, Label("label", "classification", ("a", "b")))


def test_mlp_and_wide_deep_name_each_output_they_cannot_take_with_its_fix() -> None:
    spec = _mixed_spec()
    problems = models.unusable(spec)
    assert [p.split("'")[1] for p in problems] == ["tok", "s", "n", "sp"]
    assert "output 'tok' is ragged (int64, shape [None]): densify it" in problems[0]
    assert "output 's' is a string: encode it" in problems[1]
    assert "output 'n' is int64 with no known id range" in problems[2]
    assert "output 'sp' is sparse (float32, shape [None])" in problems[3]
    for kind in ("mlp", "wide_deep"):
        with pytest.raises(ValueError, match=rf"the built-in model {kind} takes dense numbers "
                                             r"and ids: output 'tok' is ragged"):
            models.build_model(kind, spec)
    assert models.ignored("mlp", spec) == []


@pytest.mark.parametrize("kind", ["mlp", "wide_deep"])
def test_ids_from_minus_one_and_id_vectors_are_embedded(kind: str) -> None:
    """An id default of -1 (compute_and_apply_vocabulary's default) gets its own row; ids of
    shape [1] (bucketized [B, 1] values) are embedded and flattened."""
    feats = (Feature("x", "numeric"), Feature("i", "categorical", 4, min_id=-1),
             Feature("q", "categorical", 3, (1,)))
    spec = FeatureSpec((RawFeature("x", "float32"),), feats,
                       Label("label", "classification", ("a", "b")))
    model = models.build_model(kind, spec)
    out = np.asarray(model({"x": np.zeros(3, np.float32), "i": np.array([-1, 0, 2]),
                            "q": np.array([[0], [2], [1]])}))
    assert out.shape == (3, 2) and np.all(np.isfinite(out))


def test_cnn_ignores_the_other_outputs_with_a_warning_naming_them() -> None:
    import tensorflow as tf

    pixels = tuple(Feature(f"img_{i}", "numeric") for i in range(4))
    spec = FeatureSpec(tuple(RawFeature(f.name, "float32") for f in pixels),
                       (Feature("tok", "string", 0, (None,), "ragged"), Feature("s", "string"),
                        *pixels),
                       Label("label", "classification", ("a", "b")),
                       images=(Image("img", (2, 2, 1)),))
    assert models.ignored("cnn", spec, {"filters": [2]}) == [
        "warning: the built-in cnn takes only the image; it ignores the outputs 'tok' (string, "
        "ragged), 's' (string): leave them out of the preprocessing_fn's outputs, or train your "
        "own model (train.config.model: 'module:function') to use them"]
    # the artifact's train_info carries the warning (graphs.model_fn.exported) and the train
    # stage logs it from there (pipeline.stages.train._model_notes)
    from baton.graphs.model_fn import exported
    from baton.pipeline.stages.train import _model_notes

    trained = models.build_model("cnn", spec, models.CNNConfig(filters=(2,)))
    clean = models.build_model("cnn", spec, models.CNNConfig(filters=(2,)))
    info = exported(trained, clean, "cnn", spec.to_dict(), {"filters": [2]})
    assert info["params"] == models.count_params(clean)
    assert info["ignored_outputs"] == models.ignored("cnn", spec, {"filters": [2]})
    assert _model_notes(info)[:1] == info["ignored_outputs"]
    assert "ignored_outputs" not in exported(trained, clean, "cnn",
                                             FeatureSpec(spec.raw_features, pixels, spec.label,
                                                         images=spec.images).to_dict(),
                                             {"filters": [2]})
    model = models.build_model("cnn", spec, models.CNNConfig(filters=(2,)))
    batch = {f"img_{i}": tf.ones(3) for i in range(4)}
    batch |= {"tok": tf.ragged.constant([["a"], [], ["b", "c"]]), "s": tf.constant(["a"] * 3)}
    assert np.asarray(model(batch)).shape == (3, 2)
