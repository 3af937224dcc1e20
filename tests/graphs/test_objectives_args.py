"""`optimizer:` checked down to its arguments at plan time (graphs.objective_checks.check_optimizer).

A misspelled optimizer argument, learning-rate schedule class or schedule argument is a spec
problem naming the exact key (`config.optimizer.config.learnin_rate`), the value received and
Keras' closest name, read from the classes' signatures without building anything. One CLI test
shows `baton run --check` exits 2 with the problem before any stage runs.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import keras
import pytest
import yaml

from baton.graphs.objective_checks import check_arguments, check_optimizer, keyword_arguments

REPO = Path(__file__).resolve().parents[2]
SCHEDULE = {"initial_learning_rate": 0.01, "decay_steps": 100, "decay_rate": 0.9}


def _adam(**config):
    return {"class_name": "Adam", "config": config}


def _schedule(name="ExponentialDecay", **config):
    return _adam(learning_rate={"class_name": name, "config": config or SCHEDULE})


def test_a_misspelled_optimizer_argument_names_the_key_the_value_and_the_close_name():
    (problem,) = check_optimizer(_adam(learnin_rate=0.01))
    assert "Adam has no argument 'learnin_rate' (did you mean 'learning_rate'?)" in problem
    assert problem.endswith("Received: config.optimizer.config.learnin_rate=0.01")


def test_an_argument_nothing_is_close_to_lists_what_the_class_takes():
    (problem,) = check_optimizer(_adam(foo=1))
    assert "did you mean" not in problem
    assert "it takes: learning_rate, beta_1" in problem and "clipnorm" in problem


def test_a_misspelled_schedule_class_names_its_class_name_field():
    (problem,) = check_optimizer(_schedule("ExponentialDecayy"))
    assert "unknown Keras learning-rate schedule 'ExponentialDecayy' (did you mean " \
           "'ExponentialDecay'?)" in problem
    assert "Received: config.optimizer.config.learning_rate.class_name='ExponentialDecayy'" in problem


def test_a_misspelled_schedule_argument_is_reported_once():
    config = {**SCHEDULE, "decay_step": 100}
    del config["decay_steps"]
    (problem,) = check_optimizer(_schedule(**config))  # not also "needs decay_steps"
    assert "ExponentialDecay has no argument 'decay_step' (did you mean 'decay_steps'?)" in problem
    assert "Received: config.optimizer.config.learning_rate.config.decay_step=100" in problem


def test_a_schedule_missing_an_argument_says_which():
    (problem,) = check_optimizer(_schedule(initial_learning_rate=0.1, decay_steps=10))
    assert "ExponentialDecay needs the argument(s) 'decay_rate'" in problem


def test_an_unknown_optimizer_class_names_the_class_name_field():
    (problem,) = check_optimizer({"class_name": "Adamm"})
    assert "unknown Keras optimizer 'Adamm' (did you mean 'Adam'?)" in problem
    assert "Received: config.optimizer.class_name='Adamm'" in problem


@pytest.mark.parametrize(
    "value",
    [
        {"class_name": "Adam"},
        {"class_name": "sgd", "config": {"momentum": 0.9, "nesterov": True}},
        _adam(learning_rate=0.01, beta_1=0.8, clipnorm=1.0, weight_decay=None, name="opt"),
        _schedule(),
        _schedule("CosineDecay", initial_learning_rate=0.1, decay_steps=10, alpha=0.1),
        {"class_name": "AdamW", "config": {"learning_rate": 3, "weight_decay": 0.01}},
        "adam", "rmsprop",
    ],
)
def test_what_keras_accepts_passes(value):
    assert check_optimizer(value) == []


def test_a_learning_rate_yaml_read_as_text_is_refused():
    (problem,) = check_optimizer(_adam(learning_rate="1e-3"))
    assert "learning_rate must be a number or a schedule" in problem
    assert "Received: config.optimizer.config.learning_rate='1e-3' (str)" in problem


def test_a_user_class_in_an_optimizer_mapping_points_to_module_function():
    (problem,) = check_optimizer({"class_name": "my_opts:Fancy"})
    assert "optimizer: 'module:function'" in problem
    assert "Received: config.optimizer.class_name='my_opts:Fancy'" in problem


def test_the_existing_identifier_checks_are_unchanged():
    (problem,) = check_optimizer("adamm")
    assert problem.startswith("unknown Keras optimizer 'adamm' (did you mean 'adam'?)")
    (problem,) = check_optimizer({"name": "SGD"})
    assert problem.startswith("a mapping must be {class_name")


# ------------------------------------------------------------------ signatures
class _Open:
    def __init__(self, a, b=1, **kwargs):
        self.kwargs = kwargs


class _Closed(_Open):
    def __init__(self, a, c=2):
        super().__init__(a)


def test_a_user_class_taking_kwargs_accepts_any_keyword_but_still_needs_its_arguments():
    assert keyword_arguments(_Open) == (None, ["a"])
    assert check_arguments(_Open, {"a": 1, "anything": 2}, "f") == []
    assert check_arguments(_Open, {"b": 1}, "f") == ["_Open needs the argument(s) 'a'. Received: f={'b': 1}"]


def test_a_class_without_kwargs_takes_only_its_own_arguments():
    assert keyword_arguments(_Closed) == (["a", "c"], ["a"])
    (problem,) = check_arguments(_Closed, {"a": 1, "b": 2}, "f")
    assert problem == "_Closed has no argument 'b'; it takes: a, c. Received: f.b=2"


def test_keras_kwargs_are_followed_to_the_base_class_that_refuses_the_rest():
    accepted, required = keyword_arguments(keras.optimizers.Adam)
    assert {"learning_rate", "beta_1", "clipnorm", "use_ema", "name"} <= set(accepted)
    assert required == []


# ------------------------------------------------------------------ the CLI
def test_baton_run_check_exits_2_naming_the_argument(tmp_path):
    d = tmp_path / "own_model"
    shutil.copytree(REPO / "examples" / "own_model", d,
                    ignore=shutil.ignore_patterns("__pycache__", "models"))
    spec = yaml.safe_load((d / "pipeline.yaml").read_text())
    train = next(s for s in spec["stages"] if s["name"] == "train")
    train["config"]["optimizer"] = _adam(learnin_rate=0.01)
    train["config"]["callbacks"] = [
        {"class_name": "EarlyStopping", "config": {"monitor": "eval_loss", "patiense": 2}}
    ]
    (d / "pipeline.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    proc = subprocess.run([sys.executable, "-m", "baton", "run", str(d / "pipeline.yaml"), "--check"],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "(2 problems)" in proc.stderr
    assert ("config.optimizer: Adam has no argument 'learnin_rate' (did you mean 'learning_rate'?)"
            ". Received: config.optimizer.config.learnin_rate=0.01") in proc.stderr
    assert ("config.callbacks[0]: EarlyStopping has no argument 'patiense' (did you mean "
            "'patience'?). Received: config.callbacks[0].config.patiense=2") in proc.stderr


def test_a_failing_loss_is_told_the_shapes_it_was_given(tmp_path) -> None:
    """A regression loss receives y_true and y_pred as [B, 1]: the error says so beside the raw
    labels [B] (it named only those, which the function never saw)."""
    import tensorflow as tf

    from baton.graphs.objectives import _as_received, make_loss

    (tmp_path / "my_losses.py").write_text(
        "def total(y_true, y_pred):\n    return ((y_true - y_pred) ** 2).sum()\n")
    fn = make_loss("my_losses:total", "regression", 0, tmp_path)
    labels, logits = tf.zeros([2]), tf.zeros([2, 1])
    assert _as_received(fn, labels, logits) == (
        " (given to it as y_true float32[2, 1], y_pred float32[2, 1])")
    classify = make_loss("my_losses:total", "classification", 3, tmp_path)
    assert _as_received(classify, tf.zeros([2], tf.int64), tf.zeros([2, 3])) == ""  # as given
