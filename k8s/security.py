"""Pods that let no one in: the restricted Pod Security Standard on every pod Baton writes.

`harden` walks every pod template of every manifest (Deployments, Jobs, TFJob replicas, JobSet
and TrainJob-runtime replicated jobs) and gives it what the Kubernetes Pod Security Standard
`restricted` asks (https://kubernetes.io/docs/concepts/security/pod-security-standards/), and
a little more:

* pod: `runAsNonRoot`, uid/gid 1000 (the image's user, Dockerfile) and `fsGroup` (the claim is
  writable for it), `seccompProfile: RuntimeDefault`; `automountServiceAccountToken: false`:
  no Baton pod calls the Kubernetes API (the steps are ordered by controllers, not by pods
  watching objects), so none gets a token and none needs a Role;
* every container, init containers included: its `imagePullPolicy` (`Always` for a tag,
  `IfNotPresent` for a digest: options.pull_policy), `allowPrivilegeEscalation: false`, all
  capabilities dropped, not privileged, `readOnlyRootFilesystem: true`; what a process must
  write goes to volumes: `/tmp` is an emptyDir in every pod (TensorFlow, Beam and Python write
  temporary files there; `HOME` and `TMPDIR` point at it, so Keras' config directory and
  `tempfile` land there too), the artifacts claim, and the Flower pods' `FLWR_HOME` emptyDir.

`check` is the same rules as `baton k8s validate` applies them to any manifest, hand-edited
ones included, each violation naming its field: rule `pss` for the restricted standard (what a
namespace labelled `pod-security.kubernetes.io/enforce: restricted`, which `baton k8s` writes,
would refuse), rule `security` for Baton's own (read-only root, no token, pinned images).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from baton.k8s.errors import ManifestError, Violation
from baton.k8s.options import pull_policy
from baton.k8s.pods import SECURITY_CONTEXT

CONTAINER_SECURITY = {
    "runAsNonRoot": True,
    "allowPrivilegeEscalation": False,
    "privileged": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}
TMP = "/tmp"
TMP_VOLUME = "tmp"
# the restricted standard's volume types
ALLOWED_VOLUMES = ("configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                   "persistentVolumeClaim", "projected", "secret")
ENFORCE_LABELS = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "v1.30",
    "pod-security.kubernetes.io/warn": "restricted",
    "pod-security.kubernetes.io/audit": "restricted",
}


def pod_templates(doc: Any) -> Iterator[tuple[str, dict]]:
    """(JSON path, pod template: `metadata` and `spec`) of every pod a manifest makes, whatever
    its kind (a Pod is its own template)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("spec"), dict):
        return
    kind, spec = doc.get("kind"), doc["spec"]

    def tmpl(node: Any, path: str) -> Iterator[tuple[str, dict]]:
        if isinstance(node, dict) and isinstance(node.get("spec"), dict):
            yield path, node

    if kind in ("Deployment", "Job", "StatefulSet", "DaemonSet", "ReplicaSet"):
        yield from tmpl(spec.get("template"), "spec.template")
    elif kind == "Pod":
        yield "", doc
    elif kind == "TFJob":
        for rtype, rspec in (spec.get("tfReplicaSpecs") or {}).items():
            if isinstance(rspec, dict):
                yield from tmpl(rspec.get("template"), f"spec.tfReplicaSpecs.{rtype}.template")
    elif kind in ("JobSet", "ClusterTrainingRuntime", "TrainingRuntime"):
        js = spec if kind == "JobSet" else ((spec.get("template") or {}).get("spec") or {})
        base = "spec" if kind == "JobSet" else "spec.template.spec"
        for i, rj in enumerate(js.get("replicatedJobs") or []):
            job = ((rj or {}).get("template") or {}).get("spec") if isinstance(rj, dict) else None
            if isinstance(job, dict):
                yield from tmpl(job.get("template"), f"{base}.replicatedJobs[{i}].template.spec.template")


def pod_specs(doc: Any) -> Iterator[tuple[str, dict]]:
    """(JSON path, pod spec) of every pod template in a manifest."""
    for path, template in pod_templates(doc):
        yield (f"{path}.spec" if path else "spec"), template["spec"]


def _containers(pod: dict) -> Iterator[tuple[str, dict]]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for i, c in enumerate(pod.get(key) or []):
            if isinstance(c, dict):
                yield f"{key}[{i}]", c


def harden_pod(pod: dict) -> None:
    """Give one pod spec the restricted standard, a read-only root and a writable /tmp."""
    pod["securityContext"] = {**(pod.get("securityContext") or {}), **SECURITY_CONTEXT}
    pod["automountServiceAccountToken"] = False
    volumes = pod.setdefault("volumes", [])
    if not any(v.get("name") == TMP_VOLUME for v in volumes):
        volumes.append({"name": TMP_VOLUME, "emptyDir": {}})
    for _, c in _containers(pod):
        if isinstance(c.get("image"), str):
            c["imagePullPolicy"] = pull_policy(c["image"])
        c["securityContext"] = {**(c.get("securityContext") or {}), **CONTAINER_SECURITY}
        mounts = c.setdefault("volumeMounts", [])
        if not any(m.get("mountPath") == TMP for m in mounts):
            mounts.append({"name": TMP_VOLUME, "mountPath": TMP})
        env = c.setdefault("env", [])
        names = {e.get("name") for e in env}
        env += [{"name": k, "value": TMP} for k in ("HOME", "TMPDIR") if k not in names]


