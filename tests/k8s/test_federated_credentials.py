"""The federation's credentials in the manifests `baton k8s` writes: TLS and SuperNode
authentication on every Flower connection, each pod holding only its own Secret, the operator's
own CA, certificate and silo keys taken (and checked) where the spec gives them."""

from __future__ import annotations

import base64
import stat
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from baton.k8s import federation_pki as pki
from baton.pipeline.cli import main as baton
from baton.pipeline.commands.k8s import main

CRED = "/var/run/baton/flower"


def _spec(tmp_path: Path, config: dict) -> Path:
    stages = [
        {"name": "ingest", "type": "ingest", "config": {"source": "penguins"}},
        {"name": "fl", "type": "federated", "inputs": {"examples": "ingest.examples"},
         "config": config},
    ]
    path = tmp_path / "fed.yaml"
    path.write_text(yaml.safe_dump({"pipeline": "fedpen", "stages": stages}, sort_keys=False))
    return path


def _generate(tmp_path: Path, config: dict) -> tuple[dict[str, dict], Path]:
    out = tmp_path / "m"
    assert main([str(_spec(tmp_path, config)), "--out", str(out), "--run-id", "r1",
                 "--namespace", "ml"]) == 0
    docs = {}
    for f in out.glob("federated-*.yaml"):
        for d in yaml.safe_load_all(f.read_text()):
            if d:
                docs[f"{d['kind']}/{d['metadata']['name']}"] = d
    return docs, out


def _data(secret: dict) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}


def _secret_of(docs: dict, workload: str) -> str:
    pod = docs[workload]["spec"]["template"]["spec"]
    (vol,) = [v for v in pod["volumes"] if "secret" in v]
    assert vol["secret"]["defaultMode"] == 0o440  # group-readable: the pod's fsGroup
    mounts = [m for c in pod["containers"] for m in c["volumeMounts"] if m["name"] == vol["name"]]
    assert [m["mountPath"] for m in mounts] == [CRED] and all(m["readOnly"] for m in mounts)
    return vol["secret"]["secretName"]


