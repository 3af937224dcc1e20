"""`baton k8s --runs-dir s3://...`: no shared volume; credentials from a Secret or a service
account; the manifests validate, and the TFJob runs on a real S3 server (SeaweedFS)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from baton.k8s.object_storage import pod_specs
from baton.pipeline.cli import main as baton
from baton.pipeline.commands.k8s import main

ROOT = Path(__file__).resolve().parents[2]
ROLE = "eks.amazonaws.com/role-arn=arn:aws:iam::123456789012:role/baton"


def _docs(out: Path) -> list[dict]:
    return [d for f in sorted(out.rglob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]


@pytest.mark.parametrize("target", ["jobset", "trainjob", "tfjob"])
def test_a_bucket_run_writes_no_claim_and_gives_every_pod_credentials(tmp_path, target):
    out = tmp_path / "o"
    assert main(["--out", str(out), "--run-id", "r1", "--runs-dir", "s3://team-bucket/ml/runs",
                 "--credentials-secret", "s3-credentials", "--service-account", "baton",
                 "--service-account-annotation", ROLE, "--target", target]) == 0
    assert main(["validate", str(out)]) == 0
    docs = _docs(out)
    kinds = [d["kind"] for d in docs]
    assert "PersistentVolumeClaim" not in kinds and not (out / "pvc.yaml").exists()
    (account,) = [d for d in docs if d["kind"] == "ServiceAccount"]
    assert account["metadata"]["annotations"] == {ROLE.split("=")[0]: ROLE.split("=", 1)[1]}
    assert "service-account.yaml" in yaml.safe_load((out / "kustomization.yaml").read_text())[
        "resources"]
    pods = [p for d in docs for p in pod_specs(d)]
    assert len(pods) >= 2  # the training object's steps (data, training, release), serving
    for pod in pods:
        assert pod["serviceAccountName"] == "baton"
        assert all(v["name"] != "artifacts" for v in pod.get("volumes", []))
        for c in [*pod.get("initContainers", []), *pod["containers"]]:
            assert {"secretRef": {"name": "s3-credentials"}} in c["envFrom"], c["name"]
            assert all(m["name"] != "artifacts" for m in c.get("volumeMounts", []))
    text = "\n".join(f.read_text() for f in out.rglob("*.yaml"))
    assert "/artifacts" not in text
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy"
                 and d["metadata"]["name"].endswith("-object-storage")]
    components = policy["spec"]["podSelector"]["matchExpressions"][0]["values"]
    assert "serving" in components and "train" in components  # both reach the bucket
    deploy = yaml.safe_load((out / "serving-deployment.yaml").read_text())
    server = deploy["spec"]["template"]["spec"]["containers"][0]
    assert server["command"] == ["baton", "serve"] and server["image"].startswith("baton:")
    assert "--model_base_path=s3://team-bucket/ml/models/penguins" in server["args"]
    assert "--run-dir s3://team-bucket/ml/runs/penguins/r1" in " ".join(
        a for p in pods for c in p["containers"] for a in c.get("args") or [])
    if target != "tfjob":
        return
    job = yaml.safe_load((out / "tfjob.yaml").read_text())
    (replica,) = job["spec"]["tfReplicaSpecs"].values()
    container = replica["template"]["spec"]["containers"][0]
    assert container["args"][-2:] == ["--run-dir", "s3://team-bucket/ml/runs/penguins/r1"]
    gate = replica["template"]["spec"]["initContainers"][0]
    assert gate["command"][:3] == ["python", "-m", "baton.storage.wait"]
    assert "s3://team-bucket/ml/runs/penguins/r1/transform/lineage.json" in gate["command"]
    failed = gate["command"][gate["command"].index("--failed") + 1]
    assert failed == "s3://team-bucket/ml/runs/penguins/r1/transform.failed.json"
    data = yaml.safe_load((out / "data-job.yaml").read_text())
    args = data["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--runs-dir") + 1] == "s3://team-bucket/ml/runs"
    spec_cm = yaml.safe_load((out / "pipeline-spec.yaml").read_text())
    push = [s for s in yaml.safe_load(spec_cm["data"]["pipeline.yaml"])["stages"]
            if s["type"] == "push"]
    assert push[0]["config"]["serving_base"] == "s3://team-bucket/ml/models/penguins"
    kserve = yaml.safe_load((out / "alternatives" / "inferenceservice.yaml").read_text())
    assert kserve["spec"]["predictor"]["model"]["storageUri"] == \
        "s3://team-bucket/ml/models/penguins"


def test_gcs_keeps_tf_servings_image_which_reads_gs(tmp_path):
    out = tmp_path / "o"
    assert main(["--out", str(out), "--run-id", "r1", "--runs-dir", "gs://team-bucket/runs",
                 "--service-account", "baton", "--service-account-annotation",
                 "iam.gke.io/gcp-service-account=baton@proj.iam.gserviceaccount.com"]) == 0
    deploy = yaml.safe_load((out / "serving-deployment.yaml").read_text())
    server = deploy["spec"]["template"]["spec"]["containers"][0]
    assert server["command"] == ["tensorflow_model_server"]
    assert "--model_base_path=gs://team-bucket/models/penguins" in server["args"]
    assert all("envFrom" not in c for d in _docs(out) for p in pod_specs(d)
               for c in p["containers"])


@pytest.mark.parametrize("argv,needle", [
    (["--runs-dir", "/data/runs"], "--runs-dir: must be a bucket URL"),
    (["--runs-dir", "s3://"], "--runs-dir: must be a bucket URL"),
    (["--credentials-secret", "x"], "--credentials-secret is for a run directory on a bucket"),
    (["--runs-dir", "s3://b-1/r", "--service-account-annotation", "k=v"],
     "service account annotations need --service-account"),
    (["--runs-dir", "s3://b-1/r", "--service-account-annotation", "nokey"], "KEY=VALUE"),
])
def test_bad_bucket_flags_exit_2_naming_the_flag(tmp_path, capsys, argv, needle):
    assert baton(["k8s", "--out", str(tmp_path / "o"), *argv]) == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
@pytest.mark.e2e
def test_the_generated_tfjob_trains_on_the_bucket(s3, tmp_path):
    """The data stages as the data Job runs them, the TFJob emulated replica by replica (its
    gate waits on the bucket), then the release stages: the model is pushed to the bucket."""
    from baton.k8s.emulator.tfjob import EmulatorOptions, emulate_file
    from baton.pipeline.release import versions as V

    spec = tmp_path / "spec.yaml"
    spec.write_text("""\
