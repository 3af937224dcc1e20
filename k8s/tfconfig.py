"""TF_CONFIG exactly as the Kubeflow training operator v1.9.0 writes it into each pod.

The operator (pkg/controller.v1/tensorflow/tensorflow.go, genTFConfigJSONStr) builds a Go struct
`{Cluster map[string][]string; Task {Type, Index}; Environment "cloud"}` and marshals it with
encoding/json: compact separators, and the `cluster` map's keys in sorted order. Every replica
type of the TFJob is a key, lower-cased (`Chief` -> `chief`, `PS` -> `ps`), each address being
`<job>-<type>-<index>.<namespace>.svc:<tfjob-port>`. We reproduce the bytes, not just the
meaning, so a user comparing a pod's environment with the emulator's sees the same string.

A job that is not distributed gets no TF_CONFIG at all: SetClusterSpec returns early unless
isDistributed, i.e. unless the replicas of the Chief, Evaluator, Master, PS and Worker specs
(an unset `replicas` counting 1) add up to something other than 1.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from baton.strategies.cluster import ClusterSpec, TaskId

DEFAULT_PORT = 2222


# The replica types isDistributed counts (pkg/controller.v1/tensorflow/util.go).
COUNTED_TYPES = ("Chief", "Evaluator", "Master", "PS", "Worker")


def is_distributed(tfjob: Mapping) -> bool:
    """The operator's isDistributed: does any pod of this TFJob get TF_CONFIG?"""
    specs = tfjob["spec"]["tfReplicaSpecs"]
    total = 0
    for rtype in COUNTED_TYPES:
        rspec = specs.get(rtype)
        if rspec is not None:
            replicas = rspec.get("replicas")
            total += 1 if replicas is None else int(replicas)
    return total != 1


def replica_port(replica_spec: Mapping) -> int:
    """The `tfjob-port` of the `tensorflow` container, or the operator's default 2222."""
    pod = (replica_spec.get("template") or {}).get("spec") or {}
    for c in pod.get("containers") or []:
        if c.get("name") == "tensorflow":
            for p in c.get("ports") or []:
                if p.get("name") == "tfjob-port":
                    return int(p["containerPort"])
    return DEFAULT_PORT


def host(job: str, rtype: str, index: int, namespace: str) -> str:
    return f"{job}-{rtype.lower()}-{index}.{namespace}.svc"


def operator_cluster(tfjob: Mapping) -> dict[str, list[str]]:
    """`cluster` of TF_CONFIG for a TFJob manifest (addresses in the operator's DNS names)."""
    meta = tfjob["metadata"]
    job, ns = meta["name"], meta.get("namespace") or "default"
    cluster: dict[str, list[str]] = {}
    for rtype, rspec in tfjob["spec"]["tfReplicaSpecs"].items():
        port = replica_port(rspec)
        n = int(rspec.get("replicas", 1))
        cluster[rtype.lower()] = [f"{host(job, rtype, i, ns)}:{port}" for i in range(n)]
    return cluster


def tf_config_json(cluster: Mapping[str, list[str]], task_type: str, index: int) -> str:
    """The operator's bytes: Go encoding/json of {cluster, task, environment}."""
    body = {
        "cluster": {k: list(cluster[k]) for k in sorted(cluster)},
        "task": {"type": task_type.lower(), "index": index},
        "environment": "cloud",
    }
    return json.dumps(body, separators=(",", ":"))


def as_cluster_spec(cluster: Mapping[str, list[str]]) -> ClusterSpec:
    """Check a cluster with strategies' rules (one chief, distinct addresses...)."""
    return ClusterSpec.from_dict(cluster)


def task_id(rtype: str, index: int) -> TaskId:
    kind = "chief" if rtype in ("Chief", "Master") else rtype.lower()
    return TaskId(kind, index)
