"""`callbacks:` checked down to their arguments at plan time (strategies.callbacks.check_callbacks).

A Keras callback class or the user's `module:Class` is checked against its constructor's
signature (a class taking `**kwargs` accepts any keyword), a `module:function` factory must be
callable with no arguments, and Keras' own TensorBoard callback is refused when the
`tensorboard` package it needs is not installed. Nothing is constructed.
"""

from __future__ import annotations

import importlib.util

import pytest

from baton.strategies import callbacks
from baton.strategies.callbacks import check_callbacks

USER_CALLBACKS = '''
import keras

class Logger(keras.callbacks.Callback):
    def __init__(self, path, every=1):
        super().__init__()
        self.path, self.every = path, every

class Flexible(keras.callbacks.Callback):
    def __init__(self, **kwargs):
        super().__init__()
        self.options = kwargs

class Patient(keras.callbacks.EarlyStopping):
    """A user's subclass: EarlyStopping's arguments, through its __init__."""

def make():
    return [Logger("/tmp/x")]

def make_with(path):
    return [Logger(path)]
'''


@pytest.fixture
def code(tmp_path):
    (tmp_path / "cb_args_user.py").write_text(USER_CALLBACKS)
    return tmp_path


def test_a_misspelled_keras_callback_argument_names_the_entry_the_key_and_the_close_name():
    (problem,) = check_callbacks(
        [{"class_name": "EarlyStopping", "config": {"monitor": "eval_loss", "patiense": 2}}]
    )
    assert problem == ("[0]: EarlyStopping has no argument 'patiense' (did you mean 'patience'?). "
                       "Received: config.callbacks[0].config.patiense=2")


def test_keras_base_class_arguments_count_and_missing_ones_are_named():
    ok = {"class_name": "ReduceLROnPlateau", "config": {"monitor": "val_loss", "factor": 0.5,
                                                         "min_delta": 0.01, "patience": 2}}
    problems = check_callbacks([ok, "ModelCheckpoint"])
    assert problems == ["[1]: ModelCheckpoint needs the argument(s) 'filepath'. "
                        "Received: config.callbacks[1].config={}"]


def test_the_users_class_is_checked_by_its_signature(code):
    specs = [
        {"class_name": "cb_args_user:Logger", "config": {"path": "/tmp/l", "evry": 2}},
        {"class_name": "cb_args_user:Logger", "config": {"every": 2}},
        {"class_name": "cb_args_user:Flexible", "config": {"anything": 1}},
        {"class_name": "cb_args_user:Patient", "config": {"patiense": 1}},
        "cb_args_user:make",
        "cb_args_user:make_with",
    ]
    assert check_callbacks(specs, code) == [
        "[0]: Logger has no argument 'evry' (did you mean 'every'?). "
        "Received: config.callbacks[0].config.evry=2",
        "[1]: Logger needs the argument(s) 'path'. Received: config.callbacks[1].config={'every': 2}",
        "[3]: Patient has no argument 'patiense' (did you mean 'patience'?). "
        "Received: config.callbacks[3].config.patiense=1",
        "[5]: make_with needs the argument(s) 'path'. Received: config.callbacks[5]={}",
    ]


def test_keras_tensorboard_is_refused_without_the_tensorboard_package(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "tensorboard" else real(name, *a))
    (problem,) = check_callbacks([{"class_name": "TensorBoard", "config": {"log_dir": "/tmp/tb"}}])
    assert problem.startswith("[0]: keras.callbacks.TensorBoard needs the `tensorboard` package")
    assert "Baton writes the TensorBoard scalars itself" in problem
    assert "Received: config.callbacks[0]={'class_name': 'TensorBoard'" in problem
    assert check_callbacks(["keras.callbacks.TensorBoard"])[0].startswith("[0]: keras.callbacks.")


def test_keras_tensorboard_passes_where_the_package_is_installed(monkeypatch):
    monkeypatch.setattr(callbacks, "_has_tensorboard", lambda: True)
    assert check_callbacks([{"class_name": "TensorBoard", "config": {"log_dir": "/tmp/tb"}}]) == []


def test_the_existing_class_checks_are_unchanged():
    (problem,) = check_callbacks(["EarlyStoping"])
    assert problem.startswith("[0]: unknown Keras callback 'EarlyStoping' (did you mean "
                              "'EarlyStopping'?)")
