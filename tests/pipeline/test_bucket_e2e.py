"""The default pipeline on a bucket: runs directory and push on a real S3 server (SeaweedFS),
`baton serve --model_base_path=s3://...` answering and hot-reloading the next push, `baton
inspect` and `baton rollback` on the bucket from a node that ran nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from baton.pipeline.bucket_run import BucketRun
from baton.pipeline.release import versions as V
from baton.storage import location as L
from baton.storage import objects

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SPEC = ROOT / "pipeline" / "specs" / "penguins.yaml"
pytestmark = [pytest.mark.e2e, pytest.mark.slow]
RECORD = {"island": "Biscoe", "bill_length_mm": 48.6, "bill_depth_mm": 16.0,
          "flipper_length_mm": 230.0, "body_mass_g": 5800.0, "sex": "male", "year": 2008.0}


def baton(cwd: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run([sys.executable, "-m", "baton.pipeline.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def spec_with(tmp_path: Path, name: str, models: str, edit=None) -> Path:
    data = yaml.safe_load(DEFAULT_SPEC.read_text())
    for stage in data["stages"]:
        if stage["type"] == "push":
            stage["config"]["serving_base"] = models
    if edit is not None:
        edit(data)
    out = tmp_path / name
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def test_default_pipeline_on_a_bucket_served_from_the_bucket(s3, tmp_path, monkeypatch):
    from baton.serving.client_demo import ServerProcess

    runs, models = L.join(s3, "runs"), L.join(s3, "models", "penguins")
    res = baton(tmp_path, "run", str(spec_with(tmp_path, "spec.yaml", models)),
                "--runs-dir", runs)
    assert res.returncode == 0, res.stderr[-3000:]
    url = res.stdout.strip().splitlines()[-1]
    assert url.startswith(f"{runs}/penguins/2")
    run = objects.read_json(L.join(url, "run.json"))
    assert [s["status"] for s in run["stages"]] == ["succeeded"] * len(run["stages"])
    assert V.versions(models) == [1]
    assert not (tmp_path / "runs").exists() and not (tmp_path / "models").exists()

    with ServerProcess("penguins", models, ["--file_system_poll_wait_seconds=0.5"]) as server:
        first = server.predict([RECORD])["predictions"][0]
        assert first["classes"] and len(first["probabilities"]) == 3
        # the next push (a retrained model; no check/edge stages, to keep the test short)
        # reaches the running server: downloaded, loaded, warmed, then served
        def retrain(data):
            data["stages"] = [s for s in data["stages"] if s["type"] not in ("check", "edge")]
            for s in data["stages"]:
                if s["type"] == "train":
                    s["config"]["epochs"] = 12
                if s["type"] == "push":
                    s["inputs"] = {"saved_model": "export.saved_model",
                                   "blessing": "evaluate.blessing"}
                    s["config"]["allow_unchecked"] = True

        res = baton(tmp_path, "run", str(spec_with(tmp_path, "spec2.yaml", models, retrain)),
                    "--runs-dir", runs)
        assert res.returncode == 0, res.stderr[-3000:]
        assert "cached (reused" in res.stderr  # ingest .. transform came from the bucket's cache
        assert V.versions(models) == [1, 2]
        deadline = time.monotonic() + 120
        while True:
            with urllib.request.urlopen(server.url, timeout=10) as r:
                served = [v["version"] for v in json.load(r)["model_version_status"]
                          if v["state"] == "AVAILABLE"]
            if served == ["2"]:
                break
            assert time.monotonic() < deadline, f"version 2 was not served: {served}"
            time.sleep(0.2)
        assert server.predict([RECORD])["predictions"][0]["classes"]

    # another node (an empty cache): inspect reads the run from the bucket, rollback works
    monkeypatch.setenv("BATON_CACHE_DIR", str(tmp_path / "another-node"))
    res = baton(tmp_path, "inspect", f"{runs}/penguins")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "push: code" in res.stdout and "report (evaluate): s3://" in res.stdout
    res = baton(tmp_path, "rollback", models)
    assert res.returncode == 0, res.stderr[-3000:]
    assert V.versions(models) == [1] and V.rolled_back(models) == [2]
    # the second run's evaluate compared against the first run's blessed model, from the bucket
    second = BucketRun(f"{runs}/penguins", sorted(
        n for n, d in objects.list_children(f"{runs}/penguins").items()
        if d and not n.startswith("."))[-1])
    blessing = second.fetch_file("evaluate", "blessing/blessing.json")
    assert blessing is not None
    assert json.loads(blessing.read_text())["baseline"]["run_id"] == L.basename(url)
