"""NetworkPolicies that allow exactly the traffic each part of a run needs, and its Namespace.

Without a policy every pod is reachable from every pod of the cluster: the TensorFlow gRPC
port (2222), which runs any op it is sent against a writable artifacts volume, the Flower
SuperLink and the model server. `baton k8s` writes (selecting pods by the labels every Baton pod
carries: `app.kubernetes.io/part-of: <pipeline>`, `baton.dev/run-id: <run id>`, and
`app.kubernetes.io/component`):

* `<job>-default-deny`: every pod of the run, no ingress at all and no egress but DNS (UDP and
  TCP 53 to the `kube-dns` pods in `kube-system`; JobSet pods resolve their peers' names);
* `<job>-training`: the training pods (component `train`) talk to each other on the TensorFlow
  port, in and out, and to nothing else;
* `<pipeline>-serving`: the model server takes gRPC (8500) and REST (8501) from pods of its
  own namespace only (an overlay opens it to an ingress controller's or Prometheus' namespace);
* with a federated stage, `<job>-federation`: the SuperLink takes its port (9091) from the run's
  SuperNodes and run Job only, and those may dial it;
* when the runs directory is a bucket (`--runs-dir s3://...`) or the spec names object storage
  (`s3://`, `gs://`), `<job>-object-storage`: the steps that read and write the run directory
  (the federation's SuperLink, whose ServerApp writes the stage's outputs, and run Job among
  them), the SuperNodes (they copy their silo from the bucket) and the model server (it loads
  pushed versions from the bucket) may open HTTPS (443) connections. An S3-compatible store on another port needs an overlay opening that port.

A NetworkPolicy only acts where the cluster's network plugin enforces them (Calico, Cilium,
the clouds' own with policy enforcement on): on one that does not, these are inert.
`baton k8s emulate` runs on one machine and does not enforce them either.

The Namespace carries the Pod Security labels that make the API server refuse any pod that is
not `restricted` (k8s.security): a hand-edited pod running as root is not admitted.
"""

from __future__ import annotations

from typing import Any

from baton.k8s.federation_names import PORT as SUPERLINK_PORT  # the names alone, no manifests
from baton.k8s.options import OBJECT_STORAGE_SCHEMES, JobOptions
from baton.k8s.security import ENFORCE_LABELS
from baton.serving.conventions import DEFAULT_GRPC_PORT, DEFAULT_REST_PORT

API_VERSION = "networking.k8s.io/v1"
KIND = "NetworkPolicy"
DNS = {
    "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
}


def _run(opts: JobOptions) -> dict[str, str]:
    return {"app.kubernetes.io/part-of": opts.pipeline, "baton.dev/run-id": opts.run_id}


def _components(opts: JobOptions, *components: str) -> dict[str, Any]:
    if len(components) == 1:
        return {"matchLabels": {**_run(opts), "app.kubernetes.io/component": components[0]}}
    return {"matchLabels": _run(opts), "matchExpressions": [
        {"key": "app.kubernetes.io/component", "operator": "In", "values": list(components)}]}


def _policy(opts: JobOptions, name: str, selector: dict[str, Any], ingress: list | None,
            egress: list | None) -> dict:
    spec: dict[str, Any] = {"podSelector": selector, "policyTypes": []}
    if ingress is not None:
        spec["policyTypes"].append("Ingress")
        spec["ingress"] = ingress
    if egress is not None:
        spec["policyTypes"].append("Egress")
        spec["egress"] = egress
    return {"apiVersion": API_VERSION, "kind": KIND,
            "metadata": {"name": name, "namespace": opts.namespace,
                         "labels": opts.labels("network")},
            "spec": spec}


def build_policies(opts: JobOptions, federated: bool = False) -> list[dict]:
    """The run's NetworkPolicies (see the module docstring)."""
    tcp = [{"protocol": "TCP", "port": opts.port}]
    train = _components(opts, "train")
    docs = [
        _policy(opts, f"{opts.job_name}-default-deny", {"matchLabels": _run(opts)}, [], [DNS]),
        _policy(opts, f"{opts.job_name}-training", train,
                [{"from": [{"podSelector": train}], "ports": tcp}],
                [{"to": [{"podSelector": train}], "ports": tcp}]),
        _policy(opts, f"{opts.pipeline}-serving",
                {"matchLabels": {"app.kubernetes.io/name": "baton",
                                 "app.kubernetes.io/instance": f"{opts.pipeline}-serving"}},
                [{"from": [{"podSelector": {}}],
                  "ports": [{"protocol": "TCP", "port": DEFAULT_GRPC_PORT},
                            {"protocol": "TCP", "port": DEFAULT_REST_PORT}]}], None),
    ]
    if federated:
        link = [{"protocol": "TCP", "port": SUPERLINK_PORT}]
        clients = _components(opts, "supernode", "federated-run")
        docs.append(_policy(opts, f"{opts.job_name}-federation", _components(opts, "superlink"),
                            [{"from": [{"podSelector": clients}], "ports": link}], None))
        docs.append(_policy(opts, f"{opts.job_name}-federation-clients", clients, None,
                            [{"to": [{"podSelector": _components(opts, "superlink")}],
                              "ports": link}]))
    if opts.storage is not None or any(s in (opts.spec_text or "") for s in OBJECT_STORAGE_SCHEMES):
        docs.append(_policy(opts, f"{opts.job_name}-object-storage",
                            _components(opts, "data", "train", "release", "superlink",
                                        "federated-run", "supernode", "serving"), None,
                            [{"ports": [{"protocol": "TCP", "port": 443}]}]))
    return docs


def build_namespace(opts: JobOptions) -> dict:
    """The namespace, enforcing the restricted Pod Security Standard."""
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": opts.namespace, "labels": dict(ENFORCE_LABELS)}}
