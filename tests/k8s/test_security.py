"""Pods that let no one in (issue 33): the restricted Pod Security Standard on every pod of every
target, NetworkPolicies that allow exactly what each part needs, a namespace that enforces it,
no service-account token, pinned images; `baton k8s validate` runs the same rules."""

from __future__ import annotations

import copy

import pytest
import yaml

from baton.k8s import security
from baton.k8s.federated import Federation
from baton.k8s.render import build_all, kustomization
from baton.k8s.validate import _selects, check_set, validate_doc

from .conftest import make_options

TARGETS = ["jobset", "trainjob", "tfjob"]


def _docs(target: str, federated: bool = False, **kwargs) -> list[dict]:
    opts = make_options("parameter_server", 2, 1, target=target, namespace="ml", **kwargs)
    fed = Federation.from_config("fl", {"clients": 2}, inputs=()) if federated else None
    if fed is not None:
        opts = make_options(target=target, namespace="ml", tfjob=False, release_stages=())
    return [d for ds in build_all(opts, fed).values() for d in ds]


def _templates(docs: list[dict]) -> list[tuple[str, dict]]:
    return [(f"{d['kind']}/{d['metadata']['name']}:{path}", t) for d in docs
            for path, t in security.pod_templates(d)]


@pytest.mark.parametrize("target,federated", [(t, False) for t in TARGETS] + [("tfjob", True)])
def test_every_pod_of_every_kind_is_restricted(target, federated):
    docs = _docs(target, federated)
    templates = _templates(docs)
    assert len(templates) >= 4
    kinds = {where.split("/")[0] for where, _ in templates}
    assert "Deployment" in kinds  # serving (and a federation's SuperLink and SuperNodes)
    for where, t in templates:
        pod = t["spec"]
        assert pod["automountServiceAccountToken"] is False, where
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 10001
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, where
        assert {"name": "tmp", "emptyDir": {}} in pod["volumes"], where
        for c in [*pod.get("initContainers", []), *pod["containers"]]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}, where
            assert sc["readOnlyRootFilesystem"] is True and sc["privileged"] is False, where
            assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"], where
            assert ":latest" not in c["image"] and c["imagePullPolicy"] == "Always", where
        assert security.check_pod(pod, where) == [], where
    for d in docs:
        assert validate_doc(d) == [], d["kind"]


def test_the_model_server_no_longer_runs_as_root():
    [deploy] = [d for d in _docs("jobset") if d["kind"] == "Deployment"]
    pod = deploy["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"].startswith("tensorflow/serving:")
    assert pod["securityContext"]["runAsUser"] == 10001 and pod["securityContext"]["runAsNonRoot"]
    limits = pod["containers"][0]["resources"]["limits"]
    assert limits["cpu"] == "1" and limits["memory"] == "2Gi"


def _policies(docs: list[dict]) -> dict[str, dict]:
    return {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "NetworkPolicy"}


