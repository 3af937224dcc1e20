"""The train stage's lineage when its tasks ran as pods (pipeline.training.task_record): the
release step's `baton run --only evaluate,...` accepts it, as it refused a run dir without it
(issue 37: "stage 'train' is not selected by --only and has no finished outputs")."""

from __future__ import annotations

import json

import pytest

from baton.errors import UsageError
from baton.pipeline import lineage
from baton.pipeline.plan import plan
from baton.pipeline.runner import _require_outputs
from baton.pipeline.spec import load_spec
from baton.pipeline.training import task_record


def _run_dir(tmp_path):
    run_dir = tmp_path / "runs" / "penguins" / "r1"
    for out in ("transformed", "transform_graph"):
        (run_dir / "transform" / out).mkdir(parents=True)
        (run_dir / "transform" / out / "part").write_text(out)
    model = run_dir / "train" / "model"
    model.mkdir(parents=True)
    (model / "train_info.json").write_text(json.dumps(
        {"steps": 40, "examples_per_sec": 900.0, "strategy": "multi_worker_mirrored",
         "num_replicas": 2, "resumed_from_step": 16}))
    (model / "history.json").write_text(json.dumps([{"eval_accuracy": 0.97, "train_loss": 0.1}]))
    return run_dir


def test_the_chiefs_record_lets_the_release_step_run(tmp_path):
    spec = load_spec(None)
    run_dir = _run_dir(tmp_path)
    with pytest.raises(UsageError, match="'train' is not selected by --only and has no finished"):
        _require_outputs(plan(spec), run_dir, "train")  # what the release Job met
    (run_dir / "train.failed.json").write_text("{}")  # an earlier attempt's, superseded
    path = task_record.write_succeeded(spec, "train", run_dir, "2026-12-04T20:00:00Z", 12.5)
    _require_outputs(plan(spec), run_dir, "train")
    rec = lineage.read(run_dir / "train")
    assert path == run_dir / "train" / "lineage.json" and rec["status"] == "succeeded"
    assert rec["outputs"]["model"]["path"] == str(run_dir / "train" / "model")
    assert rec["outputs"]["model"]["hash"] and rec["cache"] == {"key": None, "hit": False}
    assert set(rec["inputs"]) == {"transformed", "transform_graph"}
    assert rec["metrics"]["steps"] == 40 and rec["metrics"]["eval_accuracy"] == 0.97
    assert rec["metrics"]["examples_trained"] == (40 - 16) * 32
    assert not (run_dir / "train.failed.json").exists()


def test_a_permanent_failure_leaves_the_runners_failed_record(tmp_path):
    run_dir = _run_dir(tmp_path)
    path = task_record.write_failed(load_spec(None), "train", run_dir, "t0", "worker:1", "bad")
    rec = json.loads(path.read_text())
    assert path.name == "train.failed.json" and rec["status"] == "failed"
    assert rec["task"] == "worker:1" and rec["error"] == "bad"
    assert lineage.read(run_dir / "train") is None  # no reader takes it for finished
