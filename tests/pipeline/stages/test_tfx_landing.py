"""What a TFX user moving to Baton looks for (issue 35, findings 3 to 5), through the real stages.

3. The label: TFX writes `species_xf = inputs['species']` (accepted: the label passed through
   under another name); an output computed from the label is refused with the rule, where a
   vocabulary over the label used to give a dead feature without a word.
4. A model built on its own `keras.Input`s trains (Keras matches the dict by name); when its
   inputs do not fit, the error says they are the cause.
5. `steps`/`eval_steps` beside `epochs`; `custom_config` and the hyperparameters reach the model
   function (`spec.custom_config`, `spec.hyperparameters`); a `compile()` inside the model
   function is used; the gate takes the Keras metric names the model was trained with.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from baton.errors import StageError
from baton.pipeline.testing import run_stage
from tests.pipeline.dataplane.helpers import penguins
from tests.pipeline.stages.user_code import code_dir, train

CODE = '''
import json

import keras

import baton.tft as tft

NUMERIC = ["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g"]


def label_as_feature(inputs):
    outputs = {k + "_xf": tft.scale_to_z_score(tf_fill(inputs[k])) for k in NUMERIC}
    outputs["species_xf"] = tft.compute_and_apply_vocabulary(inputs["species"])
    return outputs


def label_renamed(inputs):  # TFX's penguin_utils_base.preprocessing_fn, imputed
    outputs = {k + "_xf": tft.scale_to_z_score(tf_fill(inputs[k])) for k in NUMERIC}
    outputs["species_xf"] = inputs["species"]
    return outputs


def tf_fill(x):
    import tensorflow as tf

    return tf.where(tf.math.is_nan(x), tft.mean(x), x)


def _numeric(spec):
    return keras.layers.Concatenate()(
        [keras.layers.Reshape((1,))(spec.inputs[f.name]) for f in spec.feature_spec.numeric])


def logits(spec):
    d = keras.layers.Dense(8, activation="relu")(_numeric(spec))
    return keras.Model(spec.inputs, keras.layers.Dense(spec.num_classes)(d))


def records(spec):
    with open(spec.custom_config["record_to"], "w") as f:
        json.dump({"custom_config": dict(spec.custom_config),
                   "hyperparameters": dict(spec.hyperparameters)}, f)
    return logits(spec)


def compiled(spec):
    """TFX-style: compile() inside, an optimizer that never moves the weights."""
    model = logits(spec)
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.0),
                  loss="sparse_categorical_crossentropy",
                  metrics=[keras.metrics.SparseCategoricalAccuracy()])
    return model


def own_inputs(spec):
    """TFX's _make_keras_model: its own Input(shape=(1,)) per feature, named as the features."""
    inputs = [keras.layers.Input(shape=(1,), name=f.name) for f in spec.feature_spec.numeric]
    d = keras.layers.concatenate(inputs)
    d = keras.layers.Dense(8, activation="relu")(d)
    return keras.Model(inputs=inputs, outputs=keras.layers.Dense(3, activation="softmax")(d))


def own_inputs_misnamed(spec):
    inputs = [keras.layers.Input(shape=(1,), name=f"x{i}") for i in range(4)]
    d = keras.layers.concatenate(inputs)
    return keras.Model(inputs=inputs, outputs=keras.layers.Dense(3)(d))
