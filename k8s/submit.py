"""Submit generated manifests with the official `kubernetes` Python client and your kubeconfig.

Each document becomes one create call, in kustomization order (storage and config first, then
the Jobs and the TFJob, then serving). The TFJob goes through `CustomObjectsApi`:

    POST /apis/kubeflow.org/v1/namespaces/<ns>/tfjobs      body: the TFJob manifest

The ordering between stages needs no waiting here: each pod's `wait-for-inputs` init container
holds it until its upstream artifacts exist on the shared volume. `dry_run=True` sends the same
requests with `?dryRun=All`, so the API server (and the operator's webhook) validate them
without creating anything.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

# (apiVersion, kind) -> (API class, create method, whether the call takes group/version/plural)
_CREATE = {
    ("v1", "PersistentVolumeClaim"): ("CoreV1Api", "create_namespaced_persistent_volume_claim"),
    ("v1", "ConfigMap"): ("CoreV1Api", "create_namespaced_config_map"),
    ("v1", "Service"): ("CoreV1Api", "create_namespaced_service"),
    ("batch/v1", "Job"): ("BatchV1Api", "create_namespaced_job"),
    ("apps/v1", "Deployment"): ("AppsV1Api", "create_namespaced_deployment"),
}
_CUSTOM = {
    ("kubeflow.org/v1", "TFJob"): ("kubeflow.org", "v1", "tfjobs"),
    ("serving.kserve.io/v1beta1", "InferenceService"): ("serving.kserve.io", "v1beta1", "inferenceservices"),
}


class SubmitError(RuntimeError):
    """A document that cannot be submitted, or an API error (status and reason included)."""


@dataclasses.dataclass(frozen=True)
class Request:
    """One create call: which API method, with which arguments."""

    api: str
    method: str
    kwargs: dict[str, Any]

    @property
    def label(self) -> str:
        body = self.kwargs["body"]
        return f"{body['kind']}/{body['metadata']['name']}"


def plan(docs: Iterable[dict], namespace: str | None = None, dry_run: bool = False) -> list[Request]:
    """The create calls for `docs`, in order; `namespace` overrides the documents' own."""
    out = []
    for doc in docs:
        if not isinstance(doc, dict):
            continue
        key = (doc.get("apiVersion"), doc.get("kind"))
        if key == ("kustomize.config.k8s.io/v1beta1", "Kustomization"):
            continue
        ns = namespace or (doc.get("metadata") or {}).get("namespace") or "default"
        extra = {"dry_run": "All"} if dry_run else {}
        if key in _CUSTOM:
            group, version, plural = _CUSTOM[key]
            out.append(Request("CustomObjectsApi", "create_namespaced_custom_object",
                               {"group": group, "version": version, "namespace": ns,
                                "plural": plural, "body": doc, **extra}))
        elif key in _CREATE:
            api, method = _CREATE[key]
            out.append(Request(api, method, {"namespace": ns, "body": doc, **extra}))
        else:
            raise SubmitError(f"cannot submit apiVersion={key[0]!r} kind={key[1]!r}")
    return out


def load_client(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """An ApiClient from the user's kubeconfig (KUBECONFIG, ~/.kube/config), or in-cluster."""
    from kubernetes import client, config

    try:
        return config.new_client_from_config(config_file=kubeconfig, context=context)
    except config.ConfigException:
        config.load_incluster_config()
        return client.ApiClient()


def submit(requests: list[Request], api_client: Any) -> list[str]:
    """Send the requests; returns one line per created object. Stops at the first API error."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    done = []
    for req in requests:
        api = getattr(client, req.api)(api_client)
        try:
            getattr(api, req.method)(**req.kwargs)
        except ApiException as exc:
            raise SubmitError(f"{req.label}: the API server answered {exc.status} {exc.reason}: "
                              f"{(exc.body or '')[:500]}") from exc
        suffix = " (dry run)" if req.kwargs.get("dry_run") else ""
        done.append(f"created {req.label} in {req.kwargs['namespace']}{suffix}")
    return done
