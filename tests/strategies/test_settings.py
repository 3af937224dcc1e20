"""The training settings travel as one object: the stage's config is the job's `settings`, the job
file is that object serialised, and every value check lives on it (issue 40)."""

from __future__ import annotations

import dataclasses

import pytest

from baton.configs import ConfigError
from baton.pipeline.stages import train
from baton.strategies.factory import CommunicationConfig, PartitionConfig
from baton.strategies.job import TrainJob
from baton.strategies.settings import TrainSettings

SETTINGS = TrainSettings(
    model="mlp", model_params={"dropout": 0.1, "hidden_units": [8, 4]}, epochs=3, steps=7,
    batch_size=16, learning_rate=0.05, optimizer={"class_name": "SGD", "config": {}},
    metrics=("accuracy",), callbacks=("EarlyStopping", {"class_name": "TerminateOnNaN"}),
    on_nonfinite="restore", mixed_precision="mixed_bfloat16", workers=2, min_workers=1,
    communication=CommunicationConfig(implementation="ring", fp16_allreduce=True),
    partition=PartitionConfig(mode="fixed", num_shards=2),
)


def test_the_stage_config_is_the_settings_class() -> None:
    assert train.Config is TrainSettings


def test_the_job_file_carries_the_settings_object_unchanged() -> None:
    job = TrainJob(feature_spec={"features": []}, settings=SETTINGS, strategy="mirrored")
    back = TrainJob.from_json(job.to_json())
    assert back == job and back.settings == SETTINGS
    assert isinstance(back.settings.communication, CommunicationConfig)
    assert back.settings.callbacks == SETTINGS.callbacks and back.settings.model_params == {
        "dropout": 0.1, "hidden_units": [8, 4]}


def test_the_job_copies_no_settings_field() -> None:
    """Only the values the run resolves (the strategy and balance the topology gives, a probe's
    step count) share a name with a setting; every other setting is read from `job.settings`."""
    job_fields = {f.name for f in dataclasses.fields(TrainJob)}
    settings_fields = {f.name for f in dataclasses.fields(TrainSettings)}
    assert job_fields & settings_fields == {"strategy", "balance", "probe_steps"}


def test_a_bad_job_file_names_the_setting() -> None:
    text = TrainJob(feature_spec={}, settings=SETTINGS).to_json().replace(
        '"epochs": 3', '"epochs": "three"')
    with pytest.raises(ConfigError, match=r"settings\.epochs: expected an integer"):
        TrainJob.from_json(text)
    text = TrainJob(feature_spec={}).to_json().replace('"batch_size": 32', '"batch_size": 0')
    with pytest.raises(ConfigError, match=r"batch_size must be >= 1. Received: batch_size=0"):
        TrainJob.from_json(text)


def test_choices_are_checked_on_settings_made_in_code() -> None:
    with pytest.raises(ValueError, match="mixed_precision must be one of .*Received: "
                                         "mixed_precision='fp8'"):
        TrainSettings(mixed_precision="fp8")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="strategy must be one of"):
        TrainSettings(strategy="horovod")  # type: ignore[arg-type]


def test_the_fingerprint_leaves_out_the_settings_that_pick_the_topology() -> None:
    base = TrainJob(feature_spec={}, settings=SETTINGS)

    def with_settings(**kw: object) -> TrainJob:
        return dataclasses.replace(base, settings=dataclasses.replace(SETTINGS, **kw))

    assert with_settings(workers=3, min_workers=2, max_restarts=9).fingerprint() == \
        base.fingerprint()
    assert with_settings(learning_rate=0.1).fingerprint() != base.fingerprint()


def test_views_of_the_settings() -> None:
    assert SETTINGS.hyperparameters()["hidden_units"] == [8, 4]
    assert SETTINGS.hyperparameters()["learning_rate"] == 0.05
    assert SETTINGS.for_replica().min_workers is None
    assert TrainSettings(workers=2, strategy="mirrored").problems("t") == [
        "config.workers=2 needs a multi-worker strategy. Received: strategy=mirrored"]


def test_a_built_in_models_settings_live_in_one_place() -> None:
    """The settings carry a built-in's parameters as `model_params` only; every default is its
    config class's (graphs.models), none is repeated on TrainSettings."""
    from baton.graphs import models

    settings_fields = {f.name for f in dataclasses.fields(TrainSettings)}
    for name, builtin in models.MODELS.items():
        params = {f.name for f in dataclasses.fields(builtin.config)}
        assert not params & settings_fields, name
    assert TrainSettings().model_params == {}
    assert models.builtin_config("mlp", TrainSettings().model_params) == models.MLPConfig()


@pytest.mark.parametrize(("written", "params"), [
    ({"model": "mlp", "hidden_units": [16], "dropout": 0.2, "categorical": "one_hot"},
     {"hidden_units": [16], "dropout": 0.2, "categorical": "one_hot"}),
    ({"model": "wide_deep", "embedding_dim": 4}, {"embedding_dim": 4}),
    # the cnn's dense layer was the first of hidden_units
    ({"model": "cnn", "filters": [8], "hidden_units": [32], "image_shape": [2, 2, 1]},
     {"filters": [8], "dense_units": 32, "image_shape": [2, 2, 1]}),
    # written both ways: model_params wins, as it did over the flat key
    ({"hidden_units": [16], "model_params": {"hidden_units": [4], "activation": "tanh"}},
     {"hidden_units": [4], "activation": "tanh"}),
])
def test_the_flat_model_keys_of_older_specs_move_into_model_params(written, params) -> None:
    settings = TrainSettings.from_dict(written, "train.config")
    assert settings.model_params == params
    assert TrainSettings.from_dict(settings.to_dict()) == settings  # the job file's round trip
    from baton.graphs import models

    models.builtin_config(settings.model, settings.model_params)  # the model's own check


def test_a_flat_model_key_that_sets_nothing_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match=r"^train\.config\.filters: model mlp has no setting "
                                          r"'filters'.*Received: filters=\[8\]"):
        TrainSettings.from_dict({"model": "mlp", "filters": [8]}, "train.config")
    with pytest.raises(ConfigError, match=r"^train\.config\.hidden_units: hidden_units is a setting "
                                          r"of the built-in models.*model_params.*Received: "
                                          r"hidden_units=\[8\]"):
        TrainSettings.from_dict({"model": "my_model:build", "hidden_units": [8]},
                                "train.config")


def test_a_built_in_models_parameters_are_checked_as_the_settings_are_built() -> None:
    """By the model's config class, once: the spec's config, a job file and settings made in
    code all refuse them, naming the parameter and the value."""
    with pytest.raises(ConfigError, match=r"^model_params: dropout must be in \[0.0, 1.0\). "
                                          r"Received: dropout=2.0"):
        TrainSettings(model="mlp", model_params={"dropout": 2.0})
    with pytest.raises(ConfigError, match=r"^train\.config\.model_params: model cnn has no "
                                          r"parameter 'hidden_units'.*Received: "):
        TrainSettings.from_dict({"model": "cnn", "model_params": {"hidden_units": [8]}},
                                "train.config")
    assert TrainSettings(model="my_model:build", model_params={"anything": 1}).model_params == {
        "anything": 1}  # a model function's own parameters are its business
