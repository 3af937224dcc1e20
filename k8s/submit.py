"""Submit generated manifests with the official `kubernetes` Python client and your kubeconfig.

Each document becomes one create call. A directory with a `kustomization.yaml` is created in
the order of its `resources:` (what `baton k8s` writes: the Namespace and NetworkPolicies, storage
and config, then the pipeline's JobSet, TrainJob and runtime, or Jobs and TFJob, then serving),
with its `namespace:` applied, as `kubectl apply -k` would; any other path in a safe kind order
(Namespace, NetworkPolicy, PVC, ConfigMap, Service, then the workloads). Custom resources go
through `CustomObjectsApi`:

    POST /apis/jobset.x-k8s.io/v1alpha2/namespaces/<ns>/jobsets   body: the JobSet manifest
    POST /apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes    (cluster-scoped)

The ordering between steps needs no waiting here: a JobSet orders its own steps (`dependsOn`),
and a TFJob's pods wait in their `wait-for-inputs` init container for their inputs. `dry_run=True` sends the same
requests with `?dryRun=All`, so the API server (and the operator's webhook) validate them
without creating anything.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from baton.errors import EXIT_USAGE, BatonError

# (apiVersion, kind) -> (API class, create method). Every kind here is namespaced.
_CREATE = {
    ("v1", "Namespace"): ("CoreV1Api", "create_namespace"),
    ("networking.k8s.io/v1", "NetworkPolicy"): ("NetworkingV1Api", "create_namespaced_network_policy"),
    ("v1", "PersistentVolumeClaim"): ("CoreV1Api", "create_namespaced_persistent_volume_claim"),
    ("v1", "ConfigMap"): ("CoreV1Api", "create_namespaced_config_map"),
    ("v1", "Service"): ("CoreV1Api", "create_namespaced_service"),
    ("batch/v1", "Job"): ("BatchV1Api", "create_namespaced_job"),
    ("apps/v1", "Deployment"): ("AppsV1Api", "create_namespaced_deployment"),
}
_CUSTOM = {
    ("kubeflow.org/v1", "TFJob"): ("kubeflow.org", "v1", "tfjobs"),
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): ("jobset.x-k8s.io", "v1alpha2", "jobsets"),
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): ("trainer.kubeflow.org", "v1alpha1", "trainjobs"),
    ("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime"): (
        "trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes"),
    ("serving.kserve.io/v1beta1", "InferenceService"): ("serving.kserve.io", "v1beta1", "inferenceservices"),
}
KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
_KUSTOMIZATION = ("kustomize.config.k8s.io/v1beta1", "Kustomization")
# Creation order when no kustomization says otherwise: what others refer to comes first
# (namespace, identity, storage, config, network), then the workloads. Unknown kinds last.
KIND_ORDER = (
    "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange", "ServiceAccount", "Secret",
    "PersistentVolume", "PersistentVolumeClaim", "ConfigMap", "Service",
    "Job", "TFJob", "JobSet", "ClusterTrainingRuntime", "TrainJob", "Deployment",
    "InferenceService",
)
_CLUSTER_SCOPED = {"Namespace", "PersistentVolume", "ClusterTrainingRuntime"}
# A refused connection fails at once; a black-holed address would otherwise hang for minutes.
# (The client requires both numbers; a create call, webhooks included, answers well within 2 min.)
CONNECT_TIMEOUT, READ_TIMEOUT = 10.0, 120.0


class SubmitError(BatonError, RuntimeError):
    """A document that cannot be submitted, or an API error (status and reason included)."""


class ManifestSetError(SubmitError):
    """A path, directory or kustomization that cannot be read as a set of manifests."""

    exit_code = EXIT_USAGE


class KubeconfigError(SubmitError):
    """No usable kubeconfig (missing file, unknown context, not a kubeconfig)."""

    exit_code = EXIT_USAGE


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


# --------------------------------------------------------------------------- which documents
def kind_rank(doc: Any) -> int:
    kind = doc.get("kind") if isinstance(doc, dict) else None
    return KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)


def _is_kustomization(doc: Any) -> bool:
    return isinstance(doc, dict) and (doc.get("apiVersion"), doc.get("kind")) == _KUSTOMIZATION


def collect(path: str | Path) -> list[tuple[str, Any]]:
    """(source label, document) of one path argument, in creation order.

    A directory (or a kustomization file) with a kustomization: its `resources:` in order, with
    its `namespace:` set on each object. Anything else: every YAML document of the file, or of
    the directory's files (recursively, without `alternatives/`), sorted by `KIND_ORDER`
    (stable: files keep their alphabetical order within a kind). A YAML syntax error comes back
    as the document (a `yaml.YAMLError`), for the validator to report with its file.
    """
    from baton.k8s.validate import load_documents

    p = Path(path)
    if not p.exists():
        raise ManifestSetError(f"no such file or directory: {path}")
    if p.is_dir():
        kust = next((p / n for n in KUSTOMIZATION_FILES if (p / n).is_file()), None)
        if kust is not None:
            return _from_kustomization(kust)
        files = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in (".yaml", ".yml")
                       and f.name not in KUSTOMIZATION_FILES
                       and "alternatives" not in f.relative_to(p).parts[:-1])
    elif p.name in KUSTOMIZATION_FILES:
        return _from_kustomization(p)
    else:
        files = [p]
    pairs = [(src, doc) for f in files for src, doc in load_documents(f) if not _is_kustomization(doc)]
    if not pairs:
        raise ManifestSetError(f"{path}: no manifests found")
    return sorted(pairs, key=lambda pair: kind_rank(pair[1]))


def _from_kustomization(kust: Path) -> list[tuple[str, Any]]:
    """The resources of a plain kustomization, in its order; anything kustomize would have to
    transform (patches, images, name prefixes, bases...) is refused rather than ignored."""
    import yaml

    from baton.k8s.validate import load_documents

    try:
        data = yaml.safe_load(kust.read_text())
    except yaml.YAMLError as exc:
        raise ManifestSetError(f"{kust}: not valid YAML: {' '.join(str(exc).split())}") from exc
    if not isinstance(data, dict):
        raise ManifestSetError(f"{kust}: a kustomization must be a mapping. Received: {type(data).__name__}")
    hint = (f"`baton k8s submit` does not apply (it creates listed files as they are); "
            f"use `kubectl apply -k {kust.parent}`")
    extra = sorted(set(data) - {"apiVersion", "kind", "namespace", "resources"})
    if extra:
        raise ManifestSetError(f"{kust}: uses {', '.join(extra)}, which {hint}")
    resources = data.get("resources") or []
    if not isinstance(resources, list) or not all(isinstance(r, str) for r in resources):
        raise ManifestSetError(f"{kust}: resources must be a list of file names. Received: {resources!r}")
    pairs: list[tuple[str, Any]] = []
    for entry in resources:
        f = kust.parent / entry
        if not f.is_file():
            what = "a directory (a base)" if f.is_dir() else "not a file here"
            raise ManifestSetError(f"{kust}: resources entry {entry!r} is {what}, which {hint}")
        pairs += [(src, doc) for src, doc in load_documents(f) if not _is_kustomization(doc)]
    namespace = data.get("namespace")
    if namespace:
        pairs = [(src, _with_namespace(doc, str(namespace))) for src, doc in pairs]
    if not pairs:
        raise ManifestSetError(f"{kust}: no resources listed")
    return pairs


def _with_namespace(doc: Any, namespace: str) -> Any:
    """A copy of `doc` in `namespace`: a Namespace becomes that namespace (as kustomize's
    namespace transformer renames it); other cluster-scoped kinds and malformed documents are
    unchanged."""
    if not isinstance(doc, dict) or not isinstance(doc.get("metadata"), dict):
        return doc
    if doc.get("kind") == "Namespace":
        out = copy.deepcopy(doc)
        out["metadata"]["name"] = namespace
        return out
    if doc.get("kind") in _CLUSTER_SCOPED:
        return doc
    out = copy.deepcopy(doc)
    out["metadata"]["namespace"] = namespace
    return out


# --------------------------------------------------------------------------- requests
def plan(docs: Iterable[dict], namespace: str | None = None, dry_run: bool = False) -> list[Request]:
    """The create calls for `docs`, in order.

    `namespace` overrides the documents' own, in the URL and in the body's `metadata.namespace`
    alike (the API server rejects a body whose namespace differs from the URL's). The caller's
    documents are not modified.
    """
    out = []
    for doc in docs:
        if not isinstance(doc, dict) or _is_kustomization(doc):
            continue
        key = (doc.get("apiVersion"), doc.get("kind"))
        if key not in _CUSTOM and key not in _CREATE:
            name = (doc.get("metadata") or {}).get("name")
            raise SubmitError(f"cannot submit apiVersion={key[0]!r} kind={key[1]!r} (name {name!r}); "
                              f"supported: {', '.join(k for _, k in [*_CREATE, *_CUSTOM])}")
        body = _with_namespace(doc, namespace) if namespace else doc
        ns = (body.get("metadata") or {}).get("namespace") or "default"
        extra = {"dry_run": "All"} if dry_run else {}
        if key[1] in _CLUSTER_SCOPED and key in _CUSTOM:
            group, version, plural = _CUSTOM[key]
            out.append(Request("CustomObjectsApi", "create_cluster_custom_object",
                               {"group": group, "version": version, "plural": plural,
                                "body": body, **extra}))
        elif key[1] in _CLUSTER_SCOPED:
            api, method = _CREATE[key]
            out.append(Request(api, method, {"body": body, **extra}))
        elif key in _CUSTOM:
            group, version, plural = _CUSTOM[key]
            out.append(Request("CustomObjectsApi", "create_namespaced_custom_object",
                               {"group": group, "version": version, "namespace": ns,
                                "plural": plural, "body": body, **extra}))
        else:
            api, method = _CREATE[key]
            out.append(Request(api, method, {"namespace": ns, "body": body, **extra}))
    return out


# --------------------------------------------------------------------------- the cluster
def _kubeconfig_paths(kubeconfig: str | None) -> tuple[str, list[Path]]:
    """(what the user named, for messages; the files the client would read)."""
    if kubeconfig:
        return f"--kubeconfig {kubeconfig}", [Path(kubeconfig).expanduser()]
    env = os.environ.get("KUBECONFIG")
    if env:
        return f"$KUBECONFIG={env}", [Path(p).expanduser() for p in env.split(os.pathsep) if p]
    return "~/.kube/config", [Path("~/.kube/config").expanduser()]


def load_client(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """An ApiClient from the user's kubeconfig (`kubeconfig`, $KUBECONFIG, ~/.kube/config), or
    the in-cluster service account when there is no kubeconfig and we run in a pod.

    Raises KubeconfigError (naming the file, the variable or the context) when none is usable.
    """
    import yaml
    from kubernetes import client, config

    named, files = _kubeconfig_paths(kubeconfig)
    if kubeconfig and not files[0].is_file():
        raise KubeconfigError(f"--kubeconfig: no such file: {kubeconfig}")
    if not any(f.is_file() for f in files):
        if not kubeconfig and os.environ.get("KUBERNETES_SERVICE_HOST"):
            try:
                config.load_incluster_config()
            except config.ConfigException as exc:
                raise KubeconfigError(f"no kubeconfig ({named} does not exist) and the in-cluster "
                                      f"config is unusable: {exc}") from exc
            return client.ApiClient()
        raise KubeconfigError(f"no kubeconfig: {named} does not exist and this is not a pod; "
                              "pass --kubeconfig FILE or set $KUBECONFIG")
    where = named if context is None else f"{named}, --context {context}"
    try:
        return config.new_client_from_config(
            config_file=os.pathsep.join(str(f) for f in files if f.is_file()), context=context)
    except config.ConfigException as exc:
        raise KubeconfigError(f"kubeconfig ({where}): {' '.join(str(exc).split())}") from exc
    except (yaml.YAMLError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise KubeconfigError(f"kubeconfig ({where}) is not a valid kubeconfig: "
                              f"{type(exc).__name__}: {' '.join(str(exc).split())}") from exc


def _api_message(exc: Any) -> str:
    """The `message` of the API server's Status body, else the body itself, on one line."""
    body = exc.body.decode("utf-8", "replace") if isinstance(exc.body, bytes) else (exc.body or "")
    try:
        message = json.loads(body).get("message") or body
    except (ValueError, AttributeError):
        message = body
    return " ".join(str(message).split())[:500]


def _unreachable(host: str, reason: object) -> str:
    text = " ".join(str(reason).split())
    # urllib3: "HTTPSConnection(host='h', port=1): Failed to establish a new connection: ..."
    if text.startswith(("HTTPConnection(", "HTTPSConnection(", "<")) and "): " in text:
        text = text.split("): ", 1)[1]
    return f"cannot reach the Kubernetes API server at {host}: {text}"


def submit(requests: list[Request], api_client: Any,
           on_created: Callable[[str], None] | None = None) -> list[str]:
    """Send the requests; returns one line per created object (also passed to `on_created` as
    each is created). Stops at the first error: an API error, or a server that cannot be reached
    (SubmitError naming the address)."""
    import urllib3
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    host = getattr(getattr(api_client, "configuration", None), "host", "?")
    done: list[str] = []
    for req in requests:
        api = getattr(client, req.api)(api_client)
        before = f" ({len(done)} object(s) created before it)" if done else ""
        try:
            getattr(api, req.method)(**req.kwargs, _request_timeout=(CONNECT_TIMEOUT, READ_TIMEOUT))
        except ApiException as exc:
            if not exc.status:  # the client's own wrapper for TLS failures
                raise SubmitError(_unreachable(host, exc.reason) + before) from exc
            raise SubmitError(f"{req.label}: the API server at {host} answered {exc.status} "
                              f"{exc.reason}: {_api_message(exc)}{before}") from exc
        except urllib3.exceptions.ReadTimeoutError as exc:
            raise SubmitError(f"{req.label}: the API server at {host} did not answer within "
                              f"{READ_TIMEOUT:.0f} s; it may or may not have been created{before}") from exc
        except urllib3.exceptions.HTTPError as exc:
            raise SubmitError(_unreachable(host, getattr(exc, "reason", None) or exc) + before) from exc
        suffix = " (dry run)" if req.kwargs.get("dry_run") else ""
        where = f" in {req.kwargs['namespace']}" if "namespace" in req.kwargs else " (cluster-scoped)"
        line = f"created {req.label}{where}{suffix}"
        done.append(line)
        if on_created:
            on_created(line)
    return done
