"""train stage: real penguins transformed data in, the `model` artifact out (docs/artifacts.md)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from baton.configs import ConfigError, build_config
from baton.errors import StageError
from baton.graphs.feature_spec import FeatureSpec
from baton.graphs.input_pipeline import make_dataset
from baton.pipeline.context import RunOptions
from baton.pipeline.stages import train
from baton.pipeline.testing import run_stage
from tests.pipeline.dataplane.helpers import penguins


@pytest.fixture(scope="module")
def art(tmp_path_factory):
    return penguins(tmp_path_factory.mktemp("penguins"))


@pytest.fixture(scope="module")
def trained(art, tmp_path_factory):
    inputs = {"transformed": art["transformed"], "transform_graph": art["transform_graph"]}
    return run_stage("train", {"epochs": 12}, inputs, tmp_path_factory.mktemp("train"))


def test_penguins_reaches_090_eval_accuracy_and_writes_the_contract(trained, art) -> None:
    import keras

    outputs, metrics = trained
    model_dir = outputs["model"]
    assert {"model.keras", "history.json", "train_info.json", "logs"} <= {
        p.name for p in model_dir.iterdir()
    }
    history = json.loads((model_dir / "history.json").read_text())
    assert len(history) == 12 and history[-1]["eval_accuracy"] >= 0.9
    assert metrics["eval_accuracy"] >= 0.9 and metrics["strategy"] == "one_device"
    info = json.loads((model_dir / "train_info.json").read_text())
    assert info["steps"] == 12 * (278 // 32) and info["inventory"][0]["cpu_cores"] >= 1
    assert info["defaults"]["replicas"] == 1
    # the derived placement is the strategy's: its replicas, the global batch split over them
    assert metrics["replicas"] == info["num_replicas"] == info["defaults"]["replicas"]
    assert metrics["per_replica_batch_size"] == info["defaults"]["per_replica_batch_size"] == 32
    assert list((model_dir / "logs").glob("events.out.tfevents.*"))
    # The contract: model(features) on the make_dataset dict of [B] tensors -> logits [B, classes].
    spec = FeatureSpec.load(art["transform_graph"])
    model = keras.models.load_model(model_dir / "model.keras")
    feats, labels = next(iter(make_dataset(art["transformed"], "eval", spec, 66)))
    logits = np.asarray(model(feats))
    assert logits.shape == (66, 3)
    assert np.mean(logits.argmax(1) == labels.numpy()) >= 0.9


def test_topology_flags_beat_config_which_beats_the_spec() -> None:
    cfg = build_config(train.Config, {"strategy": "multi_worker_mirrored", "workers": 3})
    assert train.topology(cfg, RunOptions()) == train.Topology("multi_worker_mirrored", 3, 0)
    assert train.topology(cfg, RunOptions(workers=2)) == train.Topology("multi_worker_mirrored", 2, 0)
    # --ps with a strategy that has no PS tasks is refused, not dropped.
    with pytest.raises(StageError, match="--ps 1 needs strategy parameter_server.*Received: --ps 1"):
        train.topology(cfg, RunOptions(workers=2, ps=1))
    with pytest.raises(StageError, match="--workers 2 needs a multi-worker strategy"):
        train.topology(build_config(train.Config, {}), RunOptions(workers=2, strategy="mirrored"))
    topo = train.topology(build_config(train.Config, {}), RunOptions(workers=2, ps=1))
    assert topo == train.Topology("parameter_server", 2, 1) and topo.multi_process
    assert not train.topology(build_config(train.Config, {}), RunOptions()).multi_process
    with pytest.raises(StageError, match="needs at least one ps task.*Received: no --ps"):
        train.topology(build_config(train.Config, {}), RunOptions(strategy="parameter_server"))


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"epochs": 0}, "Received: epochs=0"),
        ({"learning_rate": -1}, "Received: learning_rate=-1"),
        ({"strategy": "horovod"}, "Received: 'horovod'"),
        ({"epoch": 3}, "did you mean 'epochs'"),
        ({"communication": {"implementation": "mpi"}}, "Received: 'mpi'"),
        # `balance: Literal | None`: the choices and a did-you-mean, not "expected Literal"
        ({"balance": "Auto"}, r"balance: must be one of 'auto', 'off' \(did you mean 'auto'\?\)"),
        ({"balance": True}, "must be one of 'auto', 'off'.*Received: True"),
    ],
)
def test_bad_config_names_the_field_and_value(config, message) -> None:
    with pytest.raises(ConfigError, match=message):
        build_config(train.Config, config)


def test_an_unquoted_yaml_off_is_the_choice_off() -> None:
    """YAML 1.1 reads `balance: off` as false; the docs write it unquoted."""
    import yaml

    config = yaml.safe_load("balance: off\nmixed_precision: off\n")
    assert config == {"balance": False, "mixed_precision": False}
    built = build_config(train.Config, config)
    assert built.balance == "off" and built.mixed_precision == "off"


def test_batch_larger_than_the_data_is_a_stage_error(art, tmp_path) -> None:
    inputs = {"transformed": art["transformed"], "transform_graph": art["transform_graph"]}
    with pytest.raises(StageError, match="Received: batch_size=5000"):
        run_stage("train", {"batch_size": 5000}, inputs, tmp_path)