@pytest.mark.parametrize("target,federated", [(t, False) for t in TARGETS] + [("tfjob", True)])
def test_network_policies_allow_exactly_what_each_part_needs(target, federated):
    docs = _docs(target, federated)
    policies = _policies(docs)
    job = "penguins-20261129-221500-3fa2"
    deny = policies[f"{job}-default-deny"]
    assert deny["policyTypes"] == ["Ingress", "Egress"] and deny["ingress"] == []
    assert deny["egress"][0]["ports"] == [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    train = policies[f"{job}-training"]
    assert train["ingress"][0]["ports"] == [{"protocol": "TCP", "port": 2222}]
    assert train["ingress"][0]["from"] == [{"podSelector": train["podSelector"]}]
    serving = policies["penguins-serving"]
    assert [p["port"] for p in serving["ingress"][0]["ports"]] == [8500, 8501]
    for where, t in _templates(docs):  # every pod is under the default deny
        labels = t["metadata"]["labels"]
        assert _selects(deny["podSelector"], labels), where
        component = labels["app.kubernetes.io/component"]
        assert _selects(train["podSelector"], labels) == (component == "train"), where
    if federated:
        link = policies[f"{job}-federation"]
        assert link["ingress"][0]["ports"] == [{"protocol": "TCP", "port": 9091}]
        clients = link["ingress"][0]["from"][0]["podSelector"]["matchExpressions"][0]["values"]
        assert clients == ["supernode", "federated-run"]
        assert f"{job}-federation-clients" in policies


def test_object_storage_opens_https_only_when_the_spec_names_it():
    assert "penguins-20261129-221500-3fa2-object-storage" not in _policies(_docs("jobset"))
    docs = _docs("jobset", spec_text="runs_dir: s3://bucket/runs\n")
    egress = _policies(docs)["penguins-20261129-221500-3fa2-object-storage"]["egress"]
    assert egress == [{"ports": [{"protocol": "TCP", "port": 443}]}]


def test_the_namespace_enforces_the_restricted_standard():
    [ns] = [d for d in _docs("jobset") if d["kind"] == "Namespace"]
    assert ns["metadata"] == {"name": "ml", "labels": {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "v1.30",
        "pod-security.kubernetes.io/warn": "restricted",
        "pod-security.kubernetes.io/audit": "restricted"}}
    bad = copy.deepcopy(ns)
    bad["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] = "baseline"
    assert [v.rule for v in validate_doc(bad)] == ["security"]


C = "spec.replicatedJobs[1].template.spec.template.spec"
EDITS = [
    (lambda p: p.update(hostNetwork=True), f"{C}.hostNetwork", "pss"),
    (lambda p: p.update(automountServiceAccountToken=True), f"{C}.automountServiceAccountToken", "security"),
    (lambda p: p["securityContext"].update(runAsUser=0), f"{C}.securityContext.runAsUser", "pss"),
    (lambda p: p["securityContext"].update(seccompProfile={"type": "Unconfined"}),
     f"{C}.securityContext.seccompProfile.type", "pss"),
    (lambda p: p["volumes"].append({"name": "h", "hostPath": {"path": "/"}}), f"{C}.volumes[3]", "pss"),
    (lambda p: p["containers"][0]["securityContext"].update(privileged=True),
     f"{C}.containers[0].securityContext.privileged", "pss"),
    (lambda p: p["containers"][0]["securityContext"].update(allowPrivilegeEscalation=True),
     f"{C}.containers[0].securityContext.allowPrivilegeEscalation", "pss"),
    (lambda p: p["containers"][0]["securityContext"].update(capabilities={"add": ["SYS_ADMIN"], "drop": ["ALL"]}),
     f"{C}.containers[0].securityContext.capabilities.add", "pss"),
    (lambda p: p["containers"][0]["securityContext"].pop("capabilities"),
     f"{C}.containers[0].securityContext.capabilities.drop", "pss"),
    (lambda p: p["containers"][0]["securityContext"].update(readOnlyRootFilesystem=False),
     f"{C}.containers[0].securityContext.readOnlyRootFilesystem", "security"),
    (lambda p: p["containers"][0].update(image="baton:latest"), f"{C}.containers[0].image", "security"),
    (lambda p: p["containers"][0]["ports"][0].update(hostPort=2222), f"{C}.containers[0].ports[0].hostPort", "pss"),
]


@pytest.mark.parametrize("edit,path,rule", EDITS, ids=[e[1].rsplit(".", 1)[-1] + f"-{i}" for i, e in enumerate(EDITS)])
def test_hand_edited_pods_are_refused_naming_the_field(edit, path, rule):
    [js] = [copy.deepcopy(d) for d in _docs("jobset") if d["kind"] == "JobSet"]
    edit(js["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"])
    found = [(v.path, v.rule) for v in validate_doc(js) if v.rule in ("pss", "security")]
    assert (path, rule) in found, found


def test_a_directory_whose_pods_no_policy_selects_is_refused():
    opts = make_options(target="jobset", namespace="ml")
    files = build_all(opts)
    docs = [d for name, ds in files.items() if name != "network-policies.yaml" for d in ds]
    docs.append(kustomization(opts, list(files)))
    found = [v for _, v in check_set(docs)]
    assert found and all(v.rule == "security" and "no NetworkPolicy of this directory selects" in v.message
                         for v in found)
    no_ns = [d for d in docs if d["kind"] != "Namespace"] + [
        d for d in files["network-policies.yaml"]]
    assert [v.path for _, v in check_set(no_ns)] == ["kind"]


def test_the_checked_in_base_is_restricted_too():
    from pathlib import Path

    base = Path(__file__).resolve().parents[2] / "k8s" / "base"
    docs = [d for f in sorted(base.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]
    assert any(d["kind"] == "NetworkPolicy" for d in docs)
    for where, t in _templates([d for d in docs if d.get("kind") != "Kustomization"]):
        assert security.check_pod(t["spec"], where) == [], where
