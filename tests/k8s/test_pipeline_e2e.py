"""The generated directory end to end, for each target (slow): `baton k8s SPEC --out DIR` on a
fresh directory, then `baton k8s emulate DIR` as `kubectl apply -k DIR` would run it: the data
step, the training (worker 0 SIGKILLed once the first backup exists: the target's own policy
re-creates it and the run resumes from the backup), the release step (which reads the train
stage's lineage that `baton task` writes: without it `baton run --only evaluate,...` refused,
issue 37) and the serving Deployment's readiness. The pushed model's weights must equal those
of `baton run SPEC --workers 2 --strategy multi_worker_mirrored` (`balance: off`): the
kill-and-resume lost and repeated no step.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

pytestmark = [pytest.mark.slow, pytest.mark.multi_worker, pytest.mark.timeout(900)]

BATON = str(Path(sys.executable).parent / "baton")
RUN_ID = "e2e"
JOB = f"penguins-{RUN_ID}"
# the pod of TensorFlow's worker 0, by target (a TrainJob's node 0 is the chief)
WORKER_0 = {"jobset": f"{JOB}-worker-0-0", "trainjob": f"{JOB}-node-0-1", "tfjob": f"{JOB}-worker-0"}
TRAIN = {"epochs": 3, "balance": "off"}  # a backup at each epoch's end: killed after the first
SKIPPED = ("statistics", "validate", "check", "edge")


def _spec(path: Path, serving_base: str | None = None) -> Path:
    """The default pipeline less the stages that only cost time here (statistics and validate
    before training; the SavedModel check and the TFLite edge model after, which push takes
    when present: CI runs this four times). Push is told it may go unchecked: here the model
    server's readiness loads and serves the pushed version in a fresh process, which is what
    the check stage would have proved."""
    from baton.pipeline.spec import load_spec

    data = yaml.safe_load(load_spec(None).to_yaml())
    data.pop("cluster", None)
    data["stages"] = [s for s in data["stages"] if s["name"] not in SKIPPED]
    for stage in data["stages"]:
        stage["inputs"] = {k: v for k, v in (stage.get("inputs") or {}).items()
                           if v.split(".")[0] not in SKIPPED}
        if stage["name"] == "train":
            stage["config"].update(TRAIN)
        if stage["name"] == "push":
            stage["config"]["allow_unchecked"] = True
            if serving_base:
                stage["config"]["serving_base"] = serving_base
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The pushed model of the same pipeline run locally with two workers."""
    root = tmp_path_factory.mktemp("local")
    spec = _spec(root / "pipeline.yaml", serving_base=str(root / "models"))
    proc = subprocess.run([BATON, "run", str(spec), "--workers", "2", "--strategy",
                           "multi_worker_mirrored", "--runs-dir", str(root / "runs"), "-q"],
                          capture_output=True, text=True, timeout=850, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root / "models" / "1"


def _weights(version: Path) -> dict:
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(version / "variables" / "variables"))
    return {name: reader.get_tensor(name) for name, _ in tf.train.list_variables(
        str(version / "variables" / "variables")) if "OPTIMIZER_SLOT" not in name}


def _kill_once_backed_up(train_dir: Path, killed: list[str]):
    """on_event: SIGKILL the worker-0 pod's training process once the first backup exists."""
    def kill(pidfd: int) -> None:
        try:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and not (train_dir / "model").exists():
                backup = train_dir / "backup"
                if backup.is_dir() and any(p.suffix == ".index" for p in backup.iterdir()):
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                    killed.append(sorted(p.name for p in backup.iterdir())[-1])
                    return
                time.sleep(0.02)
        finally:
            os.close(pidfd)

    def on_event(kind: str, pod: str, details: dict, target: str) -> None:
        if (kind == "started" and pod == WORKER_0[target] and details.get("attempt") == 0
                and details.get("container") in ("tensorflow", "node")):
            threading.Thread(target=kill, args=(os.pidfd_open(details["pid"]),), daemon=True).start()

    return on_event


@pytest.mark.parametrize("target", ["jobset", "trainjob", "tfjob"])
def test_the_generated_directory_runs_to_a_pushed_model_equal_to_a_local_run(
        tmp_path, reference, target):
    from baton.k8s.emulator.directory import DirOptions, emulate_directory

    spec = _spec(tmp_path / "spec" / "pipeline.yaml")
    out = tmp_path / "manifests"
    proc = subprocess.run([BATON, "k8s", str(spec), "--out", str(out), "--run-id", RUN_ID,
                           "--target", target, "--workers", "2", "--strategy",
                           "multi_worker_mirrored", "--namespace", "ml"],
                          capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    volume, work = tmp_path / "volume", tmp_path / "work"
    train_dir = volume / "runs" / "penguins" / RUN_ID / "train"
    killed: list[str] = []
    on_event = _kill_once_backed_up(train_dir, killed)
    console = io.StringIO()
    rc = emulate_directory(out, DirOptions(
        volume_dir=volume, work_dir=work, grace_seconds=5, stream=console,
        on_event=lambda kind, pod, details: on_event(kind, pod, details, target)))
    said = console.getvalue()
    assert rc == 0, said[-6000:]
    assert killed, f"worker 0 was never killed mid-training:\n{said[-3000:]}"
    # the target's own policy re-created the killed pod; the release step then ran
    assert f"pod {WORKER_0[target]}: exited 137" in said or f"{WORKER_0[target]}: " in said
    if target != "tfjob":
        assert "step release: waiting for" in said and "step release: Job" in said
        assert "Completed (AllJobsCompleted)" in said
    info = json.loads((train_dir / "model" / "train_info.json").read_text())
    assert info["num_replicas"] == 2 and info["steps"] == info["planned_steps"]
    assert info["resumed_from_step"] > 0  # the restarted group resumed from the backup
    lineage = json.loads((train_dir / "lineage.json").read_text())
    assert lineage["status"] == "succeeded" and lineage["outputs"]["model"]["hash"]
    pushed = volume / "models" / "penguins" / "1"
    assert (pushed / "saved_model.pb").is_file()
    assert "Ready:" in said and "/v1/models/penguins -> 200" in said  # the server loaded it
    mine, theirs = _weights(pushed), _weights(reference)
    assert mine.keys() == theirs.keys() and mine
    differ = {name: _max_diff(mine[name], theirs[name]) for name in mine
              if not np.array_equal(mine[name], theirs[name])}
    assert not differ, differ  # no step lost or repeated: the very same weights


def _max_diff(a, b) -> object:
    a, b = np.asarray(a), np.asarray(b)
    return float(np.max(np.abs(a.astype(float) - b.astype(float)))) if a.dtype.kind in "fiu" else "differs"
