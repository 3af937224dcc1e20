"""The default pipeline and examples/own_model/ compiled, loaded back by the kfp SDK and run by
KFP's own local runner (kfp.local, each step a subprocess) to a pushed model:

- the default pipeline on a bucket (a real S3 server, SeaweedFS), its train step training on
  two workers: the JobSet `baton k8s` writes, started by the step and run by Baton's emulator
  of the JobSet controller, its replicas staging their inputs from the bucket and the chief
  committing the stage there, as on a cluster;
- examples/own_model/ (the user's model, loss, optimizer and layer modules shipped inside the
  pipeline) compiled for Vertex AI, its train step's CustomJob run here as processes.

Every other stage of both runs in its own step (`baton run --only STAGE`), as one-process
training does; tests/pipeline/kfp/test_local_runs.py covers that path's mechanics in seconds.
Each test costs minutes (a Python process and a TensorFlow import per step): two keep CI's
budget.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from baton.pipeline.release import versions as V
from baton.storage import location as L
from baton.storage import objects

ROOT = Path(__file__).resolve().parents[3]
pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def baton_kfp(cwd: Path, *args: str, timeout: float = 1500) -> subprocess.CompletedProcess:
    import os

    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run([sys.executable, "-m", "baton.pipeline.cli", "kfp", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.multi_worker  # the JobSet's replicas: a local cluster on 127.0.0.1
def test_default_pipeline_through_kfp_local_on_a_bucket_training_on_a_jobset(s3, tmp_path):
    runs, models = L.join(s3, "runs"), L.join(s3, "models", "penguins")
    out = tmp_path / "penguins.yaml"
    res = baton_kfp(tmp_path, "--out", str(out), "--run-local", "--pipeline-root",
                    str(tmp_path / "root"), "--runs-dir", runs, "--workers", "2",
                    "--strategy", "multi_worker_mirrored", "--param", "run_id=kfp-e2e")
    log = res.stdout + res.stderr
    assert res.returncode == 0, log[-6000:]
    from kfp import components

    assert components.load_component_from_file(str(out)).name == "penguins"  # loads back
    assert "JobSet penguins-kfp-e2e emulated on this machine" in log
    run = L.join(runs, "penguins", "kfp-e2e")
    record = objects.read_json(L.join(run, "run.json"))
    assert record["status"] == "succeeded"
    stages = [s["name"] for s in yaml.safe_load((ROOT / "pipeline" / "specs" /
                                                 "penguins.yaml").read_text())["stages"]]
    assert [s["name"] for s in record["stages"]] == stages
    assert [s["status"] for s in record["stages"]] == ["succeeded"] * len(stages)
    train = objects.read_json(L.join(run, "train", "lineage.json"))
    assert train["status"] == "succeeded"
    from baton.pipeline.bucket_run import BucketRun

    info = BucketRun(L.join(runs, "penguins"), "kfp-e2e").fetch_file("train",
                                                                    "model/train_info.json")
    assert info is not None, sorted(train.get("manifest", {}))[:20]
    cluster = json.loads(info.read_text())["cluster"]  # the JobSet's two replicas trained
    assert len(cluster.get("worker", [])) + len(cluster.get("chief", [])) == 2, cluster
    assert "starting (multi_worker_mirrored)" in log
    assert V.versions(models) == [1]  # models/<pipeline> beside the runs directory
    assert "saved_model.pb" in objects.list_tree(L.join(models, "1"))
    assert not (tmp_path / "runs").exists()  # nothing of the run outside the bucket


@pytest.mark.multi_worker  # the CustomJob's pools: a local cluster on 127.0.0.1
def test_own_model_for_vertex_through_kfp_local_training_on_a_custom_job(s3, tmp_path):
    """examples/own_model/ compiled for Vertex AI, training on two workers: the train step's
    CustomJob runs its pools here with the TF_CONFIG Vertex AI writes, each replica reading
    the spec and the user's modules from the run on the bucket (a CustomJob has no
    ConfigMap)."""
    example = tmp_path / "own_model"
    shutil.copytree(ROOT / "examples" / "own_model", example,
                    ignore=shutil.ignore_patterns("runs", "models", "__pycache__"))
    runs = L.join(s3, "runs")
    res = baton_kfp(tmp_path, str(example / "pipeline.yaml"), "--engine", "vertex",
                    "--run-local", "--pipeline-root", str(tmp_path / "root"), "--runs-dir", runs,
                    "--workers", "2", "--strategy", "multi_worker_mirrored",
                    "--param", "run_id=vertex-e2e")
    log = res.stdout + res.stderr
    assert res.returncode == 0, log[-6000:]
    assert "CustomJob own-model-vertex-e2e-train run on this machine" in log
    run = L.join(runs, "own-model", "vertex-e2e")
    record = objects.read_json(L.join(run, "run.json"))
    assert [s["status"] for s in record["stages"]] == ["succeeded"] * 7
    from baton.pipeline.bucket_run import BucketRun

    info = BucketRun(L.join(runs, "own-model"), "vertex-e2e").fetch_file(
        "train", "model/train_info.json")
    assert info is not None
    cluster = json.loads(info.read_text())["cluster"]
    assert len(cluster.get("chief", [])) == 1 and len(cluster.get("worker", [])) == 1, cluster
    models = L.join(s3, "models", "own-model")
    assert V.versions(models) == [1]
    assert "saved_model.pb" in objects.list_tree(L.join(models, "1"))
