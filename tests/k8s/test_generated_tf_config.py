"""The TF_CONFIG every pod of a generated JobSet or TrainJob builds, pinned against the TFJob
operator's for the same flags (issue 37: "the same cluster shape the TFJob operator writes").

tests/strategies/test_jobset_cluster.py pins strategies.jobset_cluster on hand-written
topologies; this test closes the loop from `baton k8s` itself: for every topology and both
targets it generates the manifests, lets each training pod receive what the controllers give it
(JobSet v0.12.0: the labels `jobset.sigs.k8s.io/jobset-name`, `replicatedjob-name`, `job-index`,
`replicatedjob-replicas` through the container's own downward-API references, the Job's
completion index, the host name `<jobset>-<rjob>-<jobIndex>-<podIndex>`; for a TrainJob the
JobSet Trainer's controller creates from it and its runtime), builds its TF_CONFIG as `baton
task` does, and compares it, byte for byte, with the TF_CONFIG the training operator v1.9.0
writes into the pod of the same task of the TFJob `baton k8s --target tfjob` generates from the
same flags, once each TFJob host name is replaced by the JobSet pod holding that task.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from baton.k8s import tfconfig, trainer_controller
from baton.pipeline.cli import main as baton
from baton.strategies import jobset_cluster
from baton.strategies.cluster import TaskId

TOPOLOGIES = {
    "mwm-chief": ["--strategy", "multi_worker_mirrored", "--workers", "4"],
    "mwm-no-chief": ["--strategy", "multi_worker_mirrored", "--workers", "4", "--no-chief"],
    "mwm-evaluator": ["--strategy", "multi_worker_mirrored", "--workers", "2", "--evaluator"],
    "ps": ["--strategy", "parameter_server", "--workers", "3", "--ps", "2"],
    "ps-evaluator": ["--strategy", "parameter_server", "--workers", "2", "--ps", "1", "--evaluator"],
    "one-device": ["--strategy", "one_device"],
}
FIELD = re.compile(r"metadata\.(labels|annotations)\['([^']+)'\]")


def _docs(tmp_path: Path, target: str, flags: list[str]) -> list[dict]:
    out = tmp_path / target
    assert baton(["k8s", "--out", str(out), "--run-id", "r1", "--namespace", "ml",
                  "--target", target, *flags]) == 0
    return [d for f in sorted(out.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]


def _jobset(docs: list[dict]) -> dict:
    """The JobSet the cluster runs: the generated one, or the one Trainer makes of a TrainJob."""
    for d in docs:
        if d["kind"] == "JobSet":
            return d
    [tj] = [d for d in docs if d["kind"] == "TrainJob"]
    return trainer_controller.to_jobset(tj, trainer_controller.find_runtime(tj, docs))


def _resolve(env_list: list[dict], pod_meta: dict) -> dict[str, str]:
    """The container's environment as the kubelet gives it: literal values, and each
    downward-API reference read from the pod's own labels and annotations."""
    env = {}
    for e in env_list:
        if "value" in e:
            env[e["name"]] = str(e["value"])
        elif "fieldRef" in (e.get("valueFrom") or {}):
            m = FIELD.fullmatch(e["valueFrom"]["fieldRef"]["fieldPath"])
            assert m, e
            env[e["name"]] = pod_meta[m.group(1)].get(m.group(2), "")
    return env


def _jobset_pods(js: dict) -> dict[TaskId, tuple[str, str]]:
    """Every training pod of the JobSet: its task -> (its address, the TF_CONFIG it builds)."""
    name = js["metadata"]["name"]
    sub = (js["spec"].get("network") or {}).get("subdomain") or name
    pods: dict[TaskId, tuple[str, str]] = {}
    for rj in js["spec"]["replicatedJobs"]:
        job = rj["template"]["spec"]
        [c] = job["template"]["spec"]["containers"]
        if not any(e["name"] == jobset_cluster.TOPOLOGY_ENV for e in c.get("env") or []):
            continue  # the data and release steps
        assert job["completionMode"] == "Indexed"
        port = next(p["containerPort"] for p in c["ports"] if p["name"] == "tf-grpc")
        for j in range(int(rj.get("replicas", 1))):
            for p in range(int(job["parallelism"])):
                host = f"{name}-{rj['name']}-{j}-{p}"
                meta = {"labels": {jobset_cluster.JOBSET_NAME_LABEL: name,
                                   jobset_cluster.REPLICATED_JOB_LABEL: rj["name"],
                                   jobset_cluster.JOB_INDEX_LABEL: str(j),
                                   jobset_cluster.REPLICAS_LABEL: str(rj.get("replicas", 1))},
                        "annotations": {jobset_cluster.COMPLETION_INDEX_ANNOTATION: str(p)}}
                env = {**_resolve(c["env"], meta), "HOSTNAME": host}
                built = jobset_cluster.from_env(env)
                task = built.tf_config.task
                assert task not in pods, f"{host} and another pod both hold {task}"
                pods[task] = (f"{host}.{sub}:{port}", built.operator_json)
                assert built.tf_config.cluster.address(task) == f"{host}.{sub}:{port}"
    return pods


def _tfjob_pods(docs: list[dict]) -> dict[TaskId, tuple[str, dict[str, list[str]]]]:
    [tf] = [d for d in docs if d["kind"] == "TFJob"]
    cluster = tfconfig.operator_cluster(tf)
    return {tfconfig.task_id(rtype, i): (cluster[rtype.lower()][i], cluster)
            for rtype, rspec in tf["spec"]["tfReplicaSpecs"].items()
            for i in range(int(rspec.get("replicas", 1)))}


@pytest.mark.parametrize("target", ["jobset", "trainjob"])
@pytest.mark.parametrize("name", list(TOPOLOGIES))
def test_each_pods_tf_config_is_the_operators_for_the_same_task_with_jobset_host_names(
        tmp_path, target, name):
    flags = TOPOLOGIES[name]
    jobset_pods = _jobset_pods(_jobset(_docs(tmp_path, target, flags)))
    tfjob_pods = _tfjob_pods(_docs(tmp_path, "tfjob", flags))
    assert set(jobset_pods) == set(tfjob_pods), (sorted(jobset_pods), sorted(tfjob_pods))
    rename = {tf_addr: jobset_pods[task][0] for task, (tf_addr, _) in tfjob_pods.items()}
    for task, (_, cluster) in tfjob_pods.items():
        renamed = {k: [rename[a] for a in v] for k, v in cluster.items()}
        expected = tfconfig.tf_config_json(renamed, task.type, task.index)
        assert jobset_pods[task][1] == expected, (target, name, task)
