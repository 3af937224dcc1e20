"""`baton kfp SPEC --out pipeline.yaml`: IR YAML that the kfp SDK loads back and that parses as
KFP's PipelineSpec proto, one step per stage wired as the spec's DAG, and bad input refused
with exit 2, the field named, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from baton.pipeline.cli import main

from . import userstages

ROOT = Path(__file__).resolve().parents[3]
DEFAULT = ROOT / "pipeline" / "specs" / "penguins.yaml"
OWN_MODEL = ROOT / "examples" / "own_model" / "pipeline.yaml"
STAGES = ("ingest", "statistics", "validate", "transform", "train", "evaluate", "export",
          "check", "edge", "push")


def compile_ok(capsys, *args: str) -> dict:
    out = Path(args[args.index("--out") + 1])
    rc = main(["kfp", *args])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    return next(yaml.safe_load_all(out.read_text()))


def pipeline_spec(path: Path):
    """The IR parsed strictly (an unknown field fails) into KFP's own PipelineSpec proto."""
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    docs = list(yaml.safe_load_all(path.read_text()))
    return json_format.ParseDict(docs[0], pipeline_spec_pb2.PipelineSpec()), docs[1:]


def test_the_default_pipeline_compiles_loads_back_and_is_the_specs_dag(tmp_path, capsys):
    from kfp import components

    out = tmp_path / "pipeline.yaml"
    compile_ok(capsys, "--out", str(out), "--pipeline-root", "s3://kfp-artifacts/root",
               "--image", "registry.example.com/ml/baton:0.1.0")
    loaded = components.load_component_from_file(str(out))  # the SDK reads it back
    assert loaded.name == "penguins"
    spec, platforms = pipeline_spec(out)
    assert spec.default_pipeline_root == "s3://kfp-artifacts/root"
    tasks = spec.root.dag.tasks
    assert set(tasks) == {"plan-run", *STAGES, "finish-run"}
    penguins = yaml.safe_load(DEFAULT.read_text())
    for stage in penguins["stages"]:
        task = tasks[stage["name"]]
        wired = {k: f"{v.task_output_artifact.producer_task}.{v.task_output_artifact.output_artifact_key}"
                 for k, v in task.inputs.artifacts.items()}
        assert wired == stage.get("inputs", {}), stage["name"]  # the spec's DAG, edge for edge
        assert task.inputs.parameters["run_id"].task_output_parameter.producer_task == "plan-run"
    assert set(tasks["finish-run"].dependent_tasks) >= set(STAGES)
    for name, task in tasks.items():
        assert not task.caching_options.enable_cache, name  # Baton's content keys decide
        assert task.retry_policy.max_retry_count == 3, name
        assert task.retry_policy.backoff_duration.seconds == 30, name
    executors = spec.deployment_spec.fields["executors"].struct_value.fields
    for name, executor in executors.items():
        container = executor.struct_value.fields["container"].struct_value.fields
        assert container["image"].string_value == "registry.example.com/ml/baton:0.1.0"
        source = container["command"].list_value.values[-1].string_value
        assert "from baton.pipeline.kfp.step import" in source, name
        assert "pip install" not in " ".join(v.string_value for v in
                                             container["command"].list_value.values)
    train = executors["exec-train"].struct_value.fields["container"].struct_value.fields
    assert "stage_step('penguins', 'train'," in train["command"].list_value.values[-1].string_value
    params = spec.root.input_definitions.parameters
    assert {p: params[p].default_value.string_value for p in ("run_id", "runs_dir", "models_dir")} == {
        "run_id": "", "runs_dir": "s3://kfp-artifacts/root/runs", "models_dir": ""}
    assert params["epochs"].default_value.number_value == 20
    assert params["batch_size"].default_value.number_value == 32
    # the kfp engine runs the steps as the Baton image's user, restricted
    executors_k8s = platforms[0]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert executors_k8s["exec-train"]["securityContext"] == {
        "runAsUser": "1000", "runAsGroup": "1000", "runAsNonRoot": True}


def test_vertex_gets_a_gcs_root_and_no_kubernetes_settings(tmp_path, capsys):
    out = tmp_path / "vertex.yaml"
    compile_ok(capsys, "--out", str(out), "--engine", "vertex",
               "--pipeline-root", "gs://my-project-pipelines/root")
    spec, platforms = pipeline_spec(out)
    assert spec.default_pipeline_root == "gs://my-project-pipelines/root"
    assert platforms == []  # Vertex AI refuses Kubernetes platform settings
    assert not (tmp_path / "vertex.rbac.yaml").exists()


