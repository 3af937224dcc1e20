"""Validation of hand-edited manifests: every violation, each with its JSON path and rule."""

from __future__ import annotations

import copy

import pytest
import yaml

from baton.k8s import kube_schemas
from baton.k8s.crd import tfjob_schema, to_json_schema
from baton.k8s.render import build_all
from baton.k8s.validate import validate_doc, validate_file

from .conftest import make_options

W = "spec.tfReplicaSpecs.Worker"
WC = f"{W}.template.spec.containers[0]"


def _set(doc: dict, path: list, value) -> None:
    for key in path[:-1]:
        doc = doc[key]
    doc[path[-1]] = value


def _del(doc: dict, path: list) -> None:
    for key in path[:-1]:
        doc = doc[key]
    del doc[path[-1]]


WORKER = ["spec", "tfReplicaSpecs", "Worker"]
CONTAINER = [*WORKER, "template", "spec", "containers", 0]

NEGATIVE = [
    # (edit, expected path, rule)
    (lambda d: _set(d, ["metadata", "name"], "Penguins_1"), "metadata.name", "webhook"),
    (lambda d: _set(d, ["metadata", "name"], "1penguins"), "metadata.name", "webhook"),
    (lambda d: _set(d, [*WORKER, "replicas"], "two"), f"{W}.replicas", "schema"),
    (lambda d: _set(d, [*WORKER, "replicas"], 2**31), f"{W}.replicas", "schema"),
    (lambda d: _set(d, [*WORKER, "restartPolicyy"], "ExitCode"), f"{W}.restartPolicyy", "schema"),
    (lambda d: _set(d, [*WORKER, "restartPolicy"], "Sometimes"), f"{W}.restartPolicy", "baton"),
    (lambda d: _del(d, [*CONTAINER, "image"]), f"{WC}.image", "webhook"),
    (lambda d: _set(d, [*CONTAINER, "name"], "trainer"), f"{W}.template.spec.containers", "webhook"),
    (lambda d: _set(d, [*WORKER, "template", "spec", "containers"], []), f"{W}.template.spec.containers", "webhook"),
    (lambda d: _set(d, [*CONTAINER, "resources", "requests", "cpu"], "-x"), f"{WC}.resources.requests.cpu", "schema"),
    (lambda d: _set(d, [*CONTAINER, "ports", 0, "containerPort"], "2222"), f"{WC}.ports[0].containerPort", "schema"),
    (lambda d: _del(d, [*CONTAINER, "ports", 0, "containerPort"]), f"{WC}.ports[0].containerPort", "schema"),
    (lambda d: _set(d, [*CONTAINER, "env", 0], {"value": "1"}), f"{WC}.env[0].name", "schema"),
    (lambda d: _set(d, [*CONTAINER, "imagePullPolicy"], 3), f"{WC}.imagePullPolicy", "schema"),
    (lambda d: _set(d, ["spec", "tfReplicaSpecs", "Master"], copy.deepcopy(d["spec"]["tfReplicaSpecs"]["Chief"])),
     "spec.tfReplicaSpecs", "webhook"),
    (lambda d: _set(d, ["spec", "tfReplicaSpecs", "Chief", "replicas"], 2), "spec.tfReplicaSpecs.Chief.replicas", "webhook"),
    (lambda d: _set(d, ["spec", "tfReplicaSpecs", "Trainer"], copy.deepcopy(d["spec"]["tfReplicaSpecs"]["PS"])),
     "spec.tfReplicaSpecs.Trainer", "baton"),
    (lambda d: _set(d, ["spec", "runPolicy", "backoffLimit"], -1), "spec.runPolicy.backoffLimit", "baton"),
    (lambda d: _set(d, ["spec", "runPolicy", "cleanPodPolicy"], "Always"), "spec.runPolicy.cleanPodPolicy", "baton"),
    (lambda d: _set(d, ["spec", "runPolicy", "activeDeadlineSeconds"], "1h"), "spec.runPolicy.activeDeadlineSeconds", "schema"),
    (lambda d: _set(d, ["spec", "tfReplicaSpecs"], {}), "spec.tfReplicaSpecs", "webhook"),
    (lambda d: _set(d, ["spec", "successPolicy"], "AnyWorker"), "spec.successPolicy", "baton"),
    (lambda d: _set(d, ["spec", "runPolicy", "suspend"], "no"), "spec.runPolicy.suspend", "schema"),
    (lambda d: _set(d, [*WORKER, "template", "spec", "volumes", 0, "persistentVolumeClaim"], {}),
     f"{W}.template.spec.volumes[0].persistentVolumeClaim.claimName", "schema"),
    (lambda d: _del(d, ["spec"]), "spec", "schema"),
    (lambda d: _set(d, ["kind"], "TFjob"), "kind", "schema"),
]


