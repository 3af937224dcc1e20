"""Real local clusters on 127.0.0.1: restarts from backups, PS worker loss, preemption, teardown.

Each test starts real `baton task` processes, so they are marked multi_worker and slow; models
are tiny and runs are a few dozen steps. A worker SIGKILLed at a random step, restarted from
the backup, ending bitwise equal to the uninterrupted run: test_own_model_clusters.py (on a
user's model with a custom layer, which covers the built-in path too).
"""

from __future__ import annotations

import contextlib
import io
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from baton.graphs.synthetic import synthetic_spec
from baton.pipeline.stages.train import task_argv
from baton.strategies import launcher
from baton.strategies.faults import parse_fault
from baton.strategies.job import TrainJob
from tests.strategies.jobs import train_job

pytestmark = [pytest.mark.multi_worker, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def _job(**kw) -> TrainJob:
    base: dict[str, Any] = dict(
        feature_spec=synthetic_spec(4, (3, 2), 3).to_dict(),
        synthetic_examples=1024,
        batch_size=64,
        epochs=2,
        steps_per_execution=4,
        backup_every=4,
        strategy="multi_worker_mirrored",
    )
    base.update(kw)
    return train_job(**base)


def _command(d: Path):
    def command(task) -> list[str]:
        return task_argv(d / "job.json", d / "out", d / "backup")

    return command


def _launch(
    root: Path, name: str, job: TrainJob, workers: int = 2, ps: int = 0, fault: str | None = None,
    max_restarts: int = 2, **kw: Any,
):
    d = root / name
    d.mkdir()
    (d / "job.json").write_text(job.to_json())
    log = io.StringIO()
    cfg = launcher.LaunchConfig(
        workers=workers,
        ps=ps,
        strategy=job.strategy,
        max_restarts=max_restarts,
        fault=parse_fault(fault),
        state_dir=d / "state",
        **kw,
    )
    result = launcher.launch(cfg, _command(d), stream=log)
    return result, d / "out" / "model", log.getvalue()


def test_parameter_server_tolerates_a_dead_worker_without_restart(tmp_path) -> None:
    job = _job(
        strategy="parameter_server",
        epochs=4,
        backup_every=0,
        model="wide_deep",
        feature_spec=synthetic_spec(4, (3000, 3), 3).to_dict(),
        partition={"min_shard_bytes": 4096},
    )
    result, model_dir, log = _launch(tmp_path, "ps", job, workers=2, ps=2, fault="worker:1@step:12")
    assert result.ok, log
    assert result.restarts == 0 and result.worker_restarts >= 1, result.events
    info = json.loads((model_dir / "train_info.json").read_text())
    assert info["steps"] >= job.settings.epochs * job.steps_per_epoch()
    assert "injecting fault worker:1@step:12:kill" in log
    # The big table is split over both PS tasks; the small one stays whole.
    devices = info["embedding_devices"]
    assert {devices["c0_embedding/shard_0"], devices["c0_embedding/shard_1"]} == {
        "/job:ps/replica:0/task:0/device:CPU:0",
        "/job:ps/replica:0/task:1/device:CPU:0",
    }
    assert "c1_embedding/embeddings" in devices


def _task_logs(root: Path) -> str:
    """Every task log under `root` (a failure shows what each task said)."""
    return "\n".join(f"--- {p}\n{p.read_text(errors='replace')[-3000:]}"
                     for p in sorted(root.rglob("*.log")))


def test_sigterm_to_one_worker_stops_every_worker_at_the_same_step(tmp_path) -> None:
    """The preemption flag rides on the all-reduce: worker 1 stops where worker 0 was told to."""
    job = _job()
    result, model_dir, log = _launch(tmp_path, "term", job, fault="worker:0@step:10:term")
    assert result.ok, log
    assert result.events[0] in {f"attempt 0: worker:{i} exited with code 143" for i in (0, 1)}, (
        result.events, log, _task_logs(tmp_path))
    stops = {
        line.split("preempted at step ")[1].split(";")[0]
        for line in log.splitlines()
        if "preempted at step" in line
    }
    assert len(stops) == 1 and log.count("preempted at step") == 2, log
    info = json.loads((model_dir / "train_info.json").read_text())
    assert info["resumed_from_step"] == int(stops.pop())
    assert info["steps"] == job.settings.epochs * job.steps_per_epoch()


def test_sigterm_to_the_parameter_server_coordinator_saves_and_the_group_resumes(tmp_path):
    """Under parameter servers only the coordinator trains: SIGTERM makes it save the variables
    (held by the PS) at the step it reached and exit 143; the group resumes from that backup."""
    job = _job(strategy="parameter_server", epochs=3, backup_every=0)
    result, model_dir, log = _launch(tmp_path, "psterm", job, workers=1, ps=1,
                                     fault="chief@step:10:term")
    assert result.ok, log[-3000:]
    assert result.restarts == 1 and "chief:0 exited with code 143" in result.events[0], result.events
    stops = [int(line.split("preempted at step ")[1].split(";")[0])
             for line in log.splitlines() if "preempted at step" in line]
    assert len(stops) == 1 and 10 <= stops[0] < job.settings.epochs * job.steps_per_epoch(), log[-3000:]
    info = json.loads((model_dir / "train_info.json").read_text())
    assert info["resumed_from_step"] == stops[0]
    assert info["steps"] >= job.settings.epochs * job.steps_per_epoch()
    history = json.loads((model_dir / "history.json").read_text())  # no epoch lost to the stop
    assert [h["epoch"] for h in history] == list(range(1, job.settings.epochs + 1)), history


def test_a_mid_epoch_parameter_server_backup_carries_the_epochs_training_totals(tmp_path):
    """The coordinator's SIGTERM backup in the middle of an epoch holds the epoch's training
    totals so far (every closure that ran, those not yet fetched included), which a resume goes
    on adding to: the epoch's train_* metrics then cover all of its steps."""
    import tensorflow as tf

    # 16 steps an epoch; 2-step closures, two in flight: the stop lands inside epoch 1
    job = _job(strategy="parameter_server", epochs=2, backup_every=0, steps_per_execution=2)
    result, _, log = _launch(tmp_path, "pstotals", job, workers=1, ps=1,
                             fault="chief@step:6:term", max_restarts=0)
    assert not result.ok and "chief:0 exited with code 143" in " ".join(result.events), log[-3000:]
    stop = int(log.split("preempted at step ")[1].split(";")[0])
    spe = job.steps_per_epoch()
    assert stop % spe, (stop, spe)  # in the middle of the epoch
    reader = tf.train.load_checkpoint(str(tmp_path / "pstotals" / "backup"))
    key = next(k for k in reader.get_variable_to_shape_map() if k.startswith("state/"))
    state = json.loads(reader.get_tensor(key).decode())
    assert state["step"] == stop
    loss_sum, correct, count = state["epoch_totals"][:3]
    assert count == (stop % spe) * job.settings.batch_size, (state, stop)
    assert loss_sum > 0 and 0 <= correct <= count


def test_dead_parameter_server_restarts_the_group_from_the_checkpoint(tmp_path) -> None:
    job = _job(strategy="parameter_server", epochs=3, backup_every=0)
    result, model_dir, log = _launch(tmp_path, "deadps", job, workers=1, ps=1, fault="ps:0@step:20")
    assert result.ok, log
    assert result.restarts == 1 and "ps:0 exited with signal SIGKILL" in result.events[0]
    info = json.loads((model_dir / "train_info.json").read_text())
    assert info["resumed_from_step"] % job.steps_per_epoch() == 0 and info["resumed_from_step"] > 0
    assert info["steps"] >= job.settings.epochs * job.steps_per_epoch()


def test_bad_config_is_permanent_and_not_retried(tmp_path) -> None:
    """Not retried, and told in the task's words (its one line, no traceback): the error is
    the task's message, named by task, not just its exit code."""
    result, _, log = _launch(tmp_path, "bad", _job(optimizer="adagradd"), workers=2)
    assert not result.ok and result.restarts == 0
    assert result.error.startswith(("worker:0: ", "worker:1: ")), result.error
    assert "did you mean 'adagrad'?" in result.error and "Received: 'adagradd'" in result.error
    assert "did you mean 'adagrad'?" in log and "Traceback" not in log, log


def _wait_step(status: Path, at_least: int, proc: subprocess.Popen, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else proc.returncode
        try:
            step = json.loads(status.read_text())["step"]
            if step >= at_least:
                return step
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.05)
    raise AssertionError("training did not reach the step in time")


def test_ctrl_c_on_the_launcher_leaves_no_orphans(tmp_path) -> None:
    import psutil

    job = _job(synthetic_examples=4096, batch_size=32, epochs=200, backup_every=0)
    (tmp_path / "job.json").write_text(job.to_json())
    code = (
        "import sys; from pathlib import Path; from baton.strategies import launcher\n"
        f"d = Path({str(tmp_path)!r})\n"
        "cmd = lambda t: [sys.executable, '-m', 'baton.pipeline.commands.task',"
        " '--job', str(d / 'job.json'),"
        " '--out', str(d / 'out'), '--backup-dir', str(d / 'backup')]\n"
        "launcher.launch(launcher.LaunchConfig(workers=2, state_dir=d / 'state'), cmd)\n"
    )
    # A shell's background job (`make test &`) starts with SIGINT ignored, which the launcher
    # would inherit (Python keeps an ignored SIGINT ignored): Ctrl-C is a foreground key.
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    _wait_step(tmp_path / "state" / "status.json", 8, proc, timeout=90)
    children = psutil.Process(proc.pid).children(recursive=True)
    assert len(children) >= 2
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:  # do not leave the cluster running behind a failure
        proc.kill()
        for child in children:
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()
        raise
    gone, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, f"orphans left behind: {[p.pid for p in alive]}"


def test_jit_compile_and_a_lost_worker_under_multi_worker_mirrored(tmp_path) -> None:
    """XLA compiles forward and backward; the gradient all-reduce stays outside XLA.

    The same run is the elastic case (strategies/elastic.py): worker:1's node is gone for good
    at step 8; with min_workers 1 the job goes on with one worker from the step-8 backup,
    keeping the global batch, and ends at exactly the planned steps.
    """
    job = _job(jit_compile=True, epochs=1, backup_every=4)
    planned = job.settings.epochs * job.steps_per_epoch()
    result, model_dir, log = _launch(tmp_path, "xla", job, workers=2, fault="worker:1@step:8:lost",
                                     min_workers=1, global_batch_size=job.settings.batch_size,
                                     grace_seconds=2.0)
    assert result.ok and result.restarts == 0, (result.events, log[-4000:], _task_logs(tmp_path))
    info = json.loads((model_dir / "train_info.json").read_text())
    assert info["steps"] == info["planned_steps"] == planned
    compiled = info["xla_compiled"]
    assert len(compiled) == 1 and "forward_backward" in compiled[0], compiled
    (event,) = result.elastic
    assert (event["task"], event["workers_before"], event["workers_after"]) == ("worker:1", 2, 1)
    assert event["resumed_from"] == 8 and event["steps_recomputed"] == 0, event
    before, after = result.segments
    assert (before["workers"], before["resumed_from"], after["workers"]) == (2, 0, 1)
    assert after["resumed_from"] == 8 and after["last_step"] == planned, result.segments
    assert before["examples_per_sec"] > 0 and after["examples_per_sec"] > 0, result.segments
    assert info["resumed_from_step"] == 8 and info["num_replicas"] == 1
    assert info["global_batch_size"] == job.settings.batch_size
