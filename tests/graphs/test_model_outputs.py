"""graphs.model_outputs: a classifier that already outputs probabilities is found before training.

Issue 35, finding 1: TFX's penguin model ends in `Dense(3, activation='softmax')` and Baton
trained it as logits. Each way Keras writes a softmax at the end is found from the model, a
subclassed model's from its rows on a batch, a sigmoid over several classes is refused with the
fix, and the losses and metrics are built for what the model outputs.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest

from baton.errors import StageError
from baton.graphs import model_outputs as mo
from baton.graphs.objectives import make_loss, make_metrics


def _model(last) -> keras.Model:
    x = keras.Input((4,))
    return keras.Model(x, last(keras.layers.Dense(3)(x)))


@pytest.mark.parametrize("last", [
    lambda h: keras.layers.Softmax()(h),
    lambda h: keras.layers.Activation("softmax")(h),
    lambda h: keras.ops.softmax(h),
    lambda h: keras.layers.Dense(3, activation="softmax")(h),
], ids=["Softmax", "Activation", "ops.softmax", "Dense(softmax)"])
def test_a_softmax_at_the_end_is_probabilities(last):
    out = mo.decide(_model(last), "classification", 3)
    assert out.probabilities and "softmax" in out.reason


def test_logits_and_log_softmax_are_logits():
    assert mo.decide(_model(lambda h: h), "classification", 3).kind == mo.LOGITS
    log_probs = _model(lambda h: keras.layers.Activation("log_softmax")(h))
    assert mo.decide(log_probs, "classification", 3).kind == mo.LOGITS  # softmax(log p) = p


def test_a_sigmoid_over_several_classes_is_refused_with_the_fix():
    model = _model(lambda h: keras.layers.Dense(3, activation="sigmoid")(h))
    with pytest.raises(StageError, match=r"applies a sigmoid to 3 classes.*"
                                         r"Dense\(3, activation='softmax'\).*Dense\(3\) with no "
                                         r"activation \(logits\)"):
        mo.decide(model, "classification", 3, name="'m:build'")


def test_a_subclassed_softmax_is_found_from_its_rows():
    class Sub(keras.Model):
        def __init__(self):
            super().__init__()
            self.d = keras.layers.Dense(3)

        def call(self, x):
            return keras.ops.softmax(self.d(x))

    model = Sub()
    sample = np.asarray(model(np.random.default_rng(0).normal(size=(8, 4)).astype("float32")))
    assert mo.last_activation(model) is None
    out = mo.decide(model, "classification", 3, sample)
    assert out.probabilities and "sum to 1" in out.reason
    logits = np.random.default_rng(1).normal(size=(8, 3))
    assert not mo.rows_are_distributions(logits)
    assert not mo.rows_are_distributions(np.full((8, 3), np.nan))


def test_a_linear_last_layer_is_logits_even_when_its_rows_sum_to_1():
    """A Dense with no activation outputs logits, whatever its rows sum to before training
    (a zero kernel and a 1/K bias: every row [1/3, 1/3, 1/3]). Taken for probabilities, it was
    trained with from_logits=False and served negative "probabilities"."""
    x = keras.Input((4,))
    model = keras.Model(x, keras.layers.Dense(3, kernel_initializer="zeros",
                                              bias_initializer=keras.initializers.Constant(1 / 3),
                                              name="head")(x))
    sample = np.asarray(model(np.ones((8, 4), "float32")))
    assert mo.rows_are_distributions(sample)
    out = mo.decide(model, "classification", 3, sample)
    assert out.kind == mo.LOGITS and "'head'" in out.reason
    # an Activation('linear') (a mixed-precision cast) is no evidence either way: the rows decide
    cast = keras.Model(x, keras.layers.Activation("linear", dtype="float32")(
        keras.layers.Dense(3, activation="softmax")(x)))
    assert mo.decide(cast, "classification", 3,
                     np.asarray(cast(np.ones((8, 4), "float32")))).probabilities


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_softmax_in_half_precision_is_found_from_its_rows(dtype):
    """Under mixed_float16 / mixed_bfloat16 a softmax's rows sum to 1 only within the dtype's
    precision (float16: 1e-3 off for 3 classes), not within 1e-4."""
    logits = np.random.default_rng(0).normal(size=(256, 3)).astype("float32")
    probs = np.asarray(keras.ops.softmax(keras.ops.cast(logits, dtype)))
    assert mo.rows_are_distributions(probs)
    assert not mo.rows_are_distributions(np.asarray(keras.ops.cast(logits, dtype)))


def test_probabilities_found_from_rows_are_confirmed_after_training():
    """What the rows said before training must still hold after: a model whose trained rows are
    no distribution was not outputting probabilities (its output is served as they are)."""
    class Scaled(keras.Model):  # rows sum to 1 at first, then do not
        def __init__(self):
            super().__init__()
            self.scale = self.add_weight(shape=(), initializer="ones", name="scale")

        def call(self, x):
            return keras.ops.softmax(x[:, :3]) * self.scale

    model = Scaled()
    batch = np.random.default_rng(0).normal(size=(8, 4)).astype("float32")
    out = mo.decide(model, "classification", 3, np.asarray(model(batch)))
    assert out.probabilities and out.from_rows
    mo.confirm(model, out, np.asarray(model(batch)), "'m:build'")  # still distributions
    model.scale.assign(1.7)
    with pytest.raises(StageError, match=r"model function 'm:build' was taken to output "
                                         r"probabilities.*after training they do not.*"
                                         r"row sums \[1\.7"):
        mo.confirm(model, out, np.asarray(model(batch)), "'m:build'")
    # a softmax found in the model's structure needs no confirming
    mo.confirm(model, mo.Outputs(mo.PROBABILITIES, "softmax"), np.asarray(model(batch)), "m")


@pytest.mark.parametrize(("activation", "kind"), [("sigmoid", "a sigmoid"), (None, "a logit")])
def test_one_unit_for_two_classes_is_refused_naming_the_two_unit_fix(activation, kind):
    """TFX's binary models end in Dense(1) (a logit, or a sigmoid's probability of one class);
    Baton's classifiers give one value per class: the error says which two-unit head to write."""
    from baton.graphs.feature_spec import FeatureSpec
    from baton.graphs.model_fn import check_output
    from baton.graphs.model_spec import ModelSpec

    spec = ModelSpec.from_feature_spec(FeatureSpec.from_dict({
        "raw_features": [{"name": "x", "dtype": "float32"}],
        "features": [{"name": "x_xf", "kind": "numeric", "vocab_size": 0}],
        "label": {"name": "y", "task": "classification", "vocabulary": ["no", "yes"]}}))
    x = keras.layers.Reshape((1,))(spec.inputs["x_xf"])
    model = keras.Model(spec.inputs, keras.layers.Dense(1, activation=activation)(x))
    with pytest.raises(StageError, match=rf"output has shape \[B, 1\]: one unit \({kind}\) for "
                                         r"the 2 classes of 'y' \('no', 'yes'\).*one value per "
                                         r"class: end it in Dense\(2, activation='softmax'\) "
                                         r"\(probabilities\) or Dense\(2\) \(logits\)"):
        check_output(model, spec, "m:build")