pipeline: onbucket
stages:
  - {name: ingest, type: ingest, config: {source: penguins}}
  - {name: transform, type: transform, inputs: {examples: ingest.examples}}
  - name: train
    type: train
    inputs: {transformed: transform.transformed, transform_graph: transform.transform_graph}
    config: {epochs: 2, batch_size: 16}
  - name: export
    type: export
    inputs: {model: train.model, transform_graph: transform.transform_graph, examples: ingest.examples}
  - name: evaluate
    type: evaluate
    inputs: {model: train.model, transform_graph: transform.transform_graph, examples: ingest.examples}
    config: {gate: {thresholds: {accuracy: 0.0}}}
  - name: push
    type: push
    inputs: {saved_model: export.saved_model, blessing: evaluate.blessing}
    config: {allow_unchecked: true}
""")
    runs = f"{s3}/runs"
    out = tmp_path / "o"
    assert main([str(spec), "--out", str(out), "--run-id", "r1", "--runs-dir", runs,
                 "--credentials-secret", "s3-credentials", "--target", "tfjob"]) == 0
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    shipped = tmp_path / "configmap" / "pipeline.yaml"  # the spec as the pods read it
    shipped.parent.mkdir()
    shipped.write_text(yaml.safe_load((out / "pipeline-spec.yaml").read_text())["data"][
        "pipeline.yaml"])

    def job_args(name: str) -> list[str]:
        job = yaml.safe_load((out / name).read_text())
        args = job["spec"]["template"]["spec"]["containers"][0]["args"]
        return [str(shipped) if a == "/etc/baton/pipeline.yaml" else a for a in args]

    done = subprocess.run([sys.executable, "-m", "baton.pipeline.cli", *job_args("data-job.yaml")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    events: list[tuple] = []
    rc = emulate_file(out / "tfjob.yaml", EmulatorOptions(
        volume_dir=tmp_path / "volume", work_dir=tmp_path / "w", manifests_dir=out,
        on_event=lambda *e: events.append(e)))
    logs = "\n".join(p.read_text()[-2000:] for p in (tmp_path / "w").rglob("*.log"))
    assert rc == 0, logs
    assert "committed stage 'train' to s3://" in logs
    assert not list((tmp_path / "volume").rglob("*")), "a pod wrote to a shared volume"
    done = subprocess.run([sys.executable, "-m", "baton.pipeline.cli",
                           *job_args("release-job.yaml")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert V.versions(f"{s3}/models/onbucket") == [1]
