"""Distributed training from a pipeline step: the training object a step creates and waits on
(through the official kubernetes client, its HTTP layer answering as an API server would), and
the Vertex AI CustomJob a step creates (its worker pools, and the TF_CONFIG Vertex AI gives
each replica, read by `baton task`'s own parser)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from baton.pipeline.kfp import compile as K
from baton.pipeline.kfp import k8s_wait, launch, vertex
from baton.pipeline.spec import load_spec

ROOT = Path(__file__).resolve().parents[3]
DEFAULT = ROOT / "pipeline" / "specs" / "penguins.yaml"


class _Reply:
    def __init__(self, status: int, data: dict) -> None:
        self.status, self.data = status, json.dumps(data).encode()
        self.reason = {200: "OK", 201: "Created", 403: "Forbidden", 404: "Not Found",
                       409: "Conflict", 503: "Service Unavailable"}.get(status, "")
        self.headers = {"content-type": "application/json"}

    def getheaders(self) -> dict:
        return self.headers

    def getheader(self, name: str, default=None):
        return self.headers.get(name, default)


class FakeApiServer:
    """A real kubernetes ApiClient whose REST layer answers from `objects` (what was created)
    and a script of status conditions for the training object, recording every request."""

    def __init__(self, conditions: list[list[dict]], exists: set[str] = frozenset(),
                 outages: int = 0, forbid: bool = False) -> None:
        from kubernetes import client
        from kubernetes.client import rest

        self.conditions, self.exists, self.outages, self.forbid = conditions, set(exists), \
            outages, forbid
        self.sent: list[tuple[str, str]] = []
        self.api = client.ApiClient(client.Configuration(host="https://cluster.example:6443"))
        self.api.rest_client.request = self.request
        self._rest = rest

    def request(self, method, url, headers=None, body=None, post_params=None,
                _request_timeout=None, **_):
        path = url.split("6443", 1)[1].split("?")[0]
        self.sent.append((method, path))
        kind = path.rstrip("/").split("/")[-1 if method == "POST" else -2]
        if self.forbid and method == "POST":
            status, data = 403, {"kind": "Status", "message": f"{kind} is forbidden: User "
                                 "system:serviceaccount:ml:pipeline-runner cannot create"}
        elif method == "POST":
            status, data = (409, {"message": "already exists"}) if kind in self.exists \
                else (201, body)
        elif method == "GET":
            if self.outages:
                self.outages -= 1
                status, data = 503, {"message": "etcd leader changed"}
            else:
                conds = self.conditions.pop(0) if len(self.conditions) > 1 else self.conditions[0]
                status, data = 200, {"status": {"conditions": conds}}
        else:  # PUT (a ConfigMap replaced), DELETE
            status, data = 200, body or {}
        reply = self._rest.RESTResponse(_Reply(status, data))
        if not 200 <= status <= 299:  # as the client's own REST layer does
            raise self._rest.ApiException(http_resp=reply)
        return reply


def _docs(workers: int = 2, strategy: str = "multi_worker_mirrored",
          target: str = "tfjob") -> list[dict]:
    options = K.KfpOptions(pipeline_root="s3://bkt/root", workers=workers, strategy=strategy,
                           namespace="ml", target=target)
    spec = load_spec(DEFAULT)
    from baton.pipeline.plan import plan

    launches = launch.plan(spec, plan(spec), options, None)
    return launch.documents(launches["train"], spec, "train", "r-1", "s3://bkt/runs")


def _cond(kind: str, status: str = "True", message: str = "") -> dict:
    return {"type": kind, "status": status, "reason": kind, "message": message}


@pytest.mark.parametrize("target, kind, url, done", [
    ("tfjob", "TFJob", "/apis/kubeflow.org/v1/namespaces/ml/tfjobs", "Succeeded"),
    ("jobset", "JobSet", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ml/jobsets", "Completed"),
    ("trainjob", "TrainJob", "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ml/trainjobs",
     "Complete"),
])
def test_the_step_creates_the_object_and_returns_when_it_succeeds(capsys, target, kind, url,
                                                                  done):
    docs = _docs(target=target)
    assert [d["kind"] for d in docs][-1] == kind
    server = FakeApiServer([[], [_cond("Created")], [_cond("Created"), _cond("Running")],
                            [_cond("Created"), _cond("Running", "False"), _cond(done)]])
    rc, lines = k8s_wait.run(docs, launch.CONDITIONS, server.api, poll_s=0, sleep=lambda s: None)
    assert rc == 0, lines
    posts = [p for m, p in server.sent if m == "POST"]
    assert posts[-1] == url
    assert "/api/v1/namespaces/ml/configmaps" in posts  # the spec's ConfigMap, first
    assert "/apis/networking.k8s.io/v1/namespaces/ml/networkpolicies" in posts
    if target == "trainjob":  # its runtime, cluster-scoped
        assert "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes" in posts
    name = docs[-1]["metadata"]["name"]
    assert any(f"{kind}/{name}: Running=True" in line for line in lines)
    assert any(f"{kind}/{name}: {done}=True" in line for line in lines)
    assert "baton kfp: created" in capsys.readouterr().out  # said in the step's log


def test_a_failed_object_fails_the_step_with_the_operators_message():
    server = FakeApiServer([[_cond("Running")], [_cond("Failed", message="TFJob tf-x has "
                                                       "failed because 1 Worker replica(s) failed")]])
    rc, lines = k8s_wait.run(_docs(), launch.CONDITIONS, server.api, poll_s=0,
                             sleep=lambda s: None)
    assert rc == 1
    assert "1 Worker replica(s) failed" in lines[-1] and lines[-1].startswith("error:")


def test_a_retried_step_adopts_the_object_an_earlier_attempt_started():
    server = FakeApiServer([[_cond("Succeeded")]], exists={"tfjobs", "configmaps"})
    rc, lines = k8s_wait.run(_docs(), launch.CONDITIONS, server.api, poll_s=0,
                             sleep=lambda s: None)
    assert rc == 0, lines
    assert any("exists (an earlier attempt of this step started it)" in line for line in lines)
    assert ("PUT", next(p for m, p in server.sent if m == "PUT")) in server.sent
    assert any(re.search(r"replaced ConfigMap", line) for line in lines)
    assert [m for m, p in server.sent if "tfjobs" in p] == ["POST", "GET"]  # not created twice


def test_an_api_server_outage_is_waited_out_then_retryable():
    server = FakeApiServer([[_cond("Succeeded")]], outages=2)
    rc, lines = k8s_wait.run(_docs(), launch.CONDITIONS, server.api, poll_s=0,
                             sleep=lambda s: None)
    assert rc == 0 and any("not answering (503" in line for line in lines)
    clock = iter(range(0, 10_000, 100))
    server = FakeApiServer([[_cond("Succeeded")]], outages=100)
    rc, lines = k8s_wait.run(_docs(), launch.CONDITIONS, server.api, poll_s=0,
                             sleep=lambda s: None, clock=lambda: float(next(clock)))
    assert rc == k8s_wait.EXIT_LOST >= 128  # retryable: KFP's retry adopts the object
    assert "has not answered for 300s" in lines[-1]


def test_a_stopped_step_deletes_its_training_object():
    """The run cancelled (KFP deletes the step's pod: SIGTERM): the object and its pods go too,
    and the step exits 143."""
    import os
    import signal

    server = FakeApiServer([[_cond("Running")]])
    polls = []

    def sleep(_seconds: float) -> None:
        polls.append(1)
        if len(polls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # handled by the step: no exit yet

    before = signal.getsignal(signal.SIGTERM)
    rc, lines = k8s_wait.run(_docs(), launch.CONDITIONS, server.api, poll_s=0, sleep=sleep)
    assert rc == k8s_wait.EXIT_STOPPED == 143
    name = _docs()[-1]["metadata"]["name"]
    assert ("DELETE", f"/apis/kubeflow.org/v1/namespaces/ml/tfjobs/{name}") in server.sent
    assert "deleted TFJob" in lines[-1]
    assert signal.getsignal(signal.SIGTERM) is before  # the step's own handler restored


def test_a_refusal_is_permanent_naming_the_api_servers_words():
    server = FakeApiServer([[]], forbid=True)
    rc, lines = k8s_wait.run(_docs(), launch.CONDITIONS, server.api, poll_s=0,
                             sleep=lambda s: None)
    assert rc == 1 and "403" in lines[-1] and "cannot create" in lines[-1]


@pytest.mark.parametrize("strategy, workers, ps, pools", [
    ("multi_worker_mirrored", 3, None, [("chief", 1), ("worker", 2)]),
    ("parameter_server", 2, 1, [("chief", 1), ("worker", 2), ("ps", 1)]),
])
def test_vertex_custom_job_pools_and_the_tf_config_each_replica_gets(strategy, workers, ps, pools):
    from baton.strategies.cluster import TFConfig

    options = K.KfpOptions(engine="vertex", pipeline_root="gs://bkt/root", workers=workers,
                           ps=ps, strategy=strategy, vertex_machine_type="n1-highmem-8")
    spec = load_spec(DEFAULT)
    from baton.pipeline.plan import plan

    the_launch = launch.plan(spec, plan(spec), options, None)["train"]
    body = vertex.custom_job(the_launch, spec, "train", "r-1", "gs://bkt/runs")
    specs = body["jobSpec"]["workerPoolSpecs"]
    assert [(vertex.POOLS[i], int(s["replicaCount"])) for i, s in enumerate(specs)] == pools
    container = specs[0]["containerSpec"]
    run = "gs://bkt/runs/penguins/r-1"
    assert container["args"] == ["task", f"{run}/.kfp/spec/penguins.yaml", "--stage", "train",
                                 "--run-dir", run]
    assert specs[0]["machineSpec"] == {"machineType": "n1-highmem-8"}
    assert body["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"].startswith(run)
    addresses = {task: [f"{task}-{i}:2222" for i in range(n)] for task, n in pools}
    for task, n in pools:
        for index in range(n):
            parsed = TFConfig.from_json(vertex.tf_config(body, addresses, task, index))
            assert (parsed.task.type, parsed.task.index) == (task, index)
            assert parsed.environment == "cloud" and parsed.is_chief == (task == "chief")


def test_vertex_without_a_machine_type_is_refused_naming_the_flag(tmp_path, capsys):
    from baton.pipeline.cli import main

    out = tmp_path / "v.yaml"
    assert main(["kfp", "--out", str(out), "--engine", "vertex", "--pipeline-root",
                 "gs://bkt/root", "--workers", "2", "--vertex-machine-type", ""]) == 2
    assert "--vertex-machine-type: required" in capsys.readouterr().err
    assert not out.exists()


def _pools_body(script: str, pools: list[tuple[str, int]]) -> dict:
    """A CustomJob body whose replicas run `script` with this Python."""
    import sys

    return {"displayName": "test-job", "jobSpec": {"workerPoolSpecs": [
        {"replicaCount": str(n), "machineSpec": {"machineType": "n1-standard-4"},
         "containerSpec": {"imageUri": "baton", "command": [sys.executable],
                           "args": ["-c", script], "env": [{"name": "X_POOL", "value": task}]}}
        for task, n in pools]}}


def test_vertex_pools_run_here_with_vertexs_tf_config(tmp_path):
    """kfp.local has no Vertex AI: the pools run as processes, each with the TF_CONFIG Vertex
    AI would write; the job succeeds when the chief exits 0, and the parameter server (which
    never exits on its own) is stopped then."""
    from baton.pipeline.kfp.vertex_local import run_pools
    from baton.strategies.cluster import TFConfig

    script = f"""
import json, os, pathlib, sys, time
c = json.loads(os.environ["TF_CONFIG"]); t = c["task"]
out = pathlib.Path({str(tmp_path)!r})
(out / f"{{t['type']}}-{{t['index']}}.json").write_text(os.environ["TF_CONFIG"])
if t["type"] == "ps":
    time.sleep(600)
if t["type"] == "chief":
    while len(list(out.glob("*.json"))) < 4:
        time.sleep(0.05)
"""
    rc, _ = run_pools(_pools_body(script, [("chief", 1), ("worker", 2), ("ps", 1)]))
    assert rc == 0
    configs = {p.stem: TFConfig.from_json(p.read_text()) for p in tmp_path.glob("*.json")}
    assert set(configs) == {"chief-0", "worker-0", "worker-1", "ps-0"}
    cluster = configs["chief-0"].cluster.as_dict()
    assert {k: len(v) for k, v in cluster.items() if v} == {"chief": 1, "worker": 2, "ps": 1}
    assert all(c.cluster.as_dict() == cluster and c.environment == "cloud"
               for c in configs.values())


def test_vertex_pools_fail_when_a_replica_fails(tmp_path):
    from baton.pipeline.kfp.vertex_local import run_pools

    script = """
import json, os, sys, time
t = json.loads(os.environ["TF_CONFIG"])["task"]
if t["type"] == "worker":
    print("worker: out of memory (the test's failure)", flush=True)
    sys.exit(3)
time.sleep(600)
"""
    rc, tail = run_pools(_pools_body(script, [("chief", 1), ("worker", 1)]))
    assert rc == 1
    assert any("out of memory (the test's failure)" in line for line in tail)


def test_a_replica_without_a_configmap_reads_its_spec_and_modules_from_the_bucket(s3, tmp_path,
                                                                                caplog):
    """A Vertex AI worker pool has no ConfigMap: `baton task gs://<run>/.kfp/spec/<spec>`
    copies the spec with the modules beside it (as the plan step wrote them) to the node."""
    from baton.pipeline.commands import task
    from baton.pipeline.training.bucket_task import fetch_spec
    from baton.storage import location as L
    from baton.storage import objects

    where = L.join(s3, "runs", "own-model", "r-1", ".kfp", "spec")
    files = {"pipeline.yaml": (ROOT / "examples" / "own_model" / "pipeline.yaml").read_text(),
             "penguin_model.py": "def build(spec):\n    return None\n",
             "lib/helpers.py": "X = 1\n"}
    for rel, text in files.items():
        objects.write_bytes(L.join(where, rel), text.encode())
    spec = fetch_spec(L.join(where, "pipeline.yaml"), tmp_path / "node")
    assert spec == tmp_path / "node" / "pipeline.yaml"
    assert {p.relative_to(spec.parent).as_posix(): p.read_text()
            for p in spec.parent.rglob("*") if p.is_file()} == files
    # no spec there: baton task says so, naming it, exit 1 (permanent) and nothing run
    missing = L.join(s3, "runs", "own-model", "r-2", ".kfp", "spec", "pipeline.yaml")
    assert task.main([missing, "--stage", "train", "--run-dir",
                      L.join(s3, "runs", "own-model", "r-2")]) == 1
    assert f"SPEC: no spec at {missing}" in caplog.text  # baton task's log line
