"""The pod pieces the federation's Deployments and Job share: env, selectors, volumes, claims.

The SuperLink's and each SuperNode's Deployment (strategy Recreate: never two of one), their
claims, the spec's ConfigMap (the user's code, not data), Flower's home and each pod's own
credentials Secret, mounted read-only with mode 0440.
"""

from __future__ import annotations

from baton.k8s import pods
from baton.k8s.federation_names import CREDENTIALS_DIR, ENV, FLWR_HOME, SECRET_MODE
from baton.k8s.options import JobOptions


def _env(opts: JobOptions) -> list[dict]:
    return pods.env(opts) + [{"name": k, "value": v} for k, v in ENV]


def _selector(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "baton", "app.kubernetes.io/instance": name}


def _spec_volume(opts: JobOptions) -> tuple[list[dict], list[dict]]:
    """The spec ConfigMap (the user's modules: a transform or model the apps import), if any."""
    vols, mounts = pods.volumes(opts, read_only=True)
    return ([v for v in vols if v["name"] == "pipeline-spec"],
            [m for m in mounts if m["name"] == "pipeline-spec"])


def _flwr_home() -> tuple[dict, dict]:
    return {"name": "flwr-home", "emptyDir": {}}, {"name": "flwr-home", "mountPath": FLWR_HOME}


def _deployment(opts: JobOptions, name: str, labels: dict[str, str], annotations: dict[str, str],
                pod_spec: dict) -> dict:
    selector = _selector(name)
    labels = {**labels, **selector}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": opts.namespace, "labels": labels,
                     **({"annotations": annotations} if annotations else {})},
        "spec": {
            "replicas": 1,
            # never two of one: two SuperLinks on one database, or one client's node twice
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": labels, "annotations": {**pods.ISTIO_OFF, **annotations}},
                "spec": {"securityContext": dict(pods.SECURITY_CONTEXT), **pod_spec},
            },
        },
    }


def _pvc(opts: JobOptions, name: str, size: str, labels: dict[str, str],
         annotations: dict[str, str] | None = None) -> dict:
    spec: dict = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}
    if opts.storage_class:
        spec["storageClassName"] = opts.storage_class
    meta: dict = {"name": name, "namespace": opts.namespace, "labels": labels}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec}



def _credentials_volume(secret: str, items: list[tuple[str, str]] | None = None
                        ) -> tuple[dict, dict]:
    source: dict = {"secretName": secret, "defaultMode": SECRET_MODE}
    if items:
        source["items"] = [{"key": k, "path": p} for k, p in items]
    return ({"name": "flower-credentials", "secret": source},
            {"name": "flower-credentials", "mountPath": CREDENTIALS_DIR, "readOnly": True})