'''


@pytest.fixture(scope="module")
def art(tmp_path_factory):
    return penguins(tmp_path_factory.mktemp("penguins"))


@pytest.fixture(scope="module")
def code(tmp_path_factory) -> Path:
    return code_dir(tmp_path_factory, {"tfx_like.py": CODE})


def _train(art, code, root, **config):
    return train(art, code, root, **{"epochs": 2, **config})


def _info(out) -> dict:
    return json.loads((out["model"] / "train_info.json").read_text())


# ------------------------------------------------------------------ 3. the label
def test_an_output_computed_from_the_label_is_refused_with_the_rule(art, code, tmp_path):
    with pytest.raises(StageError, match=r"output 'species_xf' is computed from the label "
                                         r"'species'.*a dead feature.*Baton encodes the label "
                                         r"itself.*outputs\['species_xf'\] = inputs\['species'\]"):
        run_stage("transform", {"preprocessing_fn": "tfx_like:label_as_feature"},
                  {"examples": art["examples"]}, tmp_path, spec_dir=code)


def test_the_label_passed_through_under_tfx_name_is_the_label(art, code, tmp_path):
    out, metrics = run_stage("transform", {"preprocessing_fn": "tfx_like:label_renamed"},
                             {"examples": art["examples"]}, tmp_path, spec_dir=code)
    from baton.graphs.feature_spec import FeatureSpec

    spec = FeatureSpec.load(out["transform_graph"])
    assert [f.name for f in spec.features] == [k + "_xf" for k in (
        "bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g")]
    assert spec.label.name == "species" and spec.label.vocabulary == ("Adelie", "Chinstrap",
                                                                      "Gentoo")
    assert not metrics["label_transformed"]


# ------------------------------------------------------------------ 4. the model's own Inputs
def test_a_model_on_its_own_inputs_trains(art, code, tmp_path):
    out, _ = _train(art, code, tmp_path, model="tfx_like:own_inputs", epochs=10)
    history = json.loads((out["model"] / "history.json").read_text())
    assert history[-1]["eval_accuracy"] > 0.8
    assert _info(out)["outputs"]["kind"] == "probabilities"


def test_own_inputs_that_do_not_fit_are_named_as_the_cause(art, code, tmp_path):
    with pytest.raises(StageError, match=r"model function 'tfx_like:own_inputs_misnamed' built "
                                         r"its model on its own keras.Input\(s\) \['x0': \[B, 1\]"
                                         r".*not on spec.inputs.*build it on spec.inputs"):
        _train(art, code, tmp_path, model="tfx_like:own_inputs_misnamed")


# ------------------------------------------------------------------ 5. what a TFX user looks for
def test_steps_and_eval_steps(art, code, tmp_path):
    out, metrics = _train(art, code, tmp_path, model="tfx_like:logits", steps=30, eval_steps=1,
                          eval_batch_size=8, batch_size=32)
    info = _info(out)
    assert metrics["steps"] == 30 and info["steps"] == 30
    assert info["epochs"] == math.ceil(30 / (278 // 32)) and info["eval_steps"] == 1
    history = json.loads((out["model"] / "history.json").read_text())
    assert history[-1]["step"] == 30
    for h in history:  # one eval batch of 8 rows, not the 66 of the split
        assert abs(h["eval_accuracy"] * 8 - round(h["eval_accuracy"] * 8)) < 1e-6


def test_steps_and_epochs_together_are_refused_at_plan_time(code, tmp_path):
    import yaml

    from baton.errors import SpecError
    from baton.pipeline.plan import plan
    from baton.pipeline.spec import load_spec

    spec = {"pipeline": "p", "stages": [
        {"name": "ingest", "type": "ingest"},
        {"name": "transform", "type": "transform", "inputs": {"examples": "ingest.examples"}},
        {"name": "train", "type": "train", "config": {"steps": 100, "epochs": 3},
         "inputs": {"transformed": "transform.transformed",
                    "transform_graph": "transform.transform_graph"}}]}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(SpecError, match=r"give steps .* or epochs, not both. Received: "
                                        r"steps=100, epochs=3"):
        plan(load_spec(path))


def test_the_gate_takes_a_metric_class_the_train_stage_names_by_its_own_name(tmp_path):
    """A `module:Class` metric reports its own name (Keras snake-cases the class), not the
    reference's last part: the spec check must not refuse it with a built-in model."""
    import yaml

    from baton.pipeline.plan import plan
    from baton.pipeline.spec import load_spec

    (tmp_path / "my_metrics.py").write_text(
        "import keras\n\n\nclass BalancedHits(keras.metrics.SparseCategoricalAccuracy):\n"
        "    pass\n")
    spec = {"pipeline": "p", "stages": [
        {"name": "ingest", "type": "ingest"},
        {"name": "transform", "type": "transform", "inputs": {"examples": "ingest.examples"}},
        {"name": "train", "type": "train", "config": {"metrics": ["my_metrics:BalancedHits"]},
         "inputs": {"transformed": "transform.transformed",
                    "transform_graph": "transform.transform_graph"}},
        {"name": "evaluate", "type": "evaluate",
         "config": {"gate": {"thresholds": {"balanced_hits": {"min": 0.5}}}},
         "inputs": {"model": "train.model", "transform_graph": "transform.transform_graph",
                    "examples": "ingest.examples"}}]}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(spec))
    plan(load_spec(path))  # no SpecError: the name is settled once the model has trained


def test_custom_config_and_hyperparameters_reach_the_model_function(art, code, tmp_path):
    record = tmp_path / "spec.json"
    _train(art, code, tmp_path, model="tfx_like:records", learning_rate=0.02, batch_size=16,
           model_params={"num_layers": 2},
           custom_config={"record_to": str(record), "team": "penguins"})
    seen = json.loads(record.read_text())
    assert seen["custom_config"] == {"record_to": str(record), "team": "penguins"}
    hp = seen["hyperparameters"]
    assert hp["learning_rate"] == 0.02 and hp["batch_size"] == 16 and hp["num_layers"] == 2
    assert hp["epochs"] == 2 and hp["steps"] == 0


def test_compile_inside_the_model_function_is_used(art, code, tmp_path):
    out, _ = _train(art, code, tmp_path, model="tfx_like:compiled")
    info = _info(out)
    assert info["compile"]["used"] == ["loss", "optimizer", "metrics"]
    history = json.loads((out["model"] / "history.json").read_text())
    assert "eval_sparse_categorical_accuracy" in history[-1]
    # compile()'s SGD(learning_rate=0) trained: the weights are the initial ones
    from baton.graphs.feature_spec import FeatureSpec
    from baton.graphs.model_fn import build
    from baton.pipeline.release.data import load_model

    initial = build("tfx_like:compiled", FeatureSpec.load(art["transform_graph"]), seed=42,
                    search_dir=code).get_weights()
    trained = load_model(out["model"]).get_weights()
    assert all(np.array_equal(a, b) for a, b in zip(initial, trained, strict=True))
    # the spec's optimizer replaces compile()'s, and the train info says so
    out, _ = _train(art, code, tmp_path / "adam", model="tfx_like:compiled", optimizer="adam")
    assert _info(out)["compile"]["replaced_by_spec"] == ["optimizer"]
    moved = load_model(out["model"]).get_weights()
    assert not all(np.array_equal(a, b) for a, b in zip(initial, moved, strict=True))


def test_the_gate_takes_the_keras_metrics_the_model_reports(art, code, tmp_path):
    out, _ = _train(art, code, tmp_path, model="tfx_like:logits", epochs=10,
                    metrics=["sparse_top_k_categorical_accuracy"])
    inputs = {"model": out["model"], "transform_graph": art["transform_graph"],
              "examples": art["examples"]}
    # a Keras metric that is lower-is-better (Keras records its direction, "down") is gated as
    # such: a bare number is its highest acceptable value, as for Baton's `loss`
    gate = {"thresholds": {"sparse_top_k_categorical_accuracy": 0.9,
                           "sparse_categorical_accuracy": 0.8,
                           "sparse_categorical_crossentropy": 1.0},
            "change": {"sparse_categorical_crossentropy": 0.5}}
    ev, metrics = run_stage("evaluate", {"gate": gate}, inputs, tmp_path)
    overall = json.loads((ev["evaluation"] / "metrics.json").read_text())["overall"]
    assert overall["sparse_top_k_categorical_accuracy"] == 1.0  # top 5 of 3 classes
    assert overall["sparse_categorical_accuracy"] == pytest.approx(overall["accuracy"])
    assert overall["sparse_categorical_crossentropy"] == pytest.approx(overall["loss"], rel=1e-4)
    checks = json.loads((ev["blessing"] / "blessing.json").read_text())["checks"]
    xent = next(c for c in checks if c["metric"] == "sparse_categorical_crossentropy")
    assert xent["threshold"] == {"min": None, "max": 1.0}, xent
    assert metrics["blessed"], checks
