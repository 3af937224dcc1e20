"""Model builders: shapes, dtypes, serialisation, and errors that name what was received."""

from __future__ import annotations

import numpy as np
import pytest

from graphs import models
from graphs.feature_spec import Feature, FeatureSpec, Label, RawFeature
from graphs.synthetic import synthetic_arrays, synthetic_spec


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
        models.build_model("cnn", synthetic_spec(3, ()), models.CNNConfig())


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
