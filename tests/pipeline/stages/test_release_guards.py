"""A wrong model never ships (issue 35, findings 1 and 2), through the real stages.

1. A model ending in a softmax is found before training, trained on probabilities and served
   as it answers (it was trained as logits and served a softmax of its probabilities, the top
   one at 0.576); a sigmoid over several classes, and a compile() loss that contradicts the
   softmax, are refused with the fix.
2. TFX's pass-through preprocessing_fn on penguins with missing values: the transform counts the
   NaN of each output, training stops on the NaN eval loss naming the epoch and the feature, a
   model that outputs NaN for some rows is not blessed, and the check stage reports NaN as NaN.
   `on_nonfinite: restore` keeps the last finite epoch instead of failing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from baton.errors import StageError
from baton.pipeline.testing import run_stage
from tests.pipeline.dataplane.helpers import penguins
from tests.pipeline.stages.user_code import code_dir, train

MODELS = '''
import keras
import numpy as np

import baton.tft as tft

NUMERIC = ["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g"]


def _numeric(spec):
    return keras.layers.Concatenate()(
        [keras.layers.Reshape((1,))(spec.inputs[f.name]) for f in spec.feature_spec.numeric])


def softmax(spec):
    d = keras.layers.Dense(16, activation="relu")(_numeric(spec))
    return keras.Model(spec.inputs, keras.layers.Dense(spec.num_classes, activation="softmax")(d))


def sigmoid(spec):
    d = keras.layers.Dense(16, activation="relu")(_numeric(spec))
    return keras.Model(spec.inputs, keras.layers.Dense(spec.num_classes, activation="sigmoid")(d))


def zero_kernel(spec):
    """Logits whose rows sum to 1 before training (a zero kernel, a 1/K bias)."""
    d = keras.layers.Dense(16, activation="relu")(_numeric(spec))
    k = spec.num_classes
    return keras.Model(spec.inputs, keras.layers.Dense(
        k, kernel_initializer="zeros", bias_initializer=keras.initializers.Constant(1.0 / k),
        name="head")(d))


def compiled_from_logits(spec):
    model = softmax(spec)
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def loss_weights(spec):
    model = softmax(spec)
    model.compile(loss="sparse_categorical_crossentropy", loss_weights=[2.0])
    return model


class PoisonAt(keras.callbacks.Callback):
    """Every weight NaN when epoch `epoch` (0-based) begins: a diverged training."""

    def __init__(self, epoch=2):
        super().__init__()
        self.epoch = epoch

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == self.epoch:
            self.model.set_weights([np.full_like(w, np.nan) for w in self.model.get_weights()])


def passthrough(inputs):
    """TFX's penguin_utils_base.preprocessing_fn on data with missing values: NaN goes on."""
    outputs = {key + "_xf": inputs[key] for key in NUMERIC}
    outputs["species"] = inputs["species"]
    return outputs