def test_every_pod_gets_only_its_own_credentials_and_none_runs_insecure(tmp_path):
    docs, out = _generate(tmp_path, {"clients": 2})
    assert stat.S_IMODE((out / "federated-secrets.yaml").stat().st_mode) == 0o600
    link = _data(docs[f"Secret/{_secret_of(docs, 'Deployment/fedpen-r1-superlink')}"])
    run = _data(docs[f"Secret/{_secret_of(docs, 'Job/fedpen-r1-flwr-run')}"])
    assert set(link) == {"ca.crt", "tls.crt", "tls.key", "control.token", "superexec.secret"}
    assert set(run) == {"ca.crt", "control.token", "client-0.pub", "client-1.pub"}
    assert run["control.token"] == link["control.token"] and len(link["control.token"]) == 64
    # the SuperLink's certificate is the CA's and names what SuperNodes and its SuperExec dial
    cert = x509.load_pem_x509_certificate(link["tls.crt"].encode())
    assert pki.check_server_certificate("tls.crt", link["tls.crt"], link["ca.crt"], [
        "fedpen-r1-superlink.ml.svc", "fedpen-r1-superlink.ml.svc.cluster.local"]) == []
    assert cert.issuer == x509.load_pem_x509_certificate(link["ca.crt"].encode()).subject
    keys = set()
    for i in range(2):
        name = f"Deployment/fedpen-r1-node-client-{i}"
        node = _data(docs[f"Secret/{_secret_of(docs, name)}"])
        assert set(node) == {"ca.crt", "node.key", "superexec.secret"}  # no token, no TLS key
        assert node["ca.crt"] == link["ca.crt"]
        assert pki.check_key_pair("node.key", node["node.key"], run[f"client-{i}.pub"]) is None
        assert node["superexec.secret"] != link["superexec.secret"]
        keys.add(node["node.key"])
        args = docs[name]["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[args.index("--host") + 1] == "127.0.0.1"  # ClientAppIo: the pod only
    assert len(keys) == 2
    for doc in docs.values():  # nothing in plaintext, nothing bound to all addresses bare
        for c in (doc.get("spec", {}).get("template", {}).get("spec", {}).get("containers")
                  or []):
            assert "--insecure" not in c.get("args", []), doc["metadata"]["name"]
    run_pod = docs["Job/fedpen-r1-flwr-run"]["spec"]["template"]["spec"]
    items = next(v for v in run_pod["volumes"] if "secret" in v)["secret"]["items"]
    assert {i["path"] for i in items} == {"ca.crt", "control.token", "nodes/client-0.pub",
                                          "nodes/client-1.pub"}


def _operator_material(tmp_path: Path, hosts: list[str]) -> dict:
    ca = pki.make_authority()
    server = pki.issue_server(ca, hosts)
    keys = pki.node_key_pair()
    files = {"ca.crt": ca.cert_pem, "tls.crt": server.cert_pem, "tls.key": server.key_pem,
             "a.pub": keys.public_openssh, "a.key": keys.private_openssh}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    other = pki.node_key_pair()
    (tmp_path / "b.pub").write_text(other.public_openssh)
    (tmp_path / "b.key").write_text(other.private_openssh)
    return files


def test_the_operators_own_ca_certificate_and_silo_keys_are_what_the_secrets_hold(tmp_path):
    own = _operator_material(tmp_path, ["fedpen-r1-superlink.ml.svc", "fl.example.org"])
    docs, _ = _generate(tmp_path, {
        "tls": {"ca_certfile": "ca.crt", "certfile": "tls.crt", "keyfile": "tls.key",
                "hosts": ["fl.example.org"]},
        "clients": [{"name": "a", "examples": "/srv/a", "public_key": "a.pub",
                     "private_key": "a.key"},
                    {"name": "b", "examples": "/srv/b", "public_key": "b.pub",
                     "private_key": "b.key"}]})
    link = _data(docs["Secret/fedpen-r1-superlink-credentials"])
    assert (link["ca.crt"], link["tls.crt"], link["tls.key"]) == (
        own["ca.crt"], own["tls.crt"], own["tls.key"])
    assert _data(docs["Secret/fedpen-r1-node-a-credentials"])["node.key"] == own["a.key"]
    assert _data(docs["Secret/fedpen-r1-flwr-run-credentials"])["a.pub"] == own["a.pub"]


@pytest.mark.parametrize("change, field, words", [
    ({"insecure": True}, "stages.fl.config.insecure", "for a local rehearsal"),
    ({"tls": {"ca_certfile": "ca.crt"}}, "stages.fl.config.tls", "together"),
    ({"tls": {"ca_certfile": "ca.crt", "certfile": "tls.crt", "keyfile": "tls.key"},
      "wrong_host": True}, "stages.fl.config.tls.certfile", "subjectAltName lacks"),
    # one client: min_clients 1 (the stage's own check refuses its default 2 first)
    ({"clients": [{"name": "a", "examples": "/a", "public_key": "a.pub"}], "min_clients": 1},
     "stages.fl.config.clients[0].private_key", "together"),
    ({"clients": [{"name": "a", "examples": "/a", "public_key": "a.pub",
                   "private_key": "b.key"}], "min_clients": 1},
     "stages.fl.config.clients[0].private_key", "not the pair of public_key"),
    ({"clients": [{"name": "a", "examples": "/a", "public_key": "tls.crt",
                   "private_key": "a.key"}], "min_clients": 1},
     "stages.fl.config.clients[0].public_key", "not an OpenSSH public key"),
])
def test_bad_credentials_exit_2_naming_the_field(tmp_path, capsys, change, field, words):
    wrong = change.pop("wrong_host", False)
    _operator_material(tmp_path, ["elsewhere.example.org"] if wrong
                       else ["fedpen-r1-superlink.ml.svc"])
    out = tmp_path / "m"
    assert baton(["k8s", str(_spec(tmp_path, {"clients": 2, **change})), "--out", str(out),
                  "--run-id", "r1", "--namespace", "ml"]) == 2
    err = capsys.readouterr().err
    assert field in err and words in err, err
    assert not out.exists()


def test_the_generated_keys_load_as_flower_loads_them(tmp_path):
    """--auth-supernode-private-key is read with load_ssh_private_key and must be EC on a NIST
    curve; the public key is registered after load_ssh_public_key (flwr 1.42's own checks)."""
    from cryptography.hazmat.primitives.asymmetric import ec
    from flwr.supercore.primitives.asymmetric import uses_nist_ec_curve

    keys = pki.node_key_pair()
    private = serialization.load_ssh_private_key(keys.private_openssh.encode(), None)
    public = serialization.load_ssh_public_key(keys.public_openssh.encode())
    assert isinstance(private, ec.EllipticCurvePrivateKey) and uses_nist_ec_curve(public)
