"""The federation `baton k8s --runs-dir s3://...` writes, rehearsed end to end with `baton k8s
emulate` against a real S3 server (SeaweedFS, tests/conftest.py): the data Job commits the
examples to the bucket; the run Job partitions them into silos on the bucket and the plan beside
them; each SuperNode's init container copies only its own silo into its emptyDir; the
ServerApp, in the SuperLink's pod, reads the plan from the bucket and writes the rounds and the
model there; the run Job follows them and commits the stage by manifest. No pod writes a shared
volume, and the TLS/auth Secrets of issue 33 are used as on a volume."""

from __future__ import annotations

import json

import pytest
import yaml

from baton.pipeline.commands.k8s import main as k8s
from baton.storage import location as L
from baton.storage import objects

pytestmark = [pytest.mark.slow, pytest.mark.multi_worker, pytest.mark.e2e]

# round_timeout_s: a loaded 2-core machine spawns each ClientApp (TensorFlow's import) in ~30 s
CONFIG = {"clients": 2, "partition": {"iid": True}, "rounds": 1, "min_clients": 2,
          "round_timeout_s": 300, "batch_size": 32, "model_params": {"hidden_units": [8]}}


def test_the_generated_federation_runs_on_the_bucket(s3, tmp_path, capsys):
    spec = tmp_path / "fed.yaml"
    spec.write_text(yaml.safe_dump({"pipeline": "fedpen", "stages": [
        {"name": "ingest", "type": "ingest", "config": {"source": "penguins"}},
        {"name": "fl", "type": "federated", "inputs": {"examples": "ingest.examples"},
         "config": CONFIG}]}, sort_keys=False))
    runs = L.join(s3, "runs")
    out, work, volume = tmp_path / "m", tmp_path / "work", tmp_path / "volume"
    assert k8s([str(spec), "--out", str(out), "--run-id", "r1", "--namespace", "ml",
                "--runs-dir", runs, "--credentials-secret", "s3-credentials"]) == 0
    assert k8s(["validate", str(out)]) == 0
    capsys.readouterr()
    # the pods' credentials: the Secret's keys are the S3 client's variables, which the
    # emulated pods inherit from this process (the s3 fixture set them)
    assert k8s(["emulate", str(out), "--work-dir", str(work), "--volume-dir", str(volume)]) == 0
    said = capsys.readouterr().out
    assert "every Job succeeded (fedpen-r1-data, fedpen-r1-flwr-run)" in said, said[-3000:]
    status = json.loads((work / "status.json").read_text())
    assert status["problems"] == [], status["problems"]
    assert not [p for p in volume.rglob("*") if p.is_file()], "a pod wrote a shared volume"

    run = L.join(runs, "fedpen", "r1")
    record = objects.read_json(L.join(run, "fl", "lineage.json"))  # the stage's commit
    assert record["status"] == "succeeded" and set(record["outputs"]) == {"model",
                                                                          "transform_graph"}
    files = record["manifest"]  # relative path -> the object holding it
    assert "model/model.keras" in files and any(f.startswith("transform_graph/")
                                                for f in files), sorted(files)
    # no secret in the commit: the Flower CLI's credentials.yaml holds the Control API token
    assert not [f for f in files if f.startswith("flwr/") or f.endswith(
        ("credentials.yaml", ".key", "control.token", "superexec.secret"))], sorted(files)
    rounds = json.loads(objects.read_bytes(L.join(
        runs, "fedpen", files["model/rounds.json"]["key"])))
    assert [r["round"] for r in rounds] == [1]
    assert rounds[0]["clients"] == ["client-0", "client-1"]
    fed = L.join(run, "fl.federation")
    plan = json.loads(objects.read_bytes(L.join(fed, "plan.json")))
    assert plan["out_dir"] == L.join(fed, "server")
    assert objects.exists(L.join(fed, "server", "model", "model.keras"))
    for i in (0, 1):
        node = (work / "logs" / f"fedpen-r1-node-client-{i}-0.log").read_text()
        assert "container pull-data" in node and "copied " in node, node[-2000:]
        assert "served train" in node, node[-2000:]
    link = (work / "logs" / "fedpen-r1-superlink-0.log").read_text()
    assert "Uvicorn running on https://" in link and "--insecure" not in link
    job = (work / "logs" / "fedpen-r1-flwr-run-0.log").read_text()
    assert "registered 2 SuperNode keys (exactly the spec's clients)" in job
    assert f"plan {L.join(fed, 'plan.json')}" in job
    assert "round 1: 2 clients ['client-0', 'client-1']" in job, job[-3000:]