@pytest.mark.parametrize("edit,path,rule", NEGATIVE, ids=[f"{i}:{p}" for i, (_, p, _r) in enumerate(NEGATIVE)])
def test_hand_edited_tfjob_violations_name_the_path(tfjob, edit, path, rule):
    assert validate_doc(tfjob) == []
    edit(tfjob)
    found = validate_doc(tfjob)
    assert any(v.path == path and v.rule == rule for v in found), [str(v) for v in found]


def test_every_violation_is_reported_not_just_the_first(tfjob):
    tfjob["metadata"]["name"] = "Bad_Name"
    tfjob["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = "two"
    tfjob["spec"]["tfReplicaSpecs"]["PS"]["restartPolicyy"] = "ExitCode"
    del tfjob["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]["containers"][0]["image"]
    paths = {v.path for v in validate_doc(tfjob)}
    assert paths >= {"metadata.name", f"{W}.replicas", "spec.tfReplicaSpecs.PS.restartPolicyy",
                     "spec.tfReplicaSpecs.Chief.template.spec.containers[0].image"}


DEPLOY_NEGATIVE = [
    (lambda d: _del(d, ["spec", "selector"]), "spec.selector"),
    (lambda d: _set(d, ["spec", "replicas"], "one"), "spec.replicas"),
    (lambda d: _set(d, ["spec", "template", "spec", "containers", 0, "readinessProbe", "httpGet", "port"], [8501]),
     "spec.template.spec.containers[0].readinessProbe.httpGet.port"),
    (lambda d: _set(d, ["spec", "template", "spec", "containers", 0, "ports", 0, "containerPortt"], 1),
     "spec.template.spec.containers[0].ports[0].containerPortt"),
]


@pytest.mark.parametrize("edit,path", DEPLOY_NEGATIVE)
def test_deployment_against_kubernetes_schema(edit, path):
    deploy = copy.deepcopy(build_all(make_options())["serving-deployment.yaml"][0])
    edit(deploy)
    assert path in {v.path for v in validate_doc(deploy)}


def test_service_and_job_against_kubernetes_schema():
    files = build_all(make_options())
    svc = copy.deepcopy(files["serving-service.yaml"][0])
    svc["spec"]["ports"][0]["port"] = "grpc"
    job = copy.deepcopy(files["data-job.yaml"][0])
    job["spec"]["template"]["spec"]["restartPolicy"] = 0
    assert "spec.ports[0].port" in {v.path for v in validate_doc(svc)}
    assert "spec.template.spec.restartPolicy" in {v.path for v in validate_doc(job)}


def test_kubernetes_schema_finds_unknown_fields_and_types():
    deploy = copy.deepcopy(build_all(make_options())["serving-deployment.yaml"][0])
    c = deploy["spec"]["template"]["spec"]["containers"][0]
    c["imagePullPolicy"] = 3
    c["livenesProbe"] = {}
    found = {v.path: v.message for v in kube_schemas.check(deploy)}
    assert found["spec.template.spec.containers[0].imagePullPolicy"] == (
        "expected string. Received: 3")
    assert found["spec.template.spec.containers[0].livenesProbe"] == (
        "unknown field 'livenesProbe'")
    clean = build_all(make_options())["serving-deployment.yaml"][0]
    assert kube_schemas.check(clean) == []
    assert kube_schemas.source().startswith("kubernetes-validate")


def test_validate_file_labels_documents_and_reports_yaml_errors(tmp_path, tfjob):
    tfjob["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = -3
    good = build_all(make_options())["serving-service.yaml"][0]
    f = tmp_path / "edited.yaml"
    f.write_text(yaml.safe_dump_all([good, tfjob]))
    (found,) = validate_file(f)
    assert found.path == f"{W}.replicas" and "[1] (TFJob)" in found.source
    assert "Received: -3" in found.message
    bad = tmp_path / "broken.yaml"
    bad.write_text("kind: [unclosed\n")
    assert "not valid YAML" in validate_file(bad)[0].message


def test_crd_translation_rules():
    schema = tfjob_schema()
    replica = schema["properties"]["spec"]["properties"]["tfReplicaSpecs"]["additionalProperties"]
    assert replica["additionalProperties"] is False
    assert replica["properties"]["replicas"]["maximum"] == 2**31 - 1
    assert to_json_schema({"x-kubernetes-int-or-string": True})["anyOf"] == [
        {"type": "integer"}, {"type": "string"}]
    assert "additionalProperties" not in to_json_schema(
        {"type": "object", "properties": {"a": {}}, "x-kubernetes-preserve-unknown-fields": True})