def harden(doc: Any) -> Any:
    """Every pod template of `doc` hardened in place; returns `doc`."""
    for _, pod in pod_specs(doc):
        harden_pod(pod)
    return doc


def _pinned(image: Any) -> str | None:
    from baton.k8s.options import check_image

    try:
        check_image("image", image)
    except ManifestError as exc:
        return str(exc).split(": ", 1)[1]
    return None


def check_pod(pod: dict, path: str) -> list[Violation]:
    """Every restricted-standard (`pss`) and Baton (`security`) rule one pod spec breaks."""
    out: list[Violation] = []

    def bad(where: str, message: str, rule: str = "pss") -> None:
        out.append(Violation(f"{path}.{where}", message, rule))

    psc = pod.get("securityContext") or {}
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            bad(key, f"must not be true (pods share no host namespace). Received: {pod[key]!r}")
    if pod.get("automountServiceAccountToken") is not False:
        bad("automountServiceAccountToken", "must be false: no Baton pod calls the Kubernetes API, "
            "so none needs a service-account token. Received: "
            f"{pod.get('automountServiceAccountToken')!r}", "security")
    for i, v in enumerate(pod.get("volumes") or []):
        kinds = sorted(set(v) - {"name"}) if isinstance(v, dict) else []
        if any(k not in ALLOWED_VOLUMES for k in kinds):
            bad(f"volumes[{i}]", f"volume type {kinds} is not allowed under the restricted "
                f"standard (allowed: {', '.join(ALLOWED_VOLUMES)})")
    if psc.get("runAsUser") == 0:
        bad("securityContext.runAsUser", "must not be 0 (root). Received: 0")
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
    if pod_seccomp not in (None, "RuntimeDefault", "Localhost"):
        bad("securityContext.seccompProfile.type", "must be RuntimeDefault or Localhost. "
            f"Received: {pod_seccomp!r}")
    for where, c in _containers(pod):
        csc = c.get("securityContext") or {}
        if csc.get("privileged"):
            bad(f"{where}.securityContext.privileged", "must not be true. Received: True")
        if csc.get("allowPrivilegeEscalation") is not False:
            bad(f"{where}.securityContext.allowPrivilegeEscalation", "must be false. Received: "
                f"{csc.get('allowPrivilegeEscalation')!r}")
        caps = csc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            bad(f"{where}.securityContext.capabilities.drop", "must include ALL. Received: "
                f"{caps.get('drop')!r}")
        extra = [a for a in caps.get("add") or [] if a != "NET_BIND_SERVICE"]
        if extra:
            bad(f"{where}.securityContext.capabilities.add", "may only add NET_BIND_SERVICE. "
                f"Received: {extra}")
        if csc.get("runAsNonRoot", psc.get("runAsNonRoot")) is not True:
            bad(f"{where}.securityContext.runAsNonRoot", "must be true (here or in the pod's "
                f"securityContext). Received: {csc.get('runAsNonRoot', psc.get('runAsNonRoot'))!r}")
        if csc.get("runAsUser") == 0:
            bad(f"{where}.securityContext.runAsUser", "must not be 0 (root). Received: 0")
        seccomp = (csc.get("seccompProfile") or {}).get("type", pod_seccomp)
        if seccomp not in ("RuntimeDefault", "Localhost"):
            bad(f"{where}.securityContext.seccompProfile.type", "must be RuntimeDefault or "
                f"Localhost (here or in the pod's securityContext). Received: {seccomp!r}")
        for j, port in enumerate(c.get("ports") or []):
            if isinstance(port, dict) and port.get("hostPort"):
                bad(f"{where}.ports[{j}].hostPort", f"must not be set. Received: {port['hostPort']!r}")
        if csc.get("readOnlyRootFilesystem") is not True:
            bad(f"{where}.securityContext.readOnlyRootFilesystem", "must be true (write to "
                f"volumes: /tmp is an emptyDir). Received: {csc.get('readOnlyRootFilesystem')!r}",
                "security")
        problem = _pinned(c.get("image"))
        if problem:
            bad(f"{where}.image", problem, "security")
    return out


def check(doc: Any) -> list[Violation]:
    """Every security violation of one manifest (its pod templates; a Namespace's labels)."""
    out = [v for path, pod in pod_specs(doc) for v in check_pod(pod, path)]
    if isinstance(doc, dict) and doc.get("kind") == "Namespace":
        labels = (doc.get("metadata") or {}).get("labels") or {}
        key = "pod-security.kubernetes.io/enforce"
        if labels.get(key) != "restricted":
            out.append(Violation(f"metadata.labels.{key}", "must be 'restricted': the namespace "
                                 f"enforces the restricted Pod Security Standard. Received: "
                                 f"{labels.get(key)!r}", "security"))
    return out
