"""The training operator's admission-webhook rules for TFJobs, which the CRD schema cannot express.

Kubeflow training operator v1.9.0 (`pkg/webhooks/tensorflow/tfjob_webhook.go`) rejects a TFJob
whose name is not a DNS-1035 label, a replica spec without containers, a container without an
image, a replica spec without a container named `tensorflow`, and more than one Chief/Master.
Rules marked `baton` are what the operator enforces at reconcile time instead (unknown replica
types and restart policies), or what would make the job unrunnable (a port it cannot inject).
"""

from __future__ import annotations

import re
from typing import Any

from baton.k8s.errors import Violation

DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
REPLICA_TYPES = ("Chief", "Master", "Worker", "PS", "Evaluator")
RESTART_POLICIES = ("Always", "OnFailure", "Never", "ExitCode")
CLEAN_POD_POLICIES = ("None", "Running", "All")
SUCCESS_POLICIES = ("", "AllWorkers")


def _mapping(parent: dict[Any, Any], key: str) -> dict[Any, Any]:
    """`parent[key]` when it is a mapping, else an empty one."""
    value = parent.get(key)
    return value if isinstance(value, dict) else {}


def check_tfjob(doc: Any) -> list[Violation]:
    """Every webhook (and baton) rule violated by a TFJob document; [] when it is admissible."""
    out: list[Violation] = []
    if not isinstance(doc, dict):
        return [Violation("", f"a TFJob must be a mapping. Received: {type(doc).__name__}", "webhook")]

    def bad(path: str, message: str, rule: str = "webhook") -> None:
        out.append(Violation(path, message, rule))

    meta = _mapping(doc, "metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not DNS1035.match(name) or len(name) > 63:
        bad("metadata.name", "must be a DNS-1035 label (lower case, starts with a letter, "
            f"at most 63 characters). Received: {name!r}")
    spec = _mapping(doc, "spec")
    replicas = spec.get("tfReplicaSpecs")
    if not isinstance(replicas, dict) or not replicas:
        bad("spec.tfReplicaSpecs", f"must hold at least one replica spec. Received: {replicas!r}")
        return out
    chiefs = 0
    for rtype, rspec in replicas.items():
        base = f"spec.tfReplicaSpecs.{rtype}"
        if rtype not in REPLICA_TYPES:
            bad(base, f"unknown replica type {rtype!r}; the operator knows "
                f"{', '.join(REPLICA_TYPES)} (case-sensitive)", "baton")
        if not isinstance(rspec, dict):
            bad(base, f"must be a replica spec mapping. Received: {rspec!r}")
            continue
        count = rspec.get("replicas", 1)
        if isinstance(count, int) and count < 0:
            bad(f"{base}.replicas", f"must be >= 0. Received: {count}", "baton")
        if rtype in ("Chief", "Master"):
            chiefs += count if isinstance(count, int) else 1
            if isinstance(count, int) and count > 1:
                bad(f"{base}.replicas", f"a {rtype} must have at most 1 replica. Received: {count}")
        policy = rspec.get("restartPolicy")
        if policy is not None and policy not in RESTART_POLICIES:
            bad(f"{base}.restartPolicy", f"must be one of {', '.join(RESTART_POLICIES)}. "
                f"Received: {policy!r}", "baton")
        tmpl = _mapping(rspec, "template")
        pod = _mapping(tmpl, "spec")
        containers = pod.get("containers")
        if not isinstance(containers, list) or not containers:
            bad(f"{base}.template.spec.containers", "must have at least one container. "
                f"Received: {containers!r}")
            continue
        names = []
        for i, c in enumerate(containers):
            if not isinstance(c, dict):
                continue
            names.append(c.get("name"))
            if not c.get("image"):
                bad(f"{base}.template.spec.containers[{i}].image",
                    f"every container needs an image. Received: {c.get('image')!r}")
        if "tensorflow" not in names:
            bad(f"{base}.template.spec.containers", "needs a container named 'tensorflow'. "
                f"Received names: {names}")
        else:
            tf = containers[names.index("tensorflow")]
            for j, p in enumerate(tf.get("ports") or []):
                if isinstance(p, dict) and p.get("name") == "tfjob-port":
                    port = p.get("containerPort")
                    if not isinstance(port, int) or not 0 < port < 65536:
                        bad(f"{base}.template.spec.containers[{names.index('tensorflow')}].ports[{j}].containerPort",
                            f"tfjob-port must be a TCP port 1-65535. Received: {port!r}", "baton")
    if chiefs > 1:
        bad("spec.tfReplicaSpecs", f"at most one Chief or Master replica is allowed. Received: {chiefs}")
    run_policy = _mapping(spec, "runPolicy")
    cpp = run_policy.get("cleanPodPolicy")
    if cpp is not None and cpp not in CLEAN_POD_POLICIES:
        bad("spec.runPolicy.cleanPodPolicy", f"must be one of {', '.join(CLEAN_POD_POLICIES)}. "
            f"Received: {cpp!r}", "baton")
    for key in ("backoffLimit", "ttlSecondsAfterFinished"):
        value = run_policy.get(key)
        if isinstance(value, int) and value < 0:
            bad(f"spec.runPolicy.{key}", f"must be >= 0. Received: {value}", "baton")
    deadline = run_policy.get("activeDeadlineSeconds")
    if isinstance(deadline, int) and deadline <= 0:
        bad("spec.runPolicy.activeDeadlineSeconds", f"must be a positive integer. Received: {deadline}", "baton")
    sp = spec.get("successPolicy")
    if sp is not None and sp not in SUCCESS_POLICIES:
        bad("spec.successPolicy", f"must be '' or 'AllWorkers'. Received: {sp!r}", "baton")
    return out
