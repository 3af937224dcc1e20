"""`baton k8s` for a spec with a federated stage: the Flower SuperLink, one SuperNode per client
with only its own data, the run Job; all validated like the other manifests."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from baton.k8s import federated
from baton.k8s.errors import ManifestError
from baton.k8s.federated import Federation
from baton.k8s.options import DNS1035, DNS1123_LABEL
from baton.k8s.render import build_all
from baton.k8s.validate import validate_doc, validate_file
from baton.pipeline.cli import main as baton
from baton.pipeline.commands.k8s import main

from .conftest import make_options

SILOS = [
    {"name": "Hospital A", "examples": "/srv/hospital-a/examples"},
    {"name": "clinic_b", "examples": "/mnt/b/examples"},
    {"name": "lab.c", "examples": "data/c", "claim": "lab-c-examples"},
]


def _spec(tmp_path: Path, clients, train: bool = False, **config) -> Path:
    stages = [
        {"name": "ingest", "type": "ingest", "config": {"source": "penguins"}},
        {"name": "fl", "type": "federated", "inputs": {"examples": "ingest.examples"},
         "config": {"clients": clients, **config}},
        {"name": "evaluate", "type": "evaluate",
         "inputs": {"model": "fl.model", "examples": "ingest.examples"}},
    ]
    if train:
        stages.insert(2, {"name": "train", "type": "train",
                          "inputs": {"examples": "ingest.examples"}})
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "fed.yaml"
    path.write_text(yaml.safe_dump({"pipeline": "fedpen", "stages": stages}, sort_keys=False))
    return path


def _generate(tmp_path: Path, clients, capsys=None, target: str = "jobset",
              **kwargs) -> dict[str, list[dict]]:
    out = tmp_path / "m"
    assert main([str(_spec(tmp_path, clients, **kwargs)), "--out", str(out), "--run-id", "r1",
                 "--namespace", "ml", "--target", target]) == 0
    assert validate_file(out) == []
    kust = yaml.safe_load((out / "kustomization.yaml").read_text())
    return {name: [d for d in yaml.safe_load_all((out / name).read_text()) if d]
            for name in kust["resources"]}


def _nodes(files: dict[str, list[dict]]) -> list[dict]:
    return [d for d in files["federated-supernodes.yaml"] if d["kind"] == "Deployment"]


def _pod(deploy: dict) -> dict:
    return deploy["spec"]["template"]["spec"]


def _node_config(deploy: dict) -> str:
    args = _pod(deploy)["containers"][0]["args"]
    return args[args.index("--node-config") + 1]


def test_rehearsal_writes_a_superlink_three_supernodes_and_the_run_job(tmp_path, capsys):
    files = _generate(tmp_path, 3)
    said = capsys.readouterr().out
    assert "SuperNode x3 rehearsal: client-0, client-1, client-2" in said
    assert "tfjob.yaml" not in files  # no train stage: the federation is the training
    order = list(files)
    assert order.index("data-job.yaml") < order.index("federated-superlink.yaml") \
        < order.index("federated-supernodes.yaml") < order.index("federated-run-job.yaml") \
        < order.index("release-job.yaml")
    nodes = _nodes(files)
    assert [n["metadata"]["name"] for n in nodes] == [f"fedpen-r1-node-client-{i}" for i in range(3)]
    for i, node in enumerate(nodes):
        assert node["spec"]["replicas"] == 1 and node["spec"]["strategy"] == {"type": "Recreate"}
        c = _pod(node)["containers"][0]
        assert c["command"] == ["python", "-m", "baton.pipeline.federated.supernode"]
        assert c["args"][:6] == [
            "--root-certificates", "/var/run/baton/flower/ca.crt",
            "--auth-supernode-private-key", "/var/run/baton/flower/node.key",
            "--superlink", "fedpen-r1-superlink.ml.svc:9091"]
        assert "--insecure" not in c["args"]
        assert _node_config(node) == f"data-dir='/data' client='client-{i}'"
        assert {"name": "FLWR_HOME", "value": "/tmp/flwr"} in c["env"]
        assert node["metadata"]["labels"]["baton.dev/federated-client"] == f"client-{i}"
    # the release Job waits for the federated model, as it would for the train stage's
    release = files["release-job.yaml"][0]
    gate = release["spec"]["template"]["spec"]["initContainers"][0]["command"][-1]
    assert "/artifacts/runs/fedpen/r1/fl/model" in gate
    assert "fl" not in files["data-job.yaml"][0]["spec"]["template"]["spec"]["containers"][0]["args"]


def test_each_supernode_mounts_only_its_own_data(tmp_path):
    for clients in (3, SILOS):
        files = _generate(tmp_path / str(isinstance(clients, int)), clients)
        claims = {d["metadata"]["name"] for d in files["federated-supernodes.yaml"]
                  if d["kind"] == "PersistentVolumeClaim"}
        seen = set()
        for node in _nodes(files):
            pod = _pod(node)
            pvcs = [v for v in pod["volumes"] if "persistentVolumeClaim" in v]
            assert [v["name"] for v in pvcs] == ["data"], node["metadata"]["name"]
            claim = pvcs[0]["persistentVolumeClaim"]["claimName"]
            for c in [*pod["initContainers"], *pod["containers"]]:
                data = [m for m in c["volumeMounts"] if m["name"] == "data"]
                assert data and all(m["mountPath"] == "/data" and m["readOnly"] for m in data)
                # and an emptyDir at /tmp (the read-only root file system's writable place)
                assert {m["name"] for m in c["volumeMounts"]} <= {
                    "data", "pipeline-spec", "flwr-home", "flower-credentials", "tmp"}
            client = re.search(r"client='([^']*)'", _node_config(node)).group(1)
            mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "data")
            if isinstance(clients, int):  # its silo of the artifacts claim, no wider
                assert claim == "fedpen-artifacts"
                assert mount["subPath"] == f"runs/fedpen/r1/fl.federation/clients/{client}"
                seen.add(mount["subPath"])
            else:  # a claim of its own
                assert "subPath" not in mount and pvcs[0]["persistentVolumeClaim"]["readOnly"]
                assert claim in claims or claim == "lab-c-examples"
                seen.add(claim)
        assert len(seen) == len(_nodes(files)) == 3


def test_silos_get_their_own_claims_and_dns_safe_names(tmp_path):
    files = _generate(tmp_path, SILOS)
    nodes = _nodes(files)
    assert [n["metadata"]["name"] for n in nodes] == [
        "fedpen-r1-node-hospital-a", "fedpen-r1-node-clinic-b", "fedpen-r1-node-lab-c"]
    assert [_node_config(n) for n in nodes] == [
        "data-dir='/data' client='Hospital A'", "data-dir='/data' client='clinic_b'",
        "data-dir='/data' client='lab.c'"]
    assert nodes[0]["metadata"]["annotations"]["baton.dev/examples"] == "/srv/hospital-a/examples"
    claims = [d for d in files["federated-supernodes.yaml"] if d["kind"] == "PersistentVolumeClaim"]
    # lab.c names a claim of its own (already holding its data): none is written for it
    assert [c["metadata"]["name"] for c in claims] == ["fedpen-data-hospital-a", "fedpen-data-clinic-b"]
    assert all(c["spec"]["accessModes"] == ["ReadWriteOnce"] for c in claims)
    for docs in files.values():
        for doc in docs:
            name = doc["metadata"]["name"]
            assert DNS1123_LABEL.match(name) and len(name) <= 63, name
            if doc["kind"] == "Service":
                assert DNS1035.match(name)
            for key, value in doc["metadata"].get("labels", {}).items():
                assert re.fullmatch(r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]?", value), (key, value)


def test_the_service_selects_the_superlink_pod_and_nothing_else(tmp_path):
    files = _generate(tmp_path, 2)
    pvc, deploy, svc = files["federated-superlink.yaml"]
    assert (pvc["kind"], deploy["kind"], svc["kind"]) == ("PersistentVolumeClaim", "Deployment", "Service")
    selector = svc["spec"]["selector"]

    def selects(d):
        labels = d["spec"]["template"]["metadata"]["labels"]
        return all(labels.get(k) == v for k, v in selector.items())

    assert selects(deploy)
    assert not any(selects(n) for n in _nodes(files))
    assert svc["spec"]["type"] == "ClusterIP"
    assert svc["spec"]["ports"] == [{"name": "flower", "port": 9091, "targetPort": "flower", "protocol": "TCP"}]
    assert deploy["spec"]["strategy"] == {"type": "Recreate"} and deploy["spec"]["replicas"] == 1
    c = _pod(deploy)["containers"][0]
    assert c["ports"][0] == {"name": "flower", "containerPort": 9091, "protocol": "TCP"}
    d = "/var/run/baton/flower"
    assert c["command"] + c["args"] == [
        "python", "-m", "baton.pipeline.federated.superlink",
        "--ssl-ca-certfile", f"{d}/ca.crt", "--ssl-certfile", f"{d}/tls.crt",
        "--ssl-keyfile", f"{d}/tls.key", "--enable-supernode-auth", "--isolation", "process",
        "--superexec-auth-secret-file", f"{d}/superexec.secret", "--host", "0.0.0.0",
        "--port", "9091", "--database", "/state/superlink.db",
        "--disable-runtime-dependency-installation"]
    assert {"name": "BATON_CONTROL_TOKEN_FILE", "value": f"{d}/control.token"} in c["env"]
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    vols = {v["name"]: v for v in _pod(deploy)["volumes"]}
    assert vols[mounts["/state"]["name"]]["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
    assert not mounts["/artifacts"].get("readOnly")  # the ServerApp writes the model there
    assert {e["name"]: e["value"] for e in c["env"]}.items() >= {
        "FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1",
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1", "FLWR_HOME": "/tmp/flwr"}.items()


def test_the_run_job_runs_the_stage_against_the_superlink(tmp_path):
    """No plan step and no shell around `flwr`: the stage itself, as the data Job runs ingest,
    with `--superlink` naming the Service (tests/k8s/test_federated_run_job.py runs it)."""
    files = _generate(tmp_path, 2)
    (job,) = files["federated-run-job.yaml"]
    pod = job["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == ["wait-for-inputs", "wait-for-superlink"]
    assert "ingest/examples" in pod["initContainers"][0]["command"][-1]
    assert "fedpen-r1-superlink.ml.svc" in pod["initContainers"][1]["command"][-1]
    (c,) = pod["containers"]
    assert c["command"] == ["baton"]
    assert c["args"] == ["run", "/etc/baton/pipeline.yaml", "--run-id", "r1", "--only", "fl",
                         "--runs-dir", "/artifacts/runs",
                         "--superlink", "fedpen-r1-superlink.ml.svc:9091",
                         "--superlink-credentials", "/var/run/baton/flower"]
    (data,) = files["data-job.yaml"]
    data_args = data["spec"]["template"]["spec"]["containers"][0]["args"]
    assert c["args"][:-4] == [*data_args[:5], "fl", *data_args[6:]]  # same run id and runs dir
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert not mounts["/artifacts"].get("readOnly") and "/etc/baton" in mounts
    assert pod["restartPolicy"] == "Never"
    assert federated.plan_path(make_options(pipeline="fedpen", run_id="r1"),
                               Federation.from_config("fl", {"clients": 2})) == \
        "/artifacts/runs/fedpen/r1/fl.federation/plan.json"


def test_resources_come_from_the_stage_for_nodes_and_the_cluster_for_the_superlink(tmp_path):
    opts = make_options()
    fed = Federation.from_config("fl", {"clients": 2, "resources": {"cpu": "500m", "memory": "1Gi"},
                                        "k8s": {"data_size": "50Gi"}})
    files = build_all(opts, fed)
    for doc in (d for docs in files.values() for d in docs):
        assert validate_doc(doc) == [], doc["metadata"]["name"]
    node = _nodes(files)[0]
    assert _pod(node)["containers"][0]["resources"] == {
        "requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "500m", "memory": "1Gi"}}
    link = files["federated-superlink.yaml"][1]
    assert _pod(link)["containers"][0]["resources"] == opts.resources.to_k8s()
    assert "tfjob.yaml" in files  # JobOptions.tfjob defaults to True


def test_a_spec_with_train_and_federated_gets_both(tmp_path):
    files = _generate(tmp_path, 2, target="tfjob", train=True)
    assert "tfjob.yaml" in files and "federated-run-job.yaml" in files


def test_a_spec_with_train_and_federated_is_no_jobset(tmp_path, capsys):
    """The release step needs the federation's outputs and the training's: one JobSet cannot
    order both (the federation is Deployments and a Job beside it): exit 2 naming --target."""
    out = tmp_path / "m"
    assert baton(["k8s", str(_spec(tmp_path, 2, train=True)), "--out", str(out), "--run-id", "r1",
                  "--target", "trainjob"]) == 2
    err = capsys.readouterr().err
    assert "--target: a spec with a federated stage and a train stage cannot be one trainjob" in err
    assert not out.exists()


def test_long_client_names_stay_within_63_characters_and_distinct():
    opts = make_options()
    long = "x" * 80
    fed = Federation.from_config("fl", {"clients": [{"name": long + "a", "examples": "/a"},
                                                    {"name": long + "b", "examples": "/b"}]})
    names = [federated.node_name(opts, c) for c in fed.clients]
    assert all(len(n) <= 63 and DNS1123_LABEL.match(n) for n in names)
    assert len(set(names)) == 2


@pytest.mark.parametrize("config,field,received", [
    ({"clients": 0}, "stages.fl.config.clients", "Received: 0"),
    ({"clients": -2}, "stages.fl.config.clients", "Received: -2"),
    ({"clients": []}, "stages.fl.config.clients", "Received: []"),
    ({}, "stages.fl.config.clients", "Received: None"),
    ({"clients": True}, "stages.fl.config.clients", "Received: True"),
    ({"clients": "3"}, "stages.fl.config.clients", "Received: '3'"),
    ({"clients": [{"name": "a", "examples": "/a"}, {"name": "a", "examples": "/b"}]},
     "stages.fl.config.clients[1].name", "Received: ['a', 'a']"),
    ({"clients": [{"name": "Site A", "examples": "/a"}, {"name": "site_a", "examples": "/b"}]},
     "stages.fl.config.clients[1].name", "'site-a' (as 'Site A' does)"),
    # one client: min_clients 1 (the stage's own check refuses its default 2 first)
    ({"clients": [{"name": "__", "examples": "/a"}], "min_clients": 1}, "stages.fl.config.clients[0].name", "Received: '__'"),
    ({"clients": [{"name": "", "examples": "/a"}], "min_clients": 1}, "stages.fl.config.clients[0].name", "Received: ''"),
    ({"clients": [{"name": "a"}]}, "stages.fl.config.clients[0].examples", "required setting is missing"),
    ({"clients": ["a"]}, "stages.fl.config.clients[0]", "Received: 'a'"),
    ({"clients": [{"name": "a", "examples": "/a", "path": "/x"}], "min_clients": 1}, "stages.fl.config.clients[0].path", "'path'"),
    ({"clients": [{"name": "a", "examples": "/a", "claim": "Bad_Claim"}], "min_clients": 1},
     "stages.fl.config.clients[0].claim", "'Bad_Claim'"),
    ({"clients": 2, "resources": {"cpu": "-1"}}, "stages.fl.config.resources.cpu", "'-1'"),
    ({"clients": 2, "resources": {"cpus": 2}}, "stages.fl.config.resources.cpus", "'cpus'"),
    ({"clients": 2, "k8s": {"data_size": "lots"}}, "stages.fl.config.k8s.data_size", "'lots'"),
])
def test_bad_federations_are_refused_naming_the_field_and_what_was_received(config, field, received):
    with pytest.raises(ManifestError) as info:
        Federation.from_config("fl", config)
    assert info.value.field == field
    assert received in str(info.value)


def test_bad_clients_exit_2_through_the_cli_naming_the_spec_field(tmp_path, capsys):
    spec = _spec(tmp_path, [{"name": "a", "examples": "/a"}, {"name": "A", "examples": "/b"}])
    assert baton(["k8s", str(spec), "--out", str(tmp_path / "o"), "--run-id", "r1"]) == 2
    err = capsys.readouterr().err
    assert f"spec {spec}: stages.fl.config.clients[1].name" in err and "'A'" in err
    assert "Traceback" not in err and not (tmp_path / "o").exists()
    spec = _spec(tmp_path, 0)
    assert baton(["k8s", str(spec), "--out", str(tmp_path / "o"), "--run-id", "r1"]) == 2
    assert "stages.fl.config.clients: a federation needs at least one client. Received: 0" in capsys.readouterr().err


def test_two_federated_stages_are_refused(tmp_path, capsys):
    spec = _spec(tmp_path, 2)
    data = yaml.safe_load(spec.read_text())
    data["stages"].append({"name": "fl2", "type": "federated", "config": {"clients": 2}})
    spec.write_text(yaml.safe_dump(data))
    assert baton(["k8s", str(spec), "--out", str(tmp_path / "o")]) == 2
    assert "fl, fl2" in capsys.readouterr().err