def test_regression_is_never_probabilities():
    model = _model(lambda h: keras.layers.Dense(1, activation="sigmoid")(h))
    assert mo.decide(model, "regression", 1).kind == mo.LOGITS


def test_probabilities_are_served_as_they_are():
    p = np.array([[0.7, 0.2, 0.1]], "float32")
    np.testing.assert_array_equal(mo.to_probabilities(p, mo.PROBABILITIES), p)
    # as logits they would be squeezed towards uniform: what TFX's model served before
    assert mo.to_probabilities(p, mo.LOGITS).max() < 0.47


def test_losses_and_metrics_are_built_for_probabilities():
    labels = np.array([0, 1], "int64")
    probs = np.array([[0.9, 0.05, 0.05], [0.1, 0.8, 0.1]], "float32")
    want = -np.log([0.9, 0.8])
    builtin = make_loss("", "classification", 3, from_logits=False)
    np.testing.assert_allclose(builtin(labels, probs), want, rtol=1e-5)
    keras_id = make_loss("sparse_categorical_crossentropy", "classification", 3, from_logits=False)
    np.testing.assert_allclose(keras_id(labels, probs), want, rtol=1e-5)
    assert make_loss("", "classification", 3) is None  # logits: the built-in softmax CE
    [metric] = make_metrics(["sparse_categorical_crossentropy"], "classification", 3,
                            from_logits=False)
    metric.update(labels, probs)
    assert metric.result() == pytest.approx(want.mean(), rel=1e-5)
