"""The federated stage on a bucket (`--runs-dir s3://...`, a real S3 server: SeaweedFS): a local
rehearsal's model and rounds are committed by manifest like any stage's output (the stage
writes into the run's local mirror; the runner commits it), and the rehearsal's secrets (the
CA key, the token, the SuperExec secrets, the clients' private keys) never reach the bucket
(issue 38: a federated stage's artifacts on object storage)."""

from __future__ import annotations

import json

import pytest
import yaml

from baton.pipeline.context import RunOptions
from baton.pipeline.plan import plan
from baton.pipeline.runner import run_pipeline
from baton.pipeline.spec import load_spec
from baton.storage import location as L
from baton.storage import objects

pytestmark = [pytest.mark.slow, pytest.mark.multi_worker]


def test_a_federated_run_on_a_bucket_commits_its_model_and_no_secret(s3, tmp_path):
    spec = tmp_path / "fed.yaml"
    spec.write_text(yaml.safe_dump({"pipeline": "fedbucket", "stages": [
        {"name": "ingest", "type": "ingest", "config": {"source": "penguins"}},
        {"name": "fl", "type": "federated", "inputs": {"examples": "ingest.examples"},
         "config": {"clients": 2, "partition": {"iid": True}, "rounds": 1, "min_clients": 2,
                    "round_timeout_s": 120, "model_params": {"hidden_units": [8]}}}]}))
    runs = L.join(s3, "runs")
    res = run_pipeline(plan(load_spec(spec)), RunOptions(quiet=True), runs_dir=runs)
    assert res.ok, res
    assert res.url == L.join(runs, "fedbucket", res.run_id)
    fl = objects.read_json(L.join(res.url, "fl", "lineage.json"))  # the commit
    files = fl["manifest"]  # relative path -> its object, stored by content (bucket_objects)
    assert all(e["key"].startswith(".objects/") for e in files.values()), files
    rounds = json.loads(objects.read_bytes(L.join(
        runs, "fedbucket", files["model/rounds.json"]["key"])))
    assert [r["clients"] for r in rounds] == [["client-0", "client-1"]]
    assert "model/model.keras" in files, sorted(files)
    # the Flower CLI's credentials.yaml holds the Control API token: not in the commit
    assert not [f for f in files if f.endswith("credentials.yaml")
                or f.startswith(("flwr/", "federation/home/", "credentials/"))], sorted(files)
    # nothing secret in the bucket, under any stage (the credentials die with the stage)
    everything = _keys(res.url)
    assert everything, "the listing is empty"
    secret = ("control.token", ".key", ".superexec", "superexec.secret", "ca.key",
              "credentials.yaml")
    assert not [k for k in everything if k.endswith(secret)], everything


def _keys(url: str) -> list[str]:
    out = []
    for name, is_dir in objects.list_children(url).items():
        out += _keys(L.join(url, name)) if is_dir else [L.join(url, name)]
    return out
