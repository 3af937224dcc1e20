"""`baton task SPEC --stage train --run-dir DIR`: one task of a cluster, driven by TF_CONFIG."""

from __future__ import annotations

import json
import signal

import pytest

from baton import logs
from baton.pipeline.commands import task
from tests.pipeline.dataplane.helpers import penguins
from tests.strategies.jobs import train_job


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
    logs.configure()  # as the CLI edge does; the lines are log records on stderr
    assert task.main(["--stage", "train", "--run-dir", str(run_dir)]) == task.PERMANENT
    assert message in capsys.readouterr().err


def test_unknown_stage_is_a_permanent_failure(run_dir, capsys) -> None:
    logs.configure()
    assert task.main(["--stage", "evaluate", "--run-dir", str(run_dir)]) == task.PERMANENT
    assert "runs train stages only" in capsys.readouterr().err


def test_spec_form_runs_no_tensorflow_op_before_the_strategy(run_dir) -> None:
    """Regression: counting rows at the edge initialised TF's eager context, and the TFJob's
    MultiWorkerMirroredStrategy then failed with "Collective ops must be configured at program
    startup". A fresh process (this one's context is long initialised) resolves the job as the
    chief of a 2-worker TFJob would and checks the context is still untouched."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    probe = (
        "import sys\n"
        "from tensorflow.python.eager import context\n"
        "from baton.pipeline.commands import task\n"
        "from baton.strategies.cluster import TFConfig\n"
        "args = task.parser().parse_args(['--stage', 'train', '--run-dir', sys.argv[1]])\n"
        "job, out = task._job(args, TFConfig.from_env())\n"
        "assert job.strategy == 'multi_worker_mirrored', job.strategy\n"
        "assert job.num_train_examples == 0, job.num_train_examples\n"
        "assert context.context()._context_handle is None, 'TF context initialised at the edge'\n"
    )
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_CONFIG=json.dumps({
        "cluster": {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]},
        "task": {"type": "chief", "index": 0},
    }))
    root = str(Path(__file__).resolve().parents[3])
    proc = subprocess.run(
        [sys.executable, "-c", probe, str(run_dir)], env=env, cwd=root,
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_tf_config_with_ps_tasks_beats_the_spec_cluster_section(run_dir, monkeypatch) -> None:
    """The embedded spec says `ps: 0`; the PS tasks the operator started decide."""
    from baton.strategies.cluster import TFConfig

    monkeypatch.setenv("TF_CONFIG", json.dumps({
        "cluster": {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "ps": ["127.0.0.1:3"]},
        "task": {"type": "chief", "index": 0},
    }))
    args = task.parser().parse_args(["--stage", "train", "--run-dir", str(run_dir)])
    job, _ = task._job(args, TFConfig.from_env())
    assert job.strategy == "parameter_server"


@pytest.mark.parametrize(
    ("error", "code"),
    [
        ("AbortedError", task.TRANSIENT),
        ("UnavailableError", task.TRANSIENT),
        ("CancelledError", task.TRANSIENT),
        ("DeadlineExceededError", task.TRANSIENT),
        ("ValueError", task.PERMANENT),
    ],
)
def test_broken_collective_exits_with_the_retryable_code(
    error, code, monkeypatch, tmp_path, keep_sigterm
) -> None:
    """What a dead peer raises from the all-reduce maps to 129, which `restartPolicy: ExitCode`
    retries (>= 128); a bug stays permanent (1)."""
    import tensorflow as tf

    from baton.strategies import task as task_body
    from baton.strategies.cluster import TFConfig

    def broken(*_args, **_kwargs):
        if error == "ValueError":
            raise ValueError("a bug")
        raise getattr(tf.errors, error)(None, None, "Collective ops is aborted by: peer died")

    monkeypatch.setattr(task_body, "run_task", broken)
    tf_config = TFConfig.from_json(json.dumps({
        "cluster": {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]},
        "task": {"type": "chief", "index": 0},
    }))
    job = train_job(feature_spec={}, strategy="multi_worker_mirrored")
    assert task.run(job, tf_config, tmp_path, tmp_path / "backup") == code
    assert code >= 128 or code == task.PERMANENT


def test_xla_with_ps_tasks_is_refused_before_any_task_starts(run_dir, tmp_path, monkeypatch) -> None:
    """A TFJob with PS replicas and `jit_compile: true` fails permanently in every replica,
    instead of the chief crashing in XLA while the servers wait."""
    from baton.strategies.cluster import TFConfig

    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "pipeline: p\nstages:\n"
        "  - {name: ingest, type: ingest, config: {source: penguins}}\n"
        "  - {name: transform, type: transform, inputs: {examples: ingest.examples}}\n"
        "  - name: train\n    type: train\n"
        "    inputs: {transformed: transform.transformed, transform_graph: transform.transform_graph}\n"
        "    config: {jit_compile: true}\n"
    )
    monkeypatch.setenv("TF_CONFIG", json.dumps({
        "cluster": {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "ps": ["127.0.0.1:3"]},
        "task": {"type": "worker", "index": 0},
    }))
    args = task.parser().parse_args([str(spec), "--stage", "train", "--run-dir", str(run_dir)])
    with pytest.raises(ValueError, match="train.config.jit_compile: true is not supported"):
        task._job(args, TFConfig.from_env())
