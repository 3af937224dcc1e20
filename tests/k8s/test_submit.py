"""Submission: the exact HTTP requests the official kubernetes client would send (no cluster)."""

from __future__ import annotations

import json

import pytest

from k8s import submit as sub
from k8s.render import build_all

from .conftest import make_options


class _FakeResponse:
    def __init__(self, status: int, data: bytes) -> None:
        self.status, self.reason, self.data = status, "Created" if status < 300 else "Forbidden", data
        self.headers = {"content-type": "application/json"}


def _client(status: int = 201):
    """A real ApiClient whose HTTP layer records requests instead of sending them."""
    from kubernetes import client
    from kubernetes.client import rest

    cfg = client.Configuration(host="https://cluster.example:6443")
    api = client.ApiClient(cfg)
    sent = []

    def request(method, url, headers=None, body=None, post_params=None, _request_timeout=None):
        sent.append({"method": method, "url": url, "body": body, "headers": headers})
        reply = body if status < 300 else {"kind": "Status", "message": "tfjobs is forbidden"}
        resp = rest.RESTResponse(_FakeResponse(status, json.dumps(reply).encode()))
        if status >= 300:
            raise client.exceptions.ApiException(http_resp=resp)
        return resp

    api.rest_client.request = request
    return api, sent


def _docs():
    files = build_all(make_options("parameter_server", 2, 1, namespace="ml"))
    return [d for ds in files.values() for d in ds]


def test_tfjob_goes_to_custom_objects_api_in_order():
    requests = sub.plan(_docs())
    kinds = [r.kwargs["body"]["kind"] for r in requests]
    assert kinds.index("PersistentVolumeClaim") < kinds.index("Job") < kinds.index("TFJob")
    tf = next(r for r in requests if r.kwargs["body"]["kind"] == "TFJob")
    assert (tf.api, tf.method) == ("CustomObjectsApi", "create_namespaced_custom_object")
    assert {k: tf.kwargs[k] for k in ("group", "version", "namespace", "plural")} == {
        "group": "kubeflow.org", "version": "v1", "namespace": "ml", "plural": "tfjobs"}


def test_the_http_requests_sent():
    api, sent = _client()
    lines = sub.submit(sub.plan(_docs(), dry_run=True), api)
    assert len(lines) == len(sent) == len(_docs())
    tf = next(s for s in sent if "tfjobs" in s["url"])
    assert tf["method"] == "POST"
    assert tf["url"] == "https://cluster.example:6443/apis/kubeflow.org/v1/namespaces/ml/tfjobs?dryRun=All"
    assert tf["body"]["spec"]["tfReplicaSpecs"]["PS"]["replicas"] == 1
    assert tf["headers"]["Accept"] == "application/json"
    urls = [s["url"].split("6443")[1] for s in sent]
    assert "/api/v1/namespaces/ml/persistentvolumeclaims?dryRun=All" in urls
    assert "/apis/batch/v1/namespaces/ml/jobs?dryRun=All" in urls
    assert "/apis/apps/v1/namespaces/ml/deployments?dryRun=All" in urls


def test_namespace_override_and_api_errors():
    api, sent = _client(status=403)
    with pytest.raises(sub.SubmitError, match="403"):
        sub.submit(sub.plan(_docs(), namespace="other"), api)
    assert "/namespaces/other/" in sent[0]["url"]
    with pytest.raises(sub.SubmitError, match="kind='Pod'"):
        sub.plan([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}])
