"""Generation: both strategies produce manifests that validate; bad topologies are refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from baton.k8s.errors import ManifestError
from baton.k8s.options import JobOptions, Resources, RunPolicy, Topology
from baton.k8s.render import build_all, write_manifests
from baton.k8s.tfjob import build_tfjob
from baton.k8s.validate import validate_doc, validate_file

from .conftest import make_options

TOPOLOGIES = [
    ("multi_worker_mirrored", 2, 0, 1, {"Chief": 1, "Worker": 1}),
    ("multi_worker_mirrored", 4, 0, 0, {"Worker": 4}),
    ("parameter_server", 2, 1, 1, {"Chief": 1, "Worker": 2, "PS": 1}),
    ("one_device", 1, 0, 1, {"Chief": 1}),
]


@pytest.mark.parametrize("strategy,workers,ps,chief,expected", TOPOLOGIES)
def test_every_manifest_validates(strategy, workers, ps, chief, expected):
    opts = make_options(strategy, workers, ps, chief=chief)
    files = build_all(opts)
    docs = [d for ds in files.values() for d in ds]
    assert {d["kind"] for d in docs} >= {"TFJob", "Job", "Deployment", "Service", "ConfigMap",
                                         "PersistentVolumeClaim"}
    for doc in docs:
        assert validate_doc(doc) == [], doc["kind"]
    job = files["tfjob.yaml"][0]
    assert {k: v["replicas"] for k, v in job["spec"]["tfReplicaSpecs"].items()} == expected


def test_tfjob_carries_what_the_operator_needs():
    job = build_tfjob(make_options("parameter_server", 2, 1, resources=Resources("2", "4Gi", 1)))
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "TFJob")
    assert set(job["spec"]["runPolicy"]) == {"backoffLimit", "cleanPodPolicy",
                                             "ttlSecondsAfterFinished", "activeDeadlineSeconds"}
    for rtype, rspec in job["spec"]["tfReplicaSpecs"].items():
        assert rspec["restartPolicy"] == "ExitCode", rtype
        tmpl = rspec["template"]
        assert tmpl["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"
        (c,) = tmpl["spec"]["containers"]
        assert c["name"] == "tensorflow"
        assert c["ports"] == [{"name": "tfjob-port", "containerPort": 2222, "protocol": "TCP"}]
        # GPUs go to the replicas that compute: not to the PS nor to the PS strategy's Chief
        gpus = c["resources"]["limits"].get("nvidia.com/gpu")
        assert gpus == ("1" if rtype == "Worker" else None), rtype
        assert c["resources"]["requests"] == {"cpu": "2", "memory": "4Gi"}
        assert c["resources"]["limits"]["cpu"] == "2"  # the quota the pod's inventory reads
        assert c["args"][:4] == ["task", "/etc/baton/pipeline.yaml", "--stage", "train"]
        assert c["args"][-1] == "/artifacts/runs/penguins/20261129-221500-3fa2"
        vols = {v["name"]: v for v in tmpl["spec"]["volumes"]}
        assert vols["artifacts"]["persistentVolumeClaim"]["claimName"] == "penguins-artifacts"
        gate = tmpl["spec"]["initContainers"][0]
        assert "transform/transformed" in gate["command"][-1]


def test_write_manifests_makes_a_kustomize_dir(tmp_path):
    written = write_manifests(make_options(), tmp_path)
    kust = yaml.safe_load((tmp_path / "kustomization.yaml").read_text())
    assert kust["resources"][:3] == ["namespace.yaml", "network-policies.yaml", "pvc.yaml"]
    assert "tfjob.yaml" in kust["resources"]
    assert all((tmp_path / r).exists() for r in kust["resources"])
    assert (tmp_path / "alternatives" / "inferenceservice.yaml") in written
    assert "&id" not in (tmp_path / "tfjob.yaml").read_text()
    assert validate_file(tmp_path) == []
    deploy = yaml.safe_load((tmp_path / "serving-deployment.yaml").read_text())
    c = deploy["spec"]["template"]["spec"]["containers"][0]
    assert c["image"].startswith("tensorflow/serving:")
    assert "--model_base_path=/artifacts/models/penguins" in c["args"]
    assert c["readinessProbe"]["httpGet"] == {"path": "/v1/models/penguins", "port": 8501}
    assert {p["containerPort"] for p in c["ports"]} == {8500, 8501}


@pytest.mark.parametrize("build,field,received", [
    (lambda: Topology("multi_worker_mirrored", 2, chief=2), "cluster.chief", "chief=2"),
    (lambda: Topology("multi_worker_mirrored", 0), "cluster.workers", "workers=0"),
    (lambda: Topology("parameter_server", 2, 0), "cluster.ps", "ps=0"),
    (lambda: Topology("multi_worker_mirrored", 2, 1), "cluster.ps", "ps=1"),
    (lambda: Topology("mirrored", 3), "cluster.workers", "workers=3"),
    (lambda: Topology("horovod", 2), "cluster.strategy", "'horovod'"),
    (lambda: Topology("parameter_server", 2, 1, chief=0), "cluster.chief", "chief=0"),
    (lambda: make_options(name="Penguins_Job"), "name", "'Penguins_Job'"),
    (lambda: make_options(name="x" * 60), "name", "60 characters"),
    (lambda: make_options(pipeline="9lives"), "pipeline", "'9lives'"),
    (lambda: make_options(namespace="Prod"), "namespace", "'Prod'"),
    (lambda: Resources(cpu="-1"), "resources.cpu", "'-1'"),
    (lambda: Resources(memory="-2Gi"), "resources.memory", "'-2Gi'"),
    (lambda: Resources(memory="lots"), "resources.memory", "'lots'"),
    (lambda: Resources(gpu=-1), "resources.gpu", "-1"),
    (lambda: Resources(cpu="0"), "resources.cpu", "'0'"),
    (lambda: make_options(image=""), "image", "''"),
    (lambda: RunPolicy(clean_pod_policy="Sometimes"), "run_policy.clean_pod_policy", "'Sometimes'"),
    (lambda: RunPolicy(active_deadline_seconds=0), "run_policy.active_deadline_seconds", "0"),
    (lambda: make_options(port=70000), "port", "70000"),
])
def test_unexpressible_options_are_refused_naming_the_field(build, field, received):
    with pytest.raises(ManifestError) as info:
        build()
    assert info.value.field == field
    assert received in str(info.value)


def test_job_name_defaults_to_pipeline_and_run_id():
    opts = JobOptions(pipeline="penguins", run_id="r1")
    assert opts.job_name == "penguins-r1" and opts.run_dir == "/artifacts/runs/penguins/r1"


def test_every_baton_container_logs_json_records_for_the_log_router():
    """Pods' Baton lines are one JSON object each (baton.logs), which Fluent Bit, Vector or a
    cloud logging agent parse into fields; the checked-in base says the same."""
    job = build_tfjob(make_options("multi_worker_mirrored", 2, 0))
    for replica in job["spec"]["tfReplicaSpecs"].values():
        [container] = replica["template"]["spec"]["containers"]
        assert {"name": "BATON_LOG_FORMAT", "value": "json"} in container["env"]
    base = Path(__file__).resolve().parents[2] / "k8s" / "base"
    text = (base / "jobset.yaml").read_text()  # data, training and release steps
    envs = [c.get("env", []) for d in yaml.safe_load_all(text) if d for c in _containers(d)]
    assert len(envs) == 4 and all({"name": "BATON_LOG_FORMAT", "value": "json"} in e for e in envs)


def _containers(doc: dict) -> list[dict]:
    from baton.k8s.security import pod_specs

    return [c for _, pod in pod_specs(doc) for c in pod["containers"]]


def test_an_input_gate_ends_when_its_stage_failed_for_good(tmp_path):
    """The TFJob's and release Job's `wait-for-inputs` used to wait forever for a stage that had
    failed; now `<run dir>/<stage>.failed.json` (the runner's, `baton task`'s record of a
    permanent failure) ends it with exit 1 and the record, and a finished output passes it."""
    import subprocess

    from baton.k8s import pods

    opts = make_options()
    vols, mounts = pods.volumes(opts)
    gate = pods.gate_container(opts, ("train/model",), mounts)
    script = gate["command"][2].replace(opts.mount_path, str(tmp_path))
    run_dir = tmp_path / "runs" / "penguins" / opts.run_id
    run_dir.mkdir(parents=True)
    (run_dir / "train.failed.json").write_text('{"status": "failed", "error": "boom"}')
    proc = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1 and "upstream stage failed for good" in proc.stdout
    assert "boom" in proc.stdout
    (run_dir / "train" / "model").mkdir(parents=True)  # a later success wins over the record
    assert subprocess.run(["sh", "-c", script], timeout=30).returncode == 0