@pytest.mark.slow  # imports the user's Keras model (TensorFlow) to find its modules
def test_own_model_ships_its_modules_as_they_are(tmp_path, capsys):
    import json

    out = tmp_path / "own.yaml"
    compile_ok(capsys, str(OWN_MODEL), "--out", str(out), "--pipeline-root", "gs://bkt/root",
               "--runs-dir", "gs://bkt/runs")
    spec, _ = pipeline_spec(out)
    plan = spec.root.dag.tasks["plan-run"].inputs.parameters["bundle"].runtime_value.constant
    bundle = json.loads(plan.string_value)
    here = OWN_MODEL.parent
    assert bundle["spec"] == "pipeline.yaml"
    assert bundle["files"] == {name: (here / name).read_text() for name in
                               ("pipeline.yaml", "penguin_model.py", "penguin_layers.py")}


def _refused(capsys, tmp_path: Path, args: list[str], *needles: str) -> None:
    out = tmp_path / "refused.yaml"
    assert main(["kfp", *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    for needle in needles:
        assert needle in err, err
    assert not out.exists() and not list(tmp_path.glob("refused*"))  # nothing written


def test_a_federated_stage_is_refused_naming_the_field(tmp_path, capsys):
    spec = tmp_path / "fed.yaml"
    spec.write_text("""\
pipeline: fed
stages:
  - {name: ingest, type: ingest, config: {source: penguins}}
  - name: federated
    type: federated
    inputs: {examples: ingest.examples}
    config: {clients: 2}
""")
    _refused(capsys, tmp_path, [str(spec), "--pipeline-root", "s3://bkt/root"],
             "stages[1].type: 'federated'", "Received: type: federated")


def test_user_code_outside_the_specs_directory_is_refused(tmp_path, capsys, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    userstages.write(elsewhere)
    monkeypatch.syspath_prepend(str(elsewhere))  # importable here, and not shipped
    spec_dir = tmp_path / "project"
    spec_dir.mkdir()
    spec = spec_dir / "pipeline.yaml"
    spec.write_text(f"""\
pipeline: numbers
stages:
  - name: produce
    type: numsource:produce
    config: {{data: {elsewhere / 'data.txt'}}}
""")
    _refused(capsys, tmp_path, [str(spec), "--pipeline-root", "s3://bkt/root"],
             "stages[0].type: 'numsource:produce'", str(elsewhere / "numsource.py"),
             "outside the spec's directory")


def test_a_model_module_outside_the_specs_directory_is_refused(tmp_path, capsys, monkeypatch):
    elsewhere = tmp_path / "models"
    elsewhere.mkdir()
    (elsewhere / "outside_model.py").write_text("def build(spec):\n    raise NotImplementedError\n")
    monkeypatch.syspath_prepend(str(elsewhere))
    spec = tmp_path / "project" / "pipeline.yaml"
    spec.parent.mkdir()
    data = yaml.safe_load(DEFAULT.read_text())
    for stage in data["stages"]:
        if stage["type"] == "train":
            stage["config"] = {"model": "outside_model:build"}
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    _refused(capsys, tmp_path, [str(spec), "--pipeline-root", "s3://bkt/root"],
             "stages[4].config.model: 'outside_model:build'", "outside the spec's directory")


@pytest.mark.parametrize("args, needles", [
    (["--engine", "vertex", "--pipeline-root", "s3://bkt/root"],
     ("--pipeline-root: must be a bucket URL (gs://...)", "Received: 's3://bkt/root'")),
    (["--engine", "vertex", "--pipeline-root", "/data/root"],
     ("--pipeline-root: must be a bucket URL (gs://...)", "Received: '/data/root'")),
    (["--engine", "vertex"], ("--pipeline-root: required",)),
    (["--pipeline-root", "/data/root"], ("--pipeline-root: must be a bucket URL",)),
    (["--pipeline-root", "s3://bkt/root", "--runs-dir", "/data/runs"],
     ("--runs-dir: the pipeline's pods share no disk", "Received: '/data/runs'")),
    (["--pipeline-root", "minio://mlpipeline/v2"], ("--runs-dir: required",)),
    (["--pipeline-root", "s3://bkt/root", "--retries", "-1"], ("--retries",)),
    (["--run-local", "--param", "epoch=3"], ("--param: must be NAME=VALUE", "did you mean 'epochs'")),
    (["--run-local", "--param", "epochs=many"], ("--param epochs: must be a whole number",)),
])
def test_bad_flags_exit_2_naming_them_and_write_nothing(tmp_path, capsys, args, needles):
    _refused(capsys, tmp_path, args, *needles)


@pytest.mark.parametrize("target, kind, plural", [
    ("jobset", "JobSet", "jobsets"), ("trainjob", "TrainJob", "trainjobs"),
    ("tfjob", "TFJob", "tfjobs")])
def test_the_training_object_and_its_rbac_for_a_multi_worker_topology(tmp_path, capsys, target,
                                                                      kind, plural):
    import json

    from baton.k8s.validate import check
    from baton.pipeline.kfp import launch as L
    from baton.pipeline.spec import load_spec

    out = tmp_path / "dist.yaml"
    compile_ok(capsys, "--out", str(out), "--pipeline-root", "s3://bkt/root", "--workers", "2",
               "--strategy", "multi_worker_mirrored", "--namespace", "ml",
               "--credentials-secret", "s3-credentials", "--target", target)
    spec, _ = pipeline_spec(out)
    launch = json.loads(spec.root.dag.tasks["train"].inputs.parameters["launch"]
                        .runtime_value.constant.string_value)
    assert launch["engine"] == "kfp" and launch["mode"] == "cluster"
    assert launch["flags"] | {"image": None} == {
        "workers": 2, "ps": 0, "strategy": "multi_worker_mirrored", "image": None,
        "namespace": "ml", "credentials_secret": "s3-credentials", "service_account": None,
        "target": target, "queue": None}
    assert all(t.inputs.parameters["launch"].runtime_value.constant.string_value == ""
               for n, t in spec.root.dag.tasks.items() if n not in ("train", "plan-run",
                                                                     "finish-run"))
    # what the step creates at run time: `baton k8s --target`'s object, validated, last
    docs = L.documents(launch, load_spec(DEFAULT), "train", "r-1", "s3://bkt/runs")
    assert docs[-1]["kind"] == kind
    assert {d["kind"] for d in docs[:-1]} >= {"ConfigMap", "NetworkPolicy"}
    assert all(d["metadata"]["name"].startswith("penguins-r-1") for d in docs)
    rbac = list(yaml.safe_load_all((tmp_path / "dist.rbac.yaml").read_text()))
    assert [d["kind"] for d in rbac][:2] == ["Role", "RoleBinding"]
    check(rbac)  # Kubernetes' own schemas
    rules = {tuple(r["resources"]): r["verbs"] for r in rbac[0]["rules"]}
    assert "create" in rules[(plural,)] and "delete" in rules[(plural,)]
    assert "create" in rules[("networkpolicies",)] and "update" in rules[("configmaps",)]
    assert rbac[1]["subjects"] == [{"kind": "ServiceAccount", "name": "pipeline-runner",
                                    "namespace": "ml"}]
    # every kind the step creates is one the RBAC lets it create
    allowed = {res for doc in rbac if doc["kind"] in ("Role", "ClusterRole")
               for rule in doc["rules"] if "create" in rule["verbs"] for res in rule["resources"]}
    assert {_plural(d["kind"]) for d in docs} <= allowed
    if target == "trainjob":  # its runtime is cluster-scoped
        assert [d["kind"] for d in rbac][2:] == ["ClusterRole", "ClusterRoleBinding"]


def _plural(kind: str) -> str:
    return {"NetworkPolicy": "networkpolicies"}.get(kind, kind.lower() + "s")


def test_vertex_steps_and_worker_pools_get_the_specs_gpus(tmp_path, capsys):
    import json

    data = yaml.safe_load(DEFAULT.read_text())
    data["cluster"] = {"resources": {"gpu": 1}}
    spec_path = tmp_path / "gpu.yaml"
    spec_path.write_text(yaml.safe_dump(data, sort_keys=False))
    out = tmp_path / "vertex-gpu.yaml"
    compile_ok(capsys, str(spec_path), "--out", str(out), "--engine", "vertex",
               "--pipeline-root", "gs://bkt/root", "--vertex-accelerator", "NVIDIA_L4",
               "--workers", "2", "--strategy", "multi_worker_mirrored")
    spec, _ = pipeline_spec(out)
    executors = spec.deployment_spec.fields["executors"].struct_value.fields

    def accelerator(name: str) -> dict:
        container = executors[f"exec-{name}"].struct_value.fields["container"].struct_value
        from google.protobuf import json_format

        return json_format.MessageToDict(container).get("resources", {}).get("accelerator", {})

    assert accelerator("train").items() >= {"resourceType": "NVIDIA_L4",
                                            "resourceCount": "1"}.items()
    assert accelerator("ingest") == {}  # the data stages run on CPUs
    launch = json.loads(spec.root.dag.tasks["train"].inputs.parameters["launch"]
                        .runtime_value.constant.string_value)
    from baton.pipeline.kfp import vertex
    from baton.pipeline.spec import load_spec

    body = vertex.custom_job(launch, load_spec(spec_path), "train", "r-1", "gs://bkt/runs")
    assert {s["machineSpec"]["acceleratorType"] for s in body["jobSpec"]["workerPoolSpecs"]} == \
        {"NVIDIA_L4"}


def test_without_the_kfp_extra_the_command_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "kfp", None)  # as if not installed: import fails
    _refused(capsys, tmp_path, ["--pipeline-root", "s3://bkt/root"],
             "pip install 'baton[kfp]'")
