"""End to end: generated TFJobs emulated with real TensorFlow replicas (slow, multi-process).

HOOK for the lead: `EMULATED_COMMAND` replaces the container's command+args. Set it to None once
`baton task` exists, and the emulator runs the generated `baton task SPEC --stage train
--run-dir DIR` as written (then also pre-create the run dir's upstream outputs, which the
`wait-for-inputs` init container waits for, or generate with train_inputs=()).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from k8s.emulator import Emulator, EmulatorOptions
from k8s.tfjob import build_tfjob

from .conftest import make_options

TRAIN_TASK = str(Path(__file__).with_name("train_task.py"))
EMULATED_COMMAND: list[str] | None = [sys.executable, TRAIN_TASK, "/artifacts/out", "40"]

pytestmark = [pytest.mark.slow, pytest.mark.multi_worker, pytest.mark.timeout(120)]


def _emulate(tmp_path: Path, job: dict, on_event=None) -> tuple[int, Emulator]:
    em = Emulator(job, EmulatorOptions(
        volume_dir=tmp_path / "vol", work_dir=tmp_path / "work", command=EMULATED_COMMAND,
        on_event=on_event, stream=sys.stdout, grace_seconds=5,
    ))
    return em.run(), em


def test_two_worker_tfjob_survives_a_sigkilled_replica(tmp_path):
    job = build_tfjob(make_options("multi_worker_mirrored", 2, train_inputs=(), spec_text=None))
    ckpt_dir = tmp_path / "vol" / "out" / "ckpt"
    killed: list[int] = []

    def kill_worker_mid_training(pid: int) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # wait for a checkpoint at step >= 10: training is on
            if ckpt_dir.is_dir() and any(p.name.startswith("ckpt-1") for p in ckpt_dir.iterdir()):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                return
            time.sleep(0.05)

    def on_event(kind: str, pod: str, details: dict) -> None:
        if kind == "started" and pod.endswith("-worker-0") and details["attempt"] == 0:
            threading.Thread(target=kill_worker_mid_training, args=(details["pid"],), daemon=True).start()

    rc, em = _emulate(tmp_path, job, on_event)
    assert killed, "the worker was never killed"
    assert rc == 0, em.status()
    worker = em.pods[f"{job['metadata']['name']}-worker-0"]
    assert worker.exit_codes[0] == 137 and worker.restarts >= 1
    assert em.history[0] == "Created" and "Restarting" in em.history and em.history[-1] == "Succeeded"
    result = json.loads((tmp_path / "vol" / "out" / "result.json").read_text())
    assert result["step"] == 40 and result["loss"] < 0.1
    assert json.loads(result["operator_tf_config"])["task"] == {"type": "chief", "index": 0}


def test_parameter_server_tfjob_succeeds_and_ps_is_cleaned_up(tmp_path):
    job = build_tfjob(make_options("parameter_server", 2, 1, train_inputs=(), spec_text=None))
    pids: list[int] = []
    rc, em = _emulate(tmp_path, job, lambda kind, pod, d: pids.append(d["pid"]) if kind == "started" else None)
    assert rc == 0, em.status()
    result = json.loads((tmp_path / "vol" / "out" / "result.json").read_text())
    assert result["step"] == 40
    for pid in pids:  # workers and PS never exit by themselves: cleanPodPolicy stopped them
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
