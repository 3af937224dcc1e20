"""`baton task SPEC --stage train --run-dir DIR`: one task of a cluster, driven by TF_CONFIG."""

from __future__ import annotations

import json
import signal

import pytest

from pipeline.commands import task
from tests.pipeline.dataplane.helpers import penguins


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    art = penguins(tmp_path_factory.mktemp("penguins"))
    return art["transformed"].parents[1]  # runs/<pipeline>/<run id>: holds transform/ and ingest/


@pytest.fixture
def keep_sigterm():
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)


def test_spec_form_trains_from_the_run_dir_and_writes_atomically(
    run_dir, tmp_path, monkeypatch, keep_sigterm
) -> None:
    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.delenv("BATON_INJECT_FAILURE", raising=False)
    out = tmp_path / "out"
    assert task.main(["--stage", "train", "--run-dir", str(run_dir), "--out", str(out)]) == 0
    info = json.loads((out / "model" / "train_info.json").read_text())
    assert info["steps"] == info["planned_steps"] > 0
    assert not list(out.glob(".tmp-model-*"))  # the temporary directory was renamed away
    history = json.loads((out / "model" / "history.json").read_text())
    assert history[-1]["eval_accuracy"] >= 0.9


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {
                "TF_CONFIG": '{"cluster": {"worker": ["127.0.0.1:1"]}, '
                '"task": {"type": "worker", "index": 3}}'
            },
            "worker:3 is not in the cluster",
        ),
        ({"TF_CONFIG": "{not json"}, "TF_CONFIG is not valid JSON"),
        ({"BATON_INJECT_FAILURE": "worker@minute:3"}, "Received: 'worker@minute:3'"),
    ],
)
def test_bad_environment_is_a_permanent_failure(run_dir, monkeypatch, capsys, env, message) -> None:
    monkeypatch.delenv("TF_CONFIG", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert task.main(["--stage", "train", "--run-dir", str(run_dir)]) == task.PERMANENT
    assert message in capsys.readouterr().out


def test_unknown_stage_is_a_permanent_failure(run_dir, capsys) -> None:
    assert task.main(["--stage", "evaluate", "--run-dir", str(run_dir)]) == task.PERMANENT
    assert "runs train stages only" in capsys.readouterr().out
