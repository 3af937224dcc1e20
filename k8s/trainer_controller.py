"""What Kubeflow Trainer's controller makes of a TrainJob and its runtime: the JobSet it creates.

A port of the parts of kubeflow/trainer v2.3.0 a plainML runtime goes through
(`pkg/runtime/core/trainingruntime.go` newRuntimeInfo, `plugins/plainml`, `plugins/jobset`
Build / SyncParallelCount and `builder.go` Trainer), used by `baton k8s validate` (the JobSet is
then checked like any other, so a TrainJob whose pods would get names longer than a DNS label is
caught before the cluster sees it) and by `baton k8s emulate` (which runs that JobSet):

* the JobSet is named after the TrainJob, in its namespace, with the runtime template's labels
  and annotations, and its spec is the template's;
* the replicated job labelled `trainer.kubeflow.org/trainjob-ancestor-step: trainer` gets
  `replicas: 1` and a pod count of the TrainJob's `trainer.numNodes` (else the runtime's
  `mlPolicy.numNodes`, else 1); every replicated job's `parallelism` and `completions` become
  its pod count;
* its `node` container takes the TrainJob's `trainer.image`, `command`, `args`, its `env`
  (added or replacing by name) and `resourcesPerNode` (merged over the template's, the
  TrainJob's winning per resource);
* `spec.suspend` follows the TrainJob's.
"""

from __future__ import annotations

import copy
from typing import Any

ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER = "trainer"
NODE = "node"


def _upsert_env(env: list[dict], extra: list[dict]) -> list[dict]:
    out = [e for e in env if e.get("name") not in {x.get("name") for x in extra}]
    return out + [copy.deepcopy(x) for x in extra]


def to_jobset(trainjob: dict[str, Any], runtime: dict[str, Any]) -> dict[str, Any]:
    """The JobSet Trainer's controller would create for `trainjob` from `runtime`."""
    meta = trainjob.get("metadata") or {}
    tj_spec = trainjob.get("spec") or {}
    trainer = tj_spec.get("trainer") or {}
    rt_spec = runtime.get("spec") or {}
    template = rt_spec.get("template") or {}
    spec = copy.deepcopy(template.get("spec") or {})
    policy_nodes = (rt_spec.get("mlPolicy") or {}).get("numNodes")
    for rj in spec.get("replicatedJobs") or []:
        job = rj.setdefault("template", {}).setdefault("spec", {})
        labels = (rj["template"].get("metadata") or {}).get("labels") or {}
        count = job.get("parallelism", 1)
        if labels.get(ANCESTOR_LABEL) == TRAINER:
            rj["replicas"] = 1
            count = trainer.get("numNodes", policy_nodes if policy_nodes is not None else 1)
            pod = job.setdefault("template", {}).setdefault("spec", {})
            for c in pod.get("containers") or []:
                if c.get("name") != NODE:
                    continue
                for key in ("image", "command", "args"):
                    if trainer.get(key) is not None:
                        c[key] = copy.deepcopy(trainer[key])
                if trainer.get("env"):
                    c["env"] = _upsert_env(c.get("env") or [], trainer["env"])
                if trainer.get("resourcesPerNode"):
                    res = c.setdefault("resources", {})
                    for part in ("requests", "limits"):
                        if trainer["resourcesPerNode"].get(part):
                            res[part] = {**(res.get(part) or {}),
                                         **trainer["resourcesPerNode"][part]}
        job["parallelism"] = count
        job["completions"] = count
    if "suspend" in tj_spec:
        spec["suspend"] = tj_spec["suspend"]
    tmeta = template.get("metadata") or {}
    out_meta: dict[str, Any] = {"name": meta.get("name"), "namespace": meta.get("namespace")}
    if tmeta.get("labels"):
        out_meta["labels"] = dict(tmeta["labels"])
    if tmeta.get("annotations"):
        out_meta["annotations"] = dict(tmeta["annotations"])
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": out_meta,
            "spec": spec}


def find_runtime(trainjob: dict[str, Any], docs: list[Any]) -> dict[str, Any] | None:
    """The runtime a TrainJob names, among `docs` (a ClusterTrainingRuntime, or a
    TrainingRuntime in the TrainJob's namespace)."""
    ref = (trainjob.get("spec") or {}).get("runtimeRef") or {}
    kind = ref.get("kind", "ClusterTrainingRuntime")
    ns = (trainjob.get("metadata") or {}).get("namespace")
    for d in docs:
        if not isinstance(d, dict) or d.get("kind") != kind:
            continue
        m = d.get("metadata") or {}
        if m.get("name") == ref.get("name") and (kind == "ClusterTrainingRuntime" or m.get("namespace") == ns):
            return d
    return None
