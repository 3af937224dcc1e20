"""SIGTERM to `baton run` during training: save, exit 143, and a rerun resumes.

Before: in-process training had no SIGTERM handler (the process died without a backup and left
`.tmp-train-<pid>`), and with a local cluster `baton run` exited 130 after deleting the
pid-named temporary directory that held the backup, so a rerun started from step 0.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
pytestmark = [pytest.mark.slow, pytest.mark.e2e]

# A backup at every epoch end (34 steps); SIGTERM lands after the first. One device runs a step
# in a few ms, so it gets more epochs for the signal to land in; a cluster step takes longer.
EPOCHS = {"in_process": 10, "cluster": 4}
SPEC = """\
pipeline: preempt
stages:
  - name: ingest
    type: ingest
    config: {source: penguins}
  - name: transform
    type: transform
    inputs: {examples: ingest.examples}
  - name: train
    type: train
    inputs: {transformed: transform.transformed, transform_graph: transform.transform_graph}
    config: {epochs: EPOCHS, batch_size: 8, steps_per_execution: 1}
"""
STEPS_PER_EPOCH = 278 // 8


def _baton(tmp_path: Path, epochs: int, *args: str) -> subprocess.Popen:
    (tmp_path / "spec.yaml").write_text(SPEC.replace("EPOCHS", str(epochs)))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.Popen(
        [sys.executable, "-m", "baton.pipeline.cli", "run", str(tmp_path / "spec.yaml"),
         "--runs-dir", str(tmp_path / "runs"), *args],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def _wait_for_backup(proc: subprocess.Popen, backups: Path, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else proc.returncode
        if list(backups.glob("*/checkpoint")):
            return
        time.sleep(0.05)
    raise AssertionError("no backup appeared in time")


def _preempt_then_rerun(tmp_path: Path, epochs: int, *args: str, same_run_id: bool) -> dict:
    import psutil

    planned = epochs * STEPS_PER_EPOCH
    runs = tmp_path / "runs" / "preempt"
    run_id = ("--run-id", "r1") if same_run_id else ()
    proc = _baton(tmp_path, epochs, *args, *run_id)
    _wait_for_backup(proc, runs / ".backups")
    children = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 143, out[-4000:]
    assert "stopped by SIGTERM" in out and "rerun to resume" in out, out[-2000:]
    _, alive = psutil.wait_procs(children, timeout=15)
    assert not alive, f"orphans left behind: {[p.pid for p in alive]}"
    (backup,) = list((runs / ".backups").iterdir())
    index = (backup / "checkpoint").read_text().splitlines()[0]  # model_checkpoint_path: "ckpt-N"
    saved = int(index.split('"')[1].split("-")[1])
    assert 0 < saved < planned, index
    first = next(p for p in runs.iterdir() if not p.name.startswith("."))
    assert not list(first.glob(".tmp-*")), "a temporary stage directory was left behind"
    assert json.loads((first / "run.json").read_text())["status"] == "interrupted"

    rerun = _baton(tmp_path, epochs, *args, *run_id)
    out, _ = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, out[-4000:]
    final = Path(out.strip().splitlines()[-1])
    model = final / "train" / "model"
    info = json.loads((model / "train_info.json").read_text())
    assert f"backups in {backup} (holds a backup: resuming from it)" in out, out[-4000:]
    assert info["resumed_from_step"] == saved, (info["resumed_from_step"], saved, out[-4000:])
    assert info["steps"] >= planned
    history = json.loads((model / "history.json").read_text())
    assert [h["epoch"] for h in history] == list(range(1, epochs + 1))
    import keras

    assert keras.models.load_model(model / "model.keras").count_params() > 0
    assert not list((runs / ".backups").iterdir()), "the backup outlived the finished model"
    return info


def test_sigterm_in_process_training_saves_exits_143_and_same_run_id_resumes(tmp_path) -> None:
    info = _preempt_then_rerun(tmp_path, EPOCHS["in_process"], same_run_id=True)
    assert info["strategy"] == "one_device" and "balance" not in info  # nothing to balance


@pytest.mark.multi_worker
def test_sigterm_local_cluster_saves_exits_143_and_next_run_resumes(tmp_path) -> None:
    """The runner's side (exit 143, the interrupted run record, the kept backup) is the same for
    every cluster; the parameter-server coordinator's own SIGTERM save and resume is tested at
    the launcher (tests/strategies/test_local_clusters.py), without the data stages around it."""
    info = _preempt_then_rerun(tmp_path, EPOCHS["cluster"], "--workers", "2", same_run_id=False)
    assert info["strategy"] == "multi_worker_mirrored" and info["num_replicas"] == 2
    assert info["balance"]["mode"] == "auto"  # multi-worker mirrored's default, resumed too