'''


@pytest.fixture(scope="module")
def art(tmp_path_factory):
    return penguins(tmp_path_factory.mktemp("penguins"))


@pytest.fixture(scope="module")
def code(tmp_path_factory) -> Path:
    return code_dir(tmp_path_factory, {"guard_models.py": MODELS})


def _train(art, code, root, **config):
    return train(art, code, root, **{"epochs": 3, **config})


def _transformed_eval(art, model_dir):
    from baton.graphs.feature_spec import FeatureSpec
    from baton.pipeline.release import data

    spec = FeatureSpec.load(art["transform_graph"])
    split = data.read_split(art["examples"], spec, "eval")
    feats = data.transform_split(data.load_transform(art["transform_graph"]), split, spec)
    return spec, split, feats, data.load_model(model_dir)


def test_a_softmax_model_is_trained_and_served_as_probabilities(art, code, tmp_path):
    out, _ = _train(art, code, tmp_path, model="guard_models:softmax", epochs=30)
    info = json.loads((out["model"] / "train_info.json").read_text())
    assert info["outputs"]["kind"] == "probabilities"
    assert re.fullmatch(r"the last layer 'dense_\d+' applies a softmax", info["outputs"]["reason"])
    ex, _ = run_stage("export", {"warmup_rows": 4},
                      {"model": out["model"], "transform_graph": art["transform_graph"],
                       "examples": art["examples"]}, tmp_path)
    import tensorflow as tf

    from baton.graphs.signatures import raw_inputs

    spec, split, feats, model = _transformed_eval(art, out["model"])
    own = np.asarray(model(feats, training=False))
    assert np.allclose(own.sum(axis=1), 1.0, atol=1e-5)
    vdir = next(p for p in ex["saved_model"].iterdir() if p.name.isdigit())
    serve = tf.saved_model.load(str(vdir)).signatures["serving_default"]
    raw = {n: tf.constant(split.columns[n]) for n, _ in raw_inputs(spec)}
    served = serve(**raw)["probabilities"].numpy()
    np.testing.assert_allclose(served, own, atol=1e-6)  # as it answers: no second softmax
    assert np.median(served.max(axis=1)) > 0.9  # trained on probabilities, it is confident
    ev, metrics = run_stage("evaluate", {"gate": {"thresholds": {"accuracy": 0.9}}},
                            {"model": out["model"], "transform_graph": art["transform_graph"],
                             "examples": art["examples"]}, tmp_path)
    assert metrics["blessed"] and metrics["calibration_error"] < 0.1


def test_logits_whose_rows_sum_to_1_before_training_are_trained_as_logits(art, code, tmp_path):
    """Taken for probabilities from its initial rows, this model was trained with
    from_logits=False and blessed serving "probabilities" below 0 (audit of issue 35)."""
    out, _ = _train(art, code, tmp_path, model="guard_models:zero_kernel", epochs=5)
    info = json.loads((out["model"] / "train_info.json").read_text())
    assert info["outputs"] == {"kind": "logits",
                               "reason": "the last layer 'head' has no activation"}
    ev, metrics = run_stage("evaluate", {"gate": {"thresholds": {"accuracy": 0.8}}},
                            {"model": out["model"], "transform_graph": art["transform_graph"],
                             "examples": art["examples"]}, tmp_path)
    assert metrics["blessed"] and metrics["calibration_error"] < 0.15


def test_a_sigmoid_over_the_classes_is_refused_before_training(art, code, tmp_path):
    with pytest.raises(StageError, match=r"model function 'guard_models:sigmoid' returned a model "
                                         r"whose last layer 'dense_\d+' applies a sigmoid to 3 "
                                         r"classes.*activation='softmax'"):
        _train(art, code, tmp_path, model="guard_models:sigmoid")


def test_a_compiled_loss_that_contradicts_the_softmax_is_refused(art, code, tmp_path):
    with pytest.raises(StageError, match=r"compiled the model with loss "
                                         r"sparse_categorical_crossentropy\(from_logits=True\), "
                                         r"but the model outputs probabilities .*drop "
                                         r"from_logits=True"):
        _train(art, code, tmp_path / "a", model="guard_models:compiled_from_logits")
    with pytest.raises(StageError, match=r"compiled the model with loss_weights=\[2.0\]: Baton "
                                         r"trains one output with one loss"):
        _train(art, code, tmp_path / "b", model="guard_models:loss_weights")


@pytest.fixture(scope="module")
def nan_data(art, code, tmp_path_factory):
    """TFX's pass-through function on the raw penguins: two eval rows hold NaN features."""
    root = tmp_path_factory.mktemp("nan")
    out, metrics = run_stage("transform", {"preprocessing_fn": "guard_models:passthrough"},
                             {"examples": art["examples"]}, root, spec_dir=code)
    return {**out, "examples": art["examples"], "metrics": metrics, "root": root}


def test_the_transform_counts_nonfinite_outputs_per_feature(nan_data):
    assert nan_data["metrics"]["nonfinite_values"] == 8  # 4 features x 2 rows with no numbers
    from baton.graphs.feature_spec import FeatureSpec
    from baton.graphs.nonfinite import transform_note

    spec = FeatureSpec.load(nan_data["transform_graph"])
    note, n = transform_note(nan_data["transformed"], spec, ["train", "eval"])
    assert n == 8
    assert "'bill_length_mm_xf': 2 of 66 eval rows" in note
    assert "impute missing values in the preprocessing_fn" in note


def test_a_nan_eval_loss_stops_training_naming_the_epoch_and_the_feature(nan_data, code, tmp_path):
    with pytest.raises(StageError) as err:
        _train(nan_data, code, tmp_path, model="mlp")
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("the eval loss is not finite in epoch 1 (its evaluation): feature "
                              "'bill_depth_mm_xf' is NaN in 1 of the 32 eval rows of batch 1")
    assert "impute it in the preprocessing_fn or drop those rows" in message
    assert "on_nonfinite: restore keeps the last epoch whose losses were finite" in message


def test_a_diverged_training_restores_the_last_finite_epoch(art, code, tmp_path):
    poison = [{"class_name": "guard_models:PoisonAt", "config": {"epoch": 2}}]
    with pytest.raises(StageError, match=r"the training loss is not finite in epoch 3 "
                                         r"\(steps 17-24\): the weight '.*' holds NaN while the "
                                         r"features are finite: training diverged"):
        _train(art, code, tmp_path / "a", model="mlp", epochs=4, callbacks=poison,
               steps_per_execution=8)
    out, metrics = _train(art, code, tmp_path / "b", model="mlp", epochs=4, callbacks=poison,
                          steps_per_execution=8, on_nonfinite="restore")
    info = json.loads((out["model"] / "train_info.json").read_text())
    assert info["nonfinite"]["restored_epoch"] == 2 and info["nonfinite"]["epoch"] == 3
    history = json.loads((out["model"] / "history.json").read_text())
    assert [h["epoch"] for h in history] == [1, 2]
    from baton.pipeline.release.data import load_model

    weights = load_model(out["model"]).get_weights()
    assert all(np.isfinite(w).all() for w in weights)


def test_nan_features_that_fused_kernels_hide_from_the_loss_still_stop_training(code, tmp_path):
    """TensorFlow's default executor runs Dense(relu) as one fused oneDNN kernel whose ReLU
    turns NaN into 0 on the way forward, while the backward pass writes NaN into the first
    kernel: every loss stays finite and the model becomes a constant predictor (what multi-worker
    and parameter-server runs, and large one-device models, do). The weights are checked at
    every epoch end (audit of issue 35: such a run trained to the end and wrote the model)."""
    import csv

    from baton.pipeline.datasets import PENGUINS_CSV

    with PENGUINS_CSV.open() as f:
        rows = list(csv.DictReader(f))
    for i in range(0, len(rows), 15):  # missing values in the train split too
        rows[i]["bill_depth_mm"] = "NA"
    path = tmp_path / "penguins_nan.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    ex, _ = run_stage("ingest", {"source": "csv", "path": str(path), "label": "species",
                                 "task": "classification"}, {}, tmp_path)
    tr, _ = run_stage("transform", {"preprocessing_fn": "guard_models:passthrough"},
                      {"examples": ex["examples"]}, tmp_path, spec_dir=code)
    with pytest.raises(StageError) as err:
        _train(tr, code, tmp_path, model="mlp", epochs=2, executor="default")
    message = str(err.value)
    assert re.match(r"the model's weights are not finite at the end of epoch 1, while its "
                    r"losses were finite .*: feature 'bill_depth_mm_xf' is NaN in \d+ of the 32 "
                    r"train rows of batch 1", message), message


def test_a_model_answering_nan_is_not_blessed_and_check_says_nan(nan_data, code, tmp_path):
    # the first eval batch of 8 rows has no missing value: training ends, the model exists
    out, _ = _train(nan_data, code, tmp_path, model="mlp", eval_steps=1, eval_batch_size=8)
    inputs = {"model": out["model"], "transform_graph": nan_data["transform_graph"],
              "examples": nan_data["examples"]}
    ev, metrics = run_stage("evaluate", {}, inputs, tmp_path)
    blessing = json.loads((ev["blessing"] / "blessing.json").read_text())
    assert not metrics["blessed"] and not blessing["blessed"]
    assert "the model's outputs are NaN or infinite for 2 of 66 eval rows" in blessing["failed"]
    assert "loss is nan: not finite" in blessing["failed"]
    ex, _ = run_stage("export", {"warmup_rows": 30}, inputs, tmp_path)
    with pytest.raises(StageError) as err:
        run_stage("check", {}, {"saved_model": ex["saved_model"]}, tmp_path)
    message = str(err.value)
    # NaN in the Keras model; the served graph's fused kernels may answer numbers instead
    # (oneDNN's fused MatMul+Relu here): either way the rows are named, as NaN
    assert re.search(r"output 'probabilities' is NaN \(or infinite\) for warmup requests \[19\], "
                     r"in the (fresh process as in the )?in-process model", message)
    assert re.search(r"output 'scores' is NaN \(or infinite\) for warmup requests \[49\]", message)
    assert "by nan" not in message
