"""Training backups on a bucket: SIGTERM on one node, the rerun resumes on another.

A run directory on S3 (SeaweedFS): the backup is uploaded after each save (the `checkpoint`
state file last), and a rerun on a node with an empty cache, as a rescheduled pod is, stages
the backup from the bucket and resumes from its step.
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

from baton.pipeline.bucket_run import BucketRun
from baton.storage import location as L
from baton.storage import objects
from tests.pipeline.stages.test_train_preemption import SPEC, STEPS_PER_EPOCH

pytestmark = [pytest.mark.slow, pytest.mark.e2e]
EPOCHS = 10


def _baton(tmp_path: Path, runs: str, node: str, *args: str) -> subprocess.Popen:
    (tmp_path / "spec.yaml").write_text(SPEC.replace("EPOCHS", str(EPOCHS)))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "BATON_CACHE_DIR": str(tmp_path / node)}
    return subprocess.Popen(
        [sys.executable, "-m", "baton.pipeline.cli", "run", str(tmp_path / "spec.yaml"),
         "--runs-dir", runs, *args],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_a_backup_on_the_bucket_resumes_training_on_another_node(s3, tmp_path) -> None:
    runs = L.join(s3, "runs")
    backups = L.join(runs, "preempt", ".backups")
    proc = _baton(tmp_path, runs, "node-1")
    deadline = time.monotonic() + 300
    while not [r for r in objects.list_tree(backups) if r.endswith("/checkpoint")]:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else proc.returncode
        assert time.monotonic() < deadline, "no backup reached the bucket in time"
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 143, out[-4000:]
    (state,) = [r for r in objects.list_tree(backups) if r.endswith("/checkpoint")]
    text = objects.read_bytes(L.join(backups, state)).decode()
    saved = int(text.split('"')[1].split("-")[1])
    assert 0 < saved < EPOCHS * STEPS_PER_EPOCH, text

    rerun = _baton(tmp_path, runs, "node-2")
    out, _ = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, out[-4000:]
    assert "holds a backup: resuming from it" in out, out[-4000:]
    url = out.strip().splitlines()[-1]
    info_file = BucketRun(L.parent(url), L.basename(url)).fetch_file(
        "train", "model/train_info.json")
    info = json.loads(info_file.read_text())
    assert info["resumed_from_step"] == saved
    assert objects.list_tree(backups) == {}, "the backup outlived the finished model"
