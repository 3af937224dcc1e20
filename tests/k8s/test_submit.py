"""Submission: the exact HTTP requests the official kubernetes client would send (no cluster)."""

from __future__ import annotations

import json

import pytest
import yaml

from baton.k8s import submit as sub
from baton.k8s.render import build_all

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
        # as the client's REST layer does: any status comes back; ApiClient raises on >= 300
        return rest.RESTResponse(_FakeResponse(status, json.dumps(reply).encode()))

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
    assert sent[0]["url"].endswith("/api/v1/namespaces") and sent[0]["body"]["metadata"]["name"] == "other"
    with pytest.raises(sub.SubmitError, match="kind='Pod'"):
        sub.plan([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}])


# --------------------------------------------------------------------------- through the CLI
def _write(tmp_path, **kwargs):
    from baton.k8s.render import write_manifests

    out = tmp_path / "m"
    write_manifests(make_options("parameter_server", 2, 1, namespace="ml", **kwargs), out)
    return out


def _cli_submit(monkeypatch, argv, status: int = 201):
    """`baton k8s submit ARGV` against the recording client; (exit code, requests sent)."""
    from baton.pipeline.cli import main as baton

    api, sent = _client(status)
    monkeypatch.setattr(sub, "load_client", lambda kubeconfig=None, context=None: api)
    return baton(["k8s", "submit", *argv]), sent


def _path(s) -> str:
    return s["url"].split("6443", 1)[1].split("?")[0]


