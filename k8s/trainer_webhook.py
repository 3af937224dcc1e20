"""Kubeflow Trainer's admission rules (kubeflow/trainer v2.3.0, pkg/webhooks/) and the CEL rules
of its CRDs that a new object can break, in Python; rule `webhook` or `schema`, field named.

* ClusterTrainingRuntime (`clustertrainingruntime_webhook.go` -> validateReplicatedJobs): a
  replicated job labelled `trainer.kubeflow.org/trainjob-ancestor-step` `trainer`,
  `dataset-initializer` or `model-initializer` has `replicas: 1` ("always must be 1") and a
  container named `node`, `dataset-initializer` or `model-initializer` respectively; CEL: at
  most one of `mlPolicy.torch/mpi/jax/xgboost/flux`.
* TrainJob (`trainjob_webhook.go`): CEL: the name is a DNS-1035 label of at most 63
  characters, `managedBy` is Trainer's controller or MultiKueue; the runtime it names must be a
  kind Trainer serves (`unsupported runtime`) and must exist before the TrainJob is created
  (`check_pair`, given the runtime: "specified clusterTrainingRuntime must be created before
  the TrainJob is created"); the JobSet plugin's Validate: an `initializer.dataset` / `model`
  needs the runtime's initializer job, its container and its `initializer` volume mount;
  `runtimePatches` may only name jobs and containers of the runtime and set no env on the
  `node` or initializer containers. `[baton]`: `trainer.numNodes` is at least 1.

`check_pair` then checks the JobSet Trainer's controller would create from the two
(k8s.trainer_controller) against JobSet's schema and webhook and Baton's topology rule.
"""

from __future__ import annotations

import re
from typing import Any

from baton.k8s.errors import Violation

ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
CONTAINERS = {"trainer": "node", "dataset-initializer": "dataset-initializer",
              "model-initializer": "model-initializer"}
POLICIES = ("torch", "mpi", "jax", "xgboost", "flux")
MANAGED_BY = ("trainer.kubeflow.org/trainjob-controller", "kueue.x-k8s.io/multikueue")
RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")
DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
INITIALIZER_VOLUME = "initializer"


def _rjobs(runtime: dict[str, Any]) -> list[dict[str, Any]]:
    spec = ((runtime.get("spec") or {}).get("template") or {}).get("spec") or {}
    return [r for r in spec.get("replicatedJobs") or [] if isinstance(r, dict)]


