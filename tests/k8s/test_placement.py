"""Per-replica-type requests/limits, GPU limits and the placement they imply (k8s.placement)."""

from __future__ import annotations

import pytest
import yaml

from baton.k8s import placement
from baton.k8s.errors import ManifestError
from baton.k8s.options import ReplicaResources, ResourceOverride, Resources
from baton.k8s.render import build_all
from baton.k8s.tfjob import build_tfjob
from baton.k8s.validate import validate_doc
from baton.pipeline.cli import main as baton

from .conftest import make_options


def _containers(job: dict) -> dict[str, dict]:
    return {t: r["template"]["spec"]["containers"][0]
            for t, r in job["spec"]["tfReplicaSpecs"].items()}


def test_per_replica_resources_and_gpu_limits_validate() -> None:
    opts = make_options(
        "parameter_server", 2, 1, resources=Resources(cpu=4, memory="8Gi", gpu=1),
        replica_resources=ReplicaResources(ps=ResourceOverride(cpu="500m", memory="16Gi"),
                                           chief=ResourceOverride(cpu=1)))
    files = build_all(opts)
    for doc in (d for ds in files.values() for d in ds):
        assert validate_doc(doc) == [], doc["kind"]
    c = _containers(files["tfjob.yaml"][0])
    assert c["Worker"]["resources"] == {
        "requests": {"cpu": "4", "memory": "8Gi"},
        "limits": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}}
    # PS and the coordinator compute nothing: no GPU unless asked for
    assert c["PS"]["resources"] == {"requests": {"cpu": "500m", "memory": "16Gi"},
                                    "limits": {"cpu": "500m", "memory": "16Gi"}}
    assert c["Chief"]["resources"]["limits"] == {"cpu": "1", "memory": "8Gi"}
    assert all("nvidia.com/gpu" not in x["resources"]["requests"] for x in c.values())
    data_job = files["data-job.yaml"][0]["spec"]["template"]["spec"]["containers"][0]
    assert data_job["resources"]["limits"] == {"cpu": "4", "memory": "8Gi"}  # Beam's quota


def test_a_gpu_asked_for_the_ps_is_given_and_annotations_say_what_the_pod_derives() -> None:
    opts = make_options("parameter_server", 2, 1,
                        replica_resources=ReplicaResources(ps=ResourceOverride(gpu=1)))
    job = build_tfjob(opts)
    assert _containers(job)["PS"]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    note = job["spec"]["tfReplicaSpecs"]["PS"]["template"]["metadata"]["annotations"]
    assert note[placement.ANNOTATION] == (
        "cpu 1 -> 1 usable cores, TF threads 1 intra-op / 2 inter-op; 1 GPUs")
    assert placement.replica_placement(Resources(cpu="2500m", gpu=2)) == {
        "cpu_usable": 3, "gpus": 2, "intra_op": 3, "inter_op": 3, "beam_workers": 3}


def test_batch_is_checked_against_the_gpus_asked_for() -> None:
    gpus = ReplicaResources(worker=ResourceOverride(gpu=2), chief=ResourceOverride(gpu=2))
    opts = make_options("multi_worker_mirrored", 2, replica_resources=gpus, batch_size=64)
    assert placement.check_batch(opts) == {"replicas": 4, "per_replica_batch_size": 16}
    with pytest.raises(ManifestError) as err:
        placement.check_batch(make_options("multi_worker_mirrored", 2, replica_resources=gpus,
                                           batch_size=30))
    assert err.value.field == "train.config.batch_size" and "batch_size=30" in str(err.value)
    assert placement.check_batch(make_options(batch_size=30)) == {  # CPU: 1 replica per task
        "replicas": 2, "per_replica_batch_size": 15}
    assert placement.check_batch(make_options()) is None  # no train batch given


def _spec(tmp_path, cluster: dict, batch: int = 32):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({
        "pipeline": "placed",
        "cluster": cluster,
        "stages": [
            {"name": "ingest", "type": "ingest", "config": {"source": "penguins"}},
            {"name": "transform", "type": "transform", "inputs": {"examples": "ingest.examples"}},
            {"name": "train", "type": "train", "config": {"batch_size": batch},
             "inputs": {"transformed": "transform.transformed",
                        "transform_graph": "transform.transform_graph"}},
        ],
    }))
    return path


def test_spec_replica_resources_reach_the_manifests(tmp_path) -> None:
    spec = _spec(tmp_path, {"strategy": "multi_worker_mirrored", "workers": 3,
                            "resources": {"cpu": 2, "memory": "4Gi"},
                            "replica_resources": {"worker": {"gpu": 1, "cpu": 3}}}, batch=30)
    out = tmp_path / "o"
    assert baton(["k8s", str(spec), "--out", str(out), "--run-id", "r1", "--target", "tfjob"]) == 0
    c = _containers(yaml.safe_load((out / "tfjob.yaml").read_text()))
    assert c["Worker"]["resources"]["limits"] == {"cpu": "3", "memory": "4Gi",
                                                  "nvidia.com/gpu": "1"}
    assert c["Chief"]["resources"]["limits"] == {"cpu": "2", "memory": "4Gi"}
    assert baton(["k8s", "validate", str(out)]) == 0


MWMS = {"strategy": "multi_worker_mirrored", "workers": 2}


@pytest.mark.parametrize("cluster,needles", [
    ({"replica_resources": {"worker": {"cpu": "-1"}}},
     ["cluster.replica_resources.worker", "cpu", "'-1'"]),
    ({"replica_resources": {"worker": {"gpu": 1.5}}},
     ["cluster.replica_resources.worker.gpu", "1.5"]),
    ({"replica_resources": {"worker": {"gpu": -2}}}, ["cluster.replica_resources.worker", "-2"]),
    ({"replica_resources": {"wroker": {"gpu": 1}}},
     ["cluster.replica_resources.wroker", "did you mean 'worker'"]),
    ({"resources": {"cpu": 0}}, ["cluster.resources", "'0'"]),
    # chief 1 CPU replica + worker 2 GPUs = 3 replicas; 32 does not split over them
    ({**MWMS, "replica_resources": {"worker": {"gpu": 2}}},
     ["train.config.batch_size", "3 replicas", "batch_size=32"]),
])
def test_bad_resources_exit_2_naming_field_and_value(tmp_path, capsys, cluster, needles) -> None:
    spec = _spec(tmp_path, cluster)
    assert baton(["k8s", str(spec), "--out", str(tmp_path / "o"), "--run-id", "r1"]) == 2
    err = capsys.readouterr().err
    for needle in needles:
        assert needle in err, err
    assert "Traceback" not in err and not (tmp_path / "o").exists()