def test_namespace_override_is_also_the_body_namespace():
    docs = _docs()
    api, sent = _client()
    sub.submit(sub.plan(docs, namespace="other"), api)
    namespace, *rest = sent
    # the Namespace itself becomes the one named (cluster-scoped: no namespace in its URL)
    assert namespace["url"].endswith("/api/v1/namespaces") and namespace["body"]["metadata"]["name"] == "other"
    assert rest and all("/namespaces/other/" in s["url"] for s in rest)
    assert {s["body"]["metadata"]["namespace"] for s in rest} == {"other"}
    assert {d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"} == {"ml"}
    assert {d["metadata"]["namespace"] for d in docs if d["kind"] != "Namespace"} == {"ml"}  # untouched


def test_directory_is_created_in_kustomization_order(tmp_path, monkeypatch, capsys):
    out = _write(tmp_path)
    rc, sent = _cli_submit(monkeypatch, [str(out)])
    assert rc == 0, capsys.readouterr().err
    files = yaml.safe_load((out / "kustomization.yaml").read_text())["resources"]
    expected = [f"{d['kind']}/{d['metadata']['name']}" for f in files
                for d in yaml.safe_load_all((out / f).read_text())]
    assert [f"{s['body']['kind']}/{s['body']['metadata']['name']}" for s in sent] == expected
    paths = [_path(s) for s in sent]
    assert paths[:6] == ["/api/v1/namespaces", *["/apis/networking.k8s.io/v1/namespaces/ml/networkpolicies"] * 3,
                         "/api/v1/namespaces/ml/persistentvolumeclaims", "/api/v1/namespaces/ml/configmaps"]
    assert paths[6] == "/apis/batch/v1/namespaces/ml/jobs"
    assert not any("inferenceservices" in p for p in paths)  # the alternative is not listed
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "created Namespace/ml (cluster-scoped)"
    assert lines[4] == "created PersistentVolumeClaim/penguins-artifacts in ml"


def test_kustomization_order_and_namespace_are_followed(tmp_path, monkeypatch):
    out = _write(tmp_path)
    kust = yaml.safe_load((out / "kustomization.yaml").read_text())
    kust["resources"] = ["serving-service.yaml", "tfjob.yaml", "pvc.yaml"]
    kust["namespace"] = "team-a"
    (out / "kustomization.yaml").write_text(yaml.safe_dump(kust))
    rc, sent = _cli_submit(monkeypatch, [str(out)])
    assert rc == 0
    assert [s["body"]["kind"] for s in sent] == ["Service", "TFJob", "PersistentVolumeClaim"]
    assert all("/namespaces/team-a/" in s["url"] for s in sent)
    assert {s["body"]["metadata"]["namespace"] for s in sent} == {"team-a"}


def test_directory_without_kustomization_in_kind_order(tmp_path, monkeypatch):
    out = _write(tmp_path)
    (out / "kustomization.yaml").unlink()
    rc, sent = _cli_submit(monkeypatch, [str(out), "--namespace", "other"])
    assert rc == 0
    kinds = [s["body"]["kind"] for s in sent]
    assert kinds == ["Namespace", "NetworkPolicy", "NetworkPolicy", "NetworkPolicy",
                     "PersistentVolumeClaim", "ConfigMap", "ConfigMap", "ConfigMap", "Service",
                     "Job", "Job", "TFJob", "Deployment"]
    assert {s["body"]["metadata"].get("namespace") for s in sent[1:]} == {"other"}


def test_overlay_with_patches_is_refused(monkeypatch, capsys):
    from pathlib import Path

    overlay = Path(__file__).resolve().parents[2] / "k8s" / "overlays" / "dev"
    rc, sent = _cli_submit(monkeypatch, [str(overlay)])
    err = capsys.readouterr().err
    assert rc == 2 and not sent
    assert len(err.strip().splitlines()) == 1
    assert "kustomization.yaml" in err and "patches" in err and "kubectl apply -k" in err


def test_invalid_manifest_is_a_usage_error_naming_file_and_field(tmp_path, monkeypatch, capsys):
    out = _write(tmp_path)
    job = yaml.safe_load((out / "tfjob.yaml").read_text())
    job["metadata"]["name"] = "Bad_Name"
    (out / "tfjob.yaml").write_text(yaml.safe_dump(job))
    rc, sent = _cli_submit(monkeypatch, [str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and not sent
    assert len(err.strip().splitlines()) == 1
    assert "tfjob.yaml" in err and "metadata.name" in err and "Traceback" not in err


def test_unsupported_kind_and_bad_yaml_are_usage_errors(tmp_path, monkeypatch, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: [unclosed\n")
    rc, sent = _cli_submit(monkeypatch, [str(bad)])
    assert rc == 2 and not sent
    assert "bad.yaml" in capsys.readouterr().err
    from baton.k8s.security import harden

    pod = tmp_path / "pod.yaml"  # a valid, restricted Pod: only its kind is not submitted
    pod.write_text(yaml.safe_dump(harden({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                                          "spec": {"containers": [{"name": "c", "image": "i:1"}]}})))
    rc, sent = _cli_submit(monkeypatch, [str(pod)])
    assert rc == 2 and not sent
    assert "kind='Pod'" in capsys.readouterr().err


def test_api_error_is_one_line_exit_1(tmp_path, monkeypatch, capsys):
    rc, sent = _cli_submit(monkeypatch, [str(_write(tmp_path))], status=403)
    err = capsys.readouterr().err
    assert rc == 1 and len(sent) == 1
    assert "403" in err and "tfjobs is forbidden" in err and len(err.strip().splitlines()) == 1


def _kubeconfig(tmp_path, server: str):
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": server}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
    }))
    return path


def test_no_kubeconfig_is_a_usage_error(tmp_path, monkeypatch, capsys):
    from baton.pipeline.cli import main as baton

    out = _write(tmp_path)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "nope"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert baton(["k8s", "submit", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "kubeconfig" in err and str(tmp_path / "nope") in err
    assert baton(["k8s", "submit", str(out), "--kubeconfig", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert "--kubeconfig" in err and "missing" in err and len(err.strip().splitlines()) == 1
    cfg = _kubeconfig(tmp_path, "https://127.0.0.1:1")
    assert baton(["k8s", "submit", str(out), "--kubeconfig", str(cfg), "--context", "nope"]) == 2
    err = capsys.readouterr().err
    assert str(cfg) in err and "nope" in err and len(err.strip().splitlines()) == 1


def test_unreachable_server_names_the_address(tmp_path, monkeypatch, capsys):
    import socket

    from baton.pipeline.cli import main as baton

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = _kubeconfig(tmp_path, f"https://127.0.0.1:{port}")
    assert baton(["k8s", "submit", str(_write(tmp_path)), "--kubeconfig", str(cfg)]) == 1
    err = capsys.readouterr().err
    assert f"127.0.0.1:{port}" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err


def test_a_file_named_explicitly_is_submitted_even_under_alternatives(tmp_path, monkeypatch):
    out = _write(tmp_path)
    rc, sent = _cli_submit(monkeypatch, [str(out / "alternatives" / "inferenceservice.yaml")])
    assert rc == 0
    assert [_path(s) for s in sent] == ["/apis/serving.kserve.io/v1beta1/namespaces/ml/inferenceservices"]
