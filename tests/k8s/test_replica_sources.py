"""What a TFJob replica's `baton task` says when the train stage refuses its topology: the
strategy, workers and ps came from TF_CONFIG, so the message names TF_CONFIG, not a flag."""

from __future__ import annotations

import json

import pytest

from baton.pipeline.commands import task
from baton.strategies.cluster import TFConfig

from .test_cli import _train_spec


def _tf_config(**tasks: int) -> TFConfig:
    """A chief's TF_CONFIG with `tasks` of each kind (never dialled: the job is refused first)."""
    ports = iter(range(1, 100))
    cluster = {kind: [f"127.0.0.1:{next(ports)}" for _ in range(n)] for kind, n in tasks.items()}
    return TFConfig.from_json(json.dumps({"cluster": cluster, "task": {"type": "chief", "index": 0}}))


@pytest.mark.parametrize("config,tf_config,expected", [
    ("{balance: auto}", dict(chief=1, worker=2, ps=1),
     "strategy parameter_server (implied by TF_CONFIG's chief x1, worker x2, ps x1)"),
    ("{strategy: mirrored}", dict(chief=1, worker=1),
     "TF_CONFIG workers=2 needs a multi-worker strategy (multi_worker_mirrored or "
     "parameter_server), but the strategy is mirrored (config.strategy=mirrored)"),
])
def test_a_replica_names_tf_config_not_a_flag_it_never_received(tmp_path, config, tf_config,
                                                                 expected):
    spec = _train_spec(tmp_path / "spec.yaml", "{}", config)
    run_dir = tmp_path / "run"
    for output in ("transformed", "transform_graph"):  # refused before anything reads them
        (run_dir / "transform" / output).mkdir(parents=True)
    args = task.parser().parse_args([str(spec), "--stage", "train", "--run-dir", str(run_dir)])
    with pytest.raises(ValueError) as refused:
        task._job(args, _tf_config(**tf_config))
    assert expected in str(refused.value)
    assert "--strategy" not in str(refused.value) and "--workers" not in str(refused.value)


def test_a_tfjob_replica_counts_the_defaults_over_every_compute_task_of_tf_config() -> None:
    """On a pod only its own inventory is at hand: TF_CONFIG's compute tasks run the same pod
    template, so each counts as a node like it (the record said 1 replica beside 2)."""
    from baton.pipeline.commands.task import training_nodes
    from baton.strategies import inventory

    me = {"host": "chief-0", "cpu_usable": 2, "gpus": 0, "task": "chief:0"}
    cluster = {"chief": ["c:1"], "worker": ["w:1"], "evaluator": ["e:1"]}
    nodes = training_nodes([me], cluster, "multi_worker_mirrored", gathered=False)
    assert len(nodes) == 2  # the evaluator does not compute the steps
    assert inventory.derive_defaults(nodes, 64, "multi_worker_mirrored")["replicas"] == 2
    ps = {"chief": ["c:1"], "worker": ["w:1", "w:2", "w:3"], "ps": ["p:1"]}
    assert len(training_nodes([me], ps, "parameter_server", gathered=False)) == 3
    # the local launcher gathers every task's inventory: those are counted as they are
    gathered = [me, {**me, "task": "worker:0"}, {**me, "task": "ps:0"}]
    assert training_nodes(gathered, ps, "parameter_server", gathered=True) == [gathered[1]]
    assert training_nodes([me], {}, "one_device", gathered=False) == [me]
