"""The train stage with the user's own model, loss, metrics, optimizer and callbacks, in process.

Bad inputs: what the spec shows is exit 2 before any stage runs (`plan`, `baton run --check`),
what only the data shows (a metric that does not fit the task) exit 2 before train runs, and
what only running the user's function shows a stage error naming the function and what it got.
The model module is the example's (examples/own_model), copied beside a spec in a temporary
directory; its helper (the custom layer) is followed for the cache key.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from baton.errors import SpecError, StageError
from baton.pipeline.context import RunOptions
from baton.pipeline.plan import plan
from baton.pipeline.runner import run_pipeline
from baton.pipeline.spec import load_spec
from baton.pipeline.testing import run_stage
from baton.pipeline.user_code import user_code_files
from tests.pipeline.dataplane.helpers import penguins

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "own_model"
QUIET = RunOptions(quiet=True)
BAD_MODELS = '''
import keras

def raises(spec):
    raise RuntimeError("no GPU here")

def not_a_model(spec):
    return "a model"

def wrong_shape(spec):
    x = keras.layers.Concatenate()([keras.layers.Flatten()(v) for v in spec.inputs.values()
                                    if v.dtype == "float32"])
    return keras.Model(spec.inputs, keras.layers.Dense(spec.num_classes + 1)(x))

def strict(spec):
    unknown = set(spec.params) - {"units"}
    if unknown:
        raise TypeError(f"unknown model_params {sorted(unknown)}")
    return None

def scalar_loss(y_true, y_pred):
    return keras.ops.mean(y_pred)
'''


@pytest.fixture(scope="module")
def art(tmp_path_factory):
    return penguins(tmp_path_factory.mktemp("penguins"))


@pytest.fixture(scope="module")
def code(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("code")
    for f in ("penguin_model.py", "penguin_layers.py"):
        shutil.copy(EXAMPLE / f, d / f)
    (d / "bad_models.py").write_text(BAD_MODELS)
    return d


def _train(art, code: Path, root: Path, **config):
    inputs = {"transformed": art["transformed"], "transform_graph": art["transform_graph"]}
    base = {"model": "penguin_model:build", "epochs": 2, "model_params": {"units": [8]}}
    return run_stage("train", {**base, **config}, inputs, root, spec_dir=code)


def _weights(model_dir: Path, code: Path) -> list[np.ndarray]:
    from baton.pipeline.release.data import load_model

    return load_model(model_dir).get_weights()


def test_custom_loss_changes_the_trained_weights_against_the_default(art, code, tmp_path):
    default, m1 = _train(art, code, tmp_path / "a")
    again, _ = _train(art, code, tmp_path / "b")
    custom, m2 = _train(art, code, tmp_path / "c", loss="penguin_model:smoothed_crossentropy")
    w_default, w_again = _weights(default["model"], code), _weights(again["model"], code)
    w_custom = _weights(custom["model"], code)
    assert all(np.array_equal(a, b) for a, b in zip(w_default, w_again, strict=True))  # determinism
    assert any(not np.allclose(a, b) for a, b in zip(w_default, w_custom, strict=True))
    assert m1["train_loss"] != m2["train_loss"]
    info = json.loads((custom["model"] / "train_info.json").read_text())
    assert info["user_modules"] == ["penguin_model"] and info["model"] == "penguin_model:build"


def test_xla_compiles_the_user_model_and_loss(art, code, tmp_path):
    out, metrics = _train(art, code, tmp_path, jit_compile=True,
                          loss="penguin_model:smoothed_crossentropy")
    info = json.loads((out["model"] / "train_info.json").read_text())
    # one process: the whole chunk of steps is one XLA program (graphs.steps, jit_scope chunk)
    compiled = info["xla_compiled"]
    assert len(compiled) == 1 and "replica_steps" in compiled[0], compiled
    assert metrics["eval_accuracy"] > 0.5


def test_keras_loss_identifier_is_taken_on_logits_like_the_builtin(art, code, tmp_path):
    builtin, _ = _train(art, code, tmp_path / "a", model="mlp", model_params={})
    keras_id, _ = _train(art, code, tmp_path / "b", model="mlp", model_params={},
                         loss="sparse_categorical_crossentropy")
    for a, b in zip(_weights(builtin["model"], code), _weights(keras_id["model"], code),
                    strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_metrics_optimizer_and_early_stopping_reach_history(art, code, tmp_path):
    out, metrics = _train(
        art, code, tmp_path, epochs=12, metrics=["accuracy", "AUC", "penguin_model:smoothed_crossentropy"],
        optimizer={"class_name": "SGD", "config": {"learning_rate": {
            "class_name": "ExponentialDecay",
            "config": {"initial_learning_rate": 0.1, "decay_steps": 20, "decay_rate": 0.9}}}},
        callbacks=[{"class_name": "EarlyStopping",
                    "config": {"monitor": "val_loss", "patience": 0, "min_delta": 100.0}}],
    )
    history = json.loads((out["model"] / "history.json").read_text())
    assert len(history) == 2  # patience 0 and an improvement nothing reaches: epoch 2
    assert {"eval_loss", "eval_accuracy", "eval_auc", "eval_smoothed_crossentropy"} <= set(history[-1])
    info = json.loads((out["model"] / "train_info.json").read_text())
    assert info["stopped_early_at_step"] == info["steps"] == 2 * (278 // 32)
    assert info["planned_steps"] == 12 * (278 // 32)
    assert list((out["model"] / "logs").glob("events.out.tfevents.*"))


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"model": "bad_models:raises"},
         r"model function 'bad_models:raises' raised RuntimeError: no GPU here \(.*bad_models.py, "
         r"line 5\); it was called with ModelSpec\(inputs=\{.*float32\[B\]"),
        ({"model": "bad_models:not_a_model"},
         r"'bad_models:not_a_model' must return a keras.Model. Received: builtins.str"),
        ({"model": "bad_models:wrong_shape"},
         r"output has shape \[B, 4\]; the classification task needs logits \[B, 3\]"),
        ({"model": "bad_models:strict", "model_params": {"unit": 3}},
         r"'bad_models:strict' raised TypeError: unknown model_params \['unit'\].*params=\{'unit': 3\}"),
        ({"loss": "bad_models:scalar_loss"},
         r"train.config.loss 'bad_models:scalar_loss' failed on labels int64\[2\] and model "
         r"output float32\[2, 3\]: .*returned a scalar; it must return the per-example loss"),
    ],
)
def test_model_function_problems_are_stage_errors_before_the_first_step(
    art, code, tmp_path, config, message
):
    with pytest.raises(StageError, match=message):
        _train(art, code, tmp_path, **config)
    assert not list(tmp_path.rglob("model.keras"))  # nothing half-written


# ------------------------------------------------------------------ spec checks: exit 2
def _spec(d: Path, train: dict, name: str = "own") -> Path:
    spec = {
        "pipeline": name,
        "stages": [
            {"name": "ingest", "type": "ingest", "config": {"source": "penguins"}},
            {"name": "transform", "type": "transform", "inputs": {"examples": "ingest.examples"}},
            {"name": "train", "type": "train", "config": train,
             "inputs": {"transformed": "transform.transformed",
                        "transform_graph": "transform.transform_graph"}},
        ],
    }
    path = d / "pipeline.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


@pytest.mark.parametrize(
    ("train", "message"),
    [
        ({"model": "penguin_model:biuld"},
         r"config.model: module 'penguin_model' \(.*penguin_model.py\) has no model function "
         r"'biuld'. Received: 'penguin_model:biuld'; it defines: .*build"),
        ({"model": "no_such_module:build"}, r"cannot import module 'no_such_module'"),
        ({"model": "broken:build"}, r"cannot import module 'broken': NameError: .*broken.py, line 2\)"),
        # found, but an import in it fails: its line, not "looked on sys.path"
        ({"model": "needs_missing:build"},
         r"cannot import module 'needs_missing': an import in it failed: No module named "
         r"'not_a_real_package_xyz' \(.*needs_missing.py, line 2\)$"),
        # the location once (a SyntaxError's own text holds it too)
        ({"model": "unclosed:build"},
         r"cannot import module 'unclosed': SyntaxError: '\(' was never closed "
         r"\([^()]*unclosed.py, line 2\)$"),
        ({"model": "mpl"}, r"did you mean 'mlp'\?"),
        ({"model": "mlp", "model_params": {"hiden_units": [3]}},
         r"model mlp has no parameter 'hiden_units' \(did you mean 'hidden_units'\?\)"),
        # an older spec's flat model key that sets nothing on the model (it used to be ignored)
        ({"model": "mlp", "filters": [8]},
         r"filters: model mlp has no setting 'filters'; its parameters go in model_params "
         r"\(hidden_units, .*\)\. Received: filters=\[8\]"),
        ({"model": "penguin_model:build", "dropout": 0.5},
         r"dropout: dropout is a setting of the built-in models; .* move it there\. "
         r"Received: dropout=0\.5"),
        ({"model": "mlp", "dropout": 2.0}, r"config.model_params: dropout must be"),
        ({"model": "mlp", "dropout": "x"},
         r"config.model_params: dropout: expected a number. Received: 'x' \(str\)"),
        ({"model": "mlp", "model_params": {"categorical": "onehot"}},
         r"config.model_params: categorical: must be one of 'embedding', 'one_hot' \(did you "
         r"mean 'one_hot'\?\). Received: 'onehot'"),
        ({"loss": "sparse_categorical_crosentropy"},
         r"config.loss: unknown Keras loss 'sparse_categorical_crosentropy' \(did you mean "
         r"'sparse_categorical_crossentropy'\?\)"),
        ({"metrics": ["accuracy", "precison"]},
         r"config.metrics\[1\]: unknown Keras metric 'precison' \(did you mean 'precision'\?\)"),
        ({"optimizer": "adamm"}, r"config.optimizer: unknown Keras optimizer 'adamm' \(did you mean 'adam'\?\)"),
        ({"optimizer": {"name": "SGD"}}, r"config.optimizer: a mapping must be \{class_name"),
        ({"callbacks": ["EarlyStoping"]}, r"config.callbacks\[0\]: unknown Keras callback 'EarlyStoping' "
                                           r"\(did you mean 'EarlyStopping'\?\)"),
    ],
)
def test_bad_references_are_spec_errors_naming_field_and_value(code, train, message):
    (code / "broken.py").write_text("import keras\nundefined_name\n")
    (code / "needs_missing.py").write_text("import keras\nimport not_a_real_package_xyz\n")
    (code / "unclosed.py").write_text("x = 1\ny = (\n")
    with pytest.raises(SpecError, match=message):
        plan(load_spec(_spec(code, train)))


def test_baton_run_check_exits_2_before_any_stage_runs(code, tmp_path):
    d = tmp_path / "spec"
    d.mkdir()
    spec = _spec(d, {"model": "penguin_model:build", "loss": "huberr"})
    proc = subprocess.run([sys.executable, "-m", "baton", "run", str(spec), "--runs-dir",
                           str(tmp_path / "runs")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "pipeline.yaml:" in proc.stderr and "cannot import module 'penguin_model'" in proc.stderr
    assert "did you mean 'huber'?" in proc.stderr
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").rglob("lineage.json"))


@pytest.mark.slow
def test_data_checks_and_code_identity_through_the_runner(code, tmp_path):
    """A metric that does not fit the task: exit 2 once the feature spec exists, before train.
    Then editing the helper module beside the spec (the custom layer) reruns train, and only
    train; an unrelated file does not."""
    d = tmp_path / "spec"
    shutil.copytree(code, d)
    runs = tmp_path / "runs"
    bad = _spec(d, {"model": "penguin_model:build", "metrics": ["mean_absolute_error"], "epochs": 1})
    with pytest.raises(SpecError, match=r"metrics\[0\] 'mean_absolute_error' does not fit a "
                                        r"classification task.*before stage 'train' ran"):
        run_pipeline(plan(load_spec(bad)), QUIET, runs_dir=runs)
    spec = _spec(d, {"model": "penguin_model:build", "model_params": {"units": [8]}, "epochs": 1})
    files = user_code_files(["penguin_model:build"], d)
    assert [f.name for f in files] == ["penguin_layers.py", "penguin_model.py"]
    first = run_pipeline(plan(load_spec(spec)), QUIET, runs_dir=runs)
    assert first.ok
    (d / "notes.py").write_text("# not imported by the model\n")
    second = run_pipeline(plan(load_spec(spec)), QUIET, runs_dir=runs)
    assert [s.status for s in second.stages] == ["cached"] * 3
    layers = d / "penguin_layers.py"
    layers.write_text(layers.read_text().replace('initializer="ones", name="gate_bias"',
                                                 'initializer="zeros", name="gate_bias"'))
    third = run_pipeline(plan(load_spec(spec)), QUIET, runs_dir=runs)
    assert [s.status for s in third.stages] == ["cached", "cached", "succeeded"]


@pytest.mark.slow
@pytest.mark.e2e
def test_the_own_model_example_runs_end_to_end(tmp_path):
    """examples/own_model as a user runs it: `baton run` to a pushed, checked SavedModel."""
    d = tmp_path / "own_model"
    shutil.copytree(EXAMPLE, d, ignore=shutil.ignore_patterns("__pycache__", "models"))
    proc = subprocess.run([sys.executable, "-m", "baton", "run", str(d / "pipeline.yaml"),
                           "--runs-dir", str(tmp_path / "runs"), "-q"],
                          capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = next((tmp_path / "runs" / "own-model").glob("2*"))
    statuses = {s["name"]: s["status"] for s in json.loads((run / "run.json").read_text())["stages"]}
    assert set(statuses.values()) == {"succeeded"} and "push" in statuses, statuses
    blessing = json.loads((run / "evaluate" / "blessing" / "blessing.json").read_text())
    assert blessing["blessed"], blessing
    assert (d / "models" / "own-model" / "1" / "saved_model.pb").is_file()