def _pod(rj: dict[str, Any]) -> dict[str, Any]:
    return (((rj.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec") or {}


def check_runtime(doc: dict[str, Any]) -> list[Violation]:
    out: list[Violation] = []
    base = "spec.template.spec.replicatedJobs"
    for i, rj in enumerate(_rjobs(doc)):
        labels = ((rj.get("template") or {}).get("metadata") or {}).get("labels") or {}
        ancestor = labels.get(ANCESTOR_LABEL)
        if ancestor not in CONTAINERS:
            continue
        if int(rj.get("replicas", 1)) != 1:
            out.append(Violation(f"{base}[{i}].replicas", f"always must be 1 (a {ancestor} job). "
                                 f"Received: {rj.get('replicas')}", "webhook"))
        names = [c.get("name") for c in _pod(rj).get("containers") or [] if isinstance(c, dict)]
        if CONTAINERS[ancestor] not in names:
            out.append(Violation(f"{base}[{i}].template.spec.template.spec.containers",
                                 f"must contain the required container for the ancestor: "
                                 f"{ancestor} (named {CONTAINERS[ancestor]!r}). Received: {names}",
                                 "webhook"))
    policy = (doc.get("spec") or {}).get("mlPolicy") or {}
    set_ = [p for p in POLICIES if p in policy]
    if len(set_) > 1:
        out.append(Violation("spec.mlPolicy", f"Only one of the policy can be configured. "
                             f"Received: {set_}", "schema"))
    return out


def check_trainjob(doc: dict[str, Any]) -> list[Violation]:
    out: list[Violation] = []
    name = (doc.get("metadata") or {}).get("name")
    if not isinstance(name, str) or not DNS1035.match(name):
        out.append(Violation("metadata.name", "metadata.name must match RFC 1035 DNS label "
                             f"format. Received: {name!r}", "schema"))
    elif len(name) > 63:
        out.append(Violation("metadata.name", "metadata.name must be no more than 63 "
                             f"characters. Received: {name!r} ({len(name)})", "schema"))
    spec = doc.get("spec") or {}
    managed = spec.get("managedBy")
    if managed is not None and managed not in MANAGED_BY:
        out.append(Violation("spec.managedBy", f"ManagedBy must be {MANAGED_BY[0]} or "
                             f"{MANAGED_BY[1]} if set. Received: {managed!r}", "schema"))
    ref = spec.get("runtimeRef") or {}
    if ref.get("apiGroup", "trainer.kubeflow.org") != "trainer.kubeflow.org" or ref.get(
            "kind", "ClusterTrainingRuntime") not in RUNTIME_KINDS:
        out.append(Violation("spec.runtimeRef", f"unsupported runtime: "
                             f"{ref.get('kind')}.{ref.get('apiGroup')}", "webhook"))
    nodes = (spec.get("trainer") or {}).get("numNodes")
    if nodes is not None and (not isinstance(nodes, int) or nodes < 1):
        out.append(Violation("spec.trainer.numNodes", f"must be at least 1. Received: {nodes!r}",
                             "baton"))
    return out


def check_pair(trainjob: dict[str, Any], runtime: dict[str, Any] | None) -> list[Violation]:
    """The rules that need the runtime, then the JobSet the controller would create."""
    from baton.k8s import job_rules, jobset_webhook, trainer_controller

    spec = trainjob.get("spec") or {}
    ref = spec.get("runtimeRef") or {}
    if runtime is None:
        return [Violation("spec.runtimeRef", f"specified {ref.get('kind', 'ClusterTrainingRuntime')} "
                          f"{ref.get('name')!r} must be created before the TrainJob is created "
                          "(it is not among these manifests, before the TrainJob)", "webhook")]
    out: list[Violation] = []
    rjobs = {str(r.get("name")): r for r in _rjobs(runtime)}
    init = spec.get("initializer") or {}
    for key, job in (("dataset", "dataset-initializer"), ("model", "model-initializer")):
        if not init.get(key):
            continue
        rj = rjobs.get(job)
        containers = [c for c in _pod(rj).get("containers") or [] if c.get("name") == job] if rj else []
        if rj is None:
            message = f"must have {job} job when trainJob is configured with input {key}Config"
        elif not containers:
            message = f"must have container with name - {job} in the {job} job"
        elif not any(m.get("name") == INITIALIZER_VOLUME for m in containers[0].get("volumeMounts") or []):
            message = f"must have volumeMount with name - {INITIALIZER_VOLUME} in container {job} of the {job} job"
        else:
            continue
        out.append(Violation("spec.runtimeRef", message, "webhook"))
    for i, patch in enumerate(spec.get("runtimePatches") or []):
        pspec = ((((patch or {}).get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec") or {})
        for rj in pspec.get("replicatedJobs") or []:
            if rj.get("name") not in rjobs:
                out.append(Violation(f"spec.runtimePatches[{i}]", "must not have replicated job "
                                     "that doesn't exist in the runtime job template", "webhook"))
                continue
            known = {c.get("name") for c in _pod(rjobs[rj["name"]]).get("containers") or []}
            for c in _pod(rj).get("containers") or []:
                if c.get("name") not in known:
                    out.append(Violation(f"spec.runtimePatches[{i}]", "must not have container "
                                         f"that doesn't exist in the runtime job {rj['name']}", "webhook"))
                elif c.get("env") and c.get("name") in set(CONTAINERS.values()):
                    out.append(Violation(f"spec.runtimePatches[{i}]", "must not have envs for "
                                         "the dataset-initializer, model-initializer, node "
                                         "containers", "webhook"))
    js = trainer_controller.to_jobset(trainjob, runtime)
    where = f"(the JobSet Trainer creates from runtime {ref.get('name')!r}) "
    found = jobset_webhook.check(js) + job_rules.check_topology(js.get("spec"))
    for i, rj in enumerate((js.get("spec") or {}).get("replicatedJobs") or []):
        found += job_rules.check_job_spec((rj.get("template") or {}).get("spec"),
                                          f"spec.replicatedJobs[{i}].template.spec")
    out += [Violation(v.path, where + v.message, v.rule) for v in found]
    return out
