"""`baton k8s --runs-dir s3://...` with a federated stage (issue 38, item 5): no claim at all
(the SuperLink's database in an emptyDir, each SuperNode's silo copied from the bucket into an
emptyDir by its init container), every federation pod with the bucket's credentials and the
egress to reach it, the TLS/auth Secrets of issue 33 as on a volume; the manifests validate."""

from __future__ import annotations

from pathlib import Path

import yaml

from baton.k8s.object_storage import pod_specs
from baton.pipeline.commands.k8s import main

RUNS = "s3://team-bucket/ml/runs"
REHEARSAL = """\
pipeline: fed
stages:
  - {name: ingest, type: ingest, config: {source: penguins}}
  - name: fl
    type: federated
    inputs: {examples: ingest.examples}
    config: {clients: 2, rounds: 1}
"""


def _docs(out: Path) -> list[dict]:
    return [d for f in sorted(out.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]


def _generate(tmp_path: Path, spec_text: str, *flags: str) -> Path:
    spec, out = tmp_path / "fed.yaml", tmp_path / "o"
    spec.write_text(spec_text)
    assert main([str(spec), "--out", str(out), "--run-id", "r1", "--runs-dir", RUNS,
                 "--credentials-secret", "s3-credentials", *flags]) == 0
    assert main(["validate", str(out)]) == 0
    return out


def _by_kind_name(docs: list[dict]) -> dict[tuple[str, str], dict]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs if "metadata" in d}


def test_a_rehearsal_on_a_bucket_writes_no_claim_and_pulls_each_silo(tmp_path):
    out = _generate(tmp_path, REHEARSAL)
    docs = _docs(out)
    assert "PersistentVolumeClaim" not in [d["kind"] for d in docs]
    text = "\n".join(f.read_text() for f in out.rglob("*.yaml"))
    assert "persistentVolumeClaim" not in text and "/artifacts" not in text
    objs = _by_kind_name(docs)
    link = objs[("Deployment", "fed-r1-superlink")]["spec"]["template"]["spec"]
    assert {"name": "state", "emptyDir": {"sizeLimit": "1Gi"}} in link["volumes"]
    for i in range(2):
        pod = objs[("Deployment", f"fed-r1-node-client-{i}")]["spec"]["template"]["spec"]
        (pull,) = pod["initContainers"]
        silo = f"{RUNS}/fed/r1/fl.federation/clients/client-{i}"
        assert pull["command"] == ["python", "-m", "baton.storage.pull", "--after",
                                   "schema.json", silo, "/data"]
        assert {"name": "data", "emptyDir": {"sizeLimit": "10Gi"}} in pod["volumes"]
        (node,) = pod["containers"]
        assert {"name": "data", "mountPath": "/data", "readOnly": True} in node["volumeMounts"]
        assert "data-dir='/data' client='client-" in " ".join(node["args"])
    run = objs[("Job", "fed-r1-flwr-run")]["spec"]["template"]["spec"]
    args = run["containers"][0]["args"]
    assert args[args.index("--runs-dir") + 1] == RUNS and "--superlink" in args
    gate = run["initContainers"][0]
    assert gate["command"][:3] == ["python", "-m", "baton.storage.wait"]
    assert f"{RUNS}/fed/r1/ingest/lineage.json" in gate["command"]
    # every federation pod: the bucket's credentials, as the other pods get them
    fed_pods = [p for (kind, name), d in objs.items() if kind in ("Deployment", "Job")
                and name.startswith("fed-r1-") for p in pod_specs(d)]
    assert len(fed_pods) == 5  # data Job, SuperLink, two SuperNodes, run Job
    for pod in fed_pods:
        for c in [*pod.get("initContainers", []), *pod["containers"]]:
            assert {"secretRef": {"name": "s3-credentials"}} in c["envFrom"], c["name"]


def test_the_federation_pods_may_reach_the_bucket_and_keep_their_secrets(tmp_path):
    out = _generate(tmp_path, REHEARSAL, "--service-account", "baton")
    objs = _by_kind_name(_docs(out))
    policy = objs[("NetworkPolicy", "fed-r1-object-storage")]["spec"]
    components = policy["podSelector"]["matchExpressions"][0]["values"]
    assert {"superlink", "supernode", "federated-run"} <= set(components)
    assert policy["egress"] == [{"ports": [{"protocol": "TCP", "port": 443}]}]
    # the federation's own policies (the SuperLink's port) are there as on a volume
    assert ("NetworkPolicy", "fed-r1-federation") in objs
    # issue 33: one Secret per pod, mounted at the Flower credentials directory
    secrets = {name for kind, name in objs if kind == "Secret"}
    assert secrets == {"fed-r1-superlink-credentials", "fed-r1-node-client-0-credentials",
                       "fed-r1-node-client-1-credentials", "fed-r1-flwr-run-credentials"}
    link = objs[("Deployment", "fed-r1-superlink")]["spec"]["template"]["spec"]
    assert link["serviceAccountName"] == "baton"
    (cred,) = [v for v in link["volumes"] if v["name"] == "flower-credentials"]
    assert cred["secret"]["secretName"] == "fed-r1-superlink-credentials"
    assert "--enable-supernode-auth" in link["containers"][0]["args"]


def test_listed_silos_on_buckets_are_pulled_and_ones_on_volumes_keep_their_claim(tmp_path):
    out = _generate(tmp_path, """\
pipeline: fed
stages:
  - name: fl
    type: federated
    config:
      clients:
        - {name: hospital_a, examples: "s3://hospital-a/penguins/examples"}
        - {name: hospital_b, examples: /mnt/silo/examples}
""")
    objs = _by_kind_name(_docs(out))
    claims = [name for kind, name in objs if kind == "PersistentVolumeClaim"]
    assert claims == ["fed-data-hospital-b"]  # the silo's own volume; no claim for the run
    a = objs[("Deployment", "fed-r1-node-hospital-a")]["spec"]["template"]["spec"]
    assert a["initContainers"][0]["command"][-2:] == ["s3://hospital-a/penguins/examples",
                                                      "/data"]
    b = objs[("Deployment", "fed-r1-node-hospital-b")]["spec"]["template"]["spec"]
    assert b["initContainers"][0]["name"] == "wait-for-data"
    (data,) = [v for v in b["volumes"] if v["name"] == "data"]
    assert data["persistentVolumeClaim"]["claimName"] == "fed-data-hospital-b"
