"""What a TFJob replica's `baton task` says when the train stage refuses its topology: the
strategy, workers and ps came from TF_CONFIG, so the message names TF_CONFIG, not a flag."""

from __future__ import annotations

import json

import pytest

from baton.pipeline.commands import task
from baton.strategies.cluster import TFConfig


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
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "pipeline: p\nstages:\n"
        "  - {name: ingest, type: ingest, config: {source: penguins}}\n"
        "  - {name: transform, type: transform, inputs: {examples: ingest.examples}}\n"
        "  - name: train\n    type: train\n"
        "    inputs: {transformed: transform.transformed, transform_graph: transform.transform_graph}\n"
        f"    config: {config}\n")
    run_dir = tmp_path / "run"
    for output in ("transformed", "transform_graph"):  # refused before anything reads them
        (run_dir / "transform" / output).mkdir(parents=True)
    args = task.parser().parse_args([str(spec), "--stage", "train", "--run-dir", str(run_dir)])
    with pytest.raises(ValueError) as refused:
        task._job(args, _tf_config(**tf_config))
    assert expected in str(refused.value)
    assert "--strategy" not in str(refused.value) and "--workers" not in str(refused.value)
