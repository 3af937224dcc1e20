"""`baton k8s --target jobset|trainjob|tfjob`: what each writes, that it validates against the
real CRDs and webhook rules for the default pipeline and examples/own_model (both strategies,
with and without GPUs), and the bad input each refuses (exit 2, the field named)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from baton.k8s import trainer_controller
from baton.k8s.validate import validate_file
from baton.pipeline.cli import main as baton
from baton.pipeline.spec import load_spec

REPO = Path(__file__).resolve().parents[2]


def _spec(tmp_path: Path, which: str, gpu: int) -> Path:
    """The default pipeline's or examples/own_model's spec, with `gpu` GPUs per pod."""
    if which == "default":
        data = yaml.safe_load(load_spec(None).to_yaml())
        path = tmp_path / "default" / "pipeline.yaml"
        path.parent.mkdir(parents=True)
    else:
        shutil.copytree(REPO / "examples" / "own_model", tmp_path / "own",
                        ignore=shutil.ignore_patterns("__pycache__", "models"))
        path = tmp_path / "own" / "pipeline.yaml"
        data = yaml.safe_load(path.read_text())
    data.setdefault("cluster", {})["resources"] = {"cpu": 2, "memory": "4Gi", "gpu": gpu}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _load(out: Path) -> dict[str, list[dict]]:
    kust = yaml.safe_load((out / "kustomization.yaml").read_text())
    return {f: [d for d in yaml.safe_load_all((out / f).read_text()) if d] for f in kust["resources"]}


STRATEGIES = [["--strategy", "multi_worker_mirrored", "--workers", "2"],
              ["--strategy", "parameter_server", "--workers", "2", "--ps", "1"]]


@pytest.mark.parametrize("target", ["jobset", "trainjob", "tfjob"])
@pytest.mark.parametrize("which", ["default", "own_model"])
def test_every_target_validates_for_both_pipelines_strategies_and_gpus(tmp_path, target, which):
    for gpu in (0, 1):
        spec = _spec(tmp_path / f"g{gpu}", which, gpu)
        for i, flags in enumerate(STRATEGIES):
            out = tmp_path / f"out-{gpu}-{i}"
            assert baton(["k8s", str(spec), "--out", str(out), "--run-id", "r1", "--target", target,
                          "--namespace", "ml", *flags]) == 0
            assert validate_file(out) == [], (target, which, gpu, flags)
            files = _load(out)
            kinds = {d["kind"] for ds in files.values() for d in ds}
            expected = {"jobset": {"JobSet"}, "trainjob": {"TrainJob", "ClusterTrainingRuntime"},
                        "tfjob": {"TFJob", "Job"}}[target]
            assert expected <= kinds and {"Namespace", "NetworkPolicy", "Deployment"} <= kinds
            gpus = [c["resources"]["limits"].get("nvidia.com/gpu") for ds in files.values()
                    for d in ds for c in _training_containers(d)]
            assert gpus and (set(gpus) <= {"1", None} if gpu else set(gpus) == {None}), gpus


def _training_containers(doc: dict) -> list[dict]:
    from baton.k8s.security import pod_templates

    return [c for _, t in pod_templates(doc)
            if (t.get("metadata") or {}).get("labels", {}).get("app.kubernetes.io/component") == "train"
            for c in t["spec"]["containers"]]


def _generate(tmp_path: Path, *flags: str) -> dict[str, list[dict]]:
    out = tmp_path / "m"
    assert baton(["k8s", "--out", str(out), "--run-id", "r1", "--namespace", "ml", *flags]) == 0
    return _load(out)


def _steps(js_spec: dict) -> dict[str, dict]:
    return {rj["name"]: rj for rj in js_spec["replicatedJobs"]}


def test_the_default_target_is_one_jobset_running_every_step_in_order(tmp_path):
    files = _generate(tmp_path, "--workers", "4", "--strategy", "multi_worker_mirrored", "--queue", "team-a")
    assert not {"data-job.yaml", "release-job.yaml", "tfjob.yaml"} & set(files)
    [js] = files["jobset.yaml"]
    assert js["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    spec = js["spec"]
    steps = _steps(spec)
    assert list(steps) == ["data", "chief", "worker", "release"]
    assert "dependsOn" not in steps["data"]
    assert steps["chief"]["dependsOn"] == steps["worker"]["dependsOn"] == [{"name": "data", "status": "Complete"}]
    assert steps["release"]["dependsOn"] == [{"name": "chief", "status": "Complete"}]
    assert spec["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["release"]}
    rules = {r["name"]: r for r in spec["failurePolicy"]["rules"]}
    assert rules["permanentError"] == {"name": "permanentError", "action": "FailJobSet",
                                       "onJobFailureReasons": ["PodFailurePolicy"]}
    assert rules["retriesSpent"]["action"] == "RestartJobSet" and spec["failurePolicy"]["maxRestarts"] == 1
    worker = steps["worker"]["template"]["spec"]
    assert (worker["completionMode"], worker["parallelism"], worker["completions"]) == ("Indexed", 3, 3)
    pfp = {r["action"]: r for r in worker["podFailurePolicy"]["rules"]}
    assert pfp["FailJob"]["onExitCodes"] == {"operator": "NotIn", "values": [129, 137, 143]}
    assert pfp["Ignore"]["onPodConditions"] == [{"type": "DisruptionTarget", "status": "True"}]
    assert worker["template"]["spec"]["restartPolicy"] == "Never"
    [c] = worker["template"]["spec"]["containers"]
    env = {e["name"]: e for e in c["env"]}
    assert env["BATON_JOB_INDEX"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.labels['jobset.sigs.k8s.io/job-index']"}}
    assert env["BATON_COMPLETION_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"] == \
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    assert '"name":"worker","replicas":1,"parallelism":3,"tasks":[["worker",3]]' in env["BATON_TF_TOPOLOGY"]["value"]
    assert c["args"][:2] == ["task", "/etc/baton/pipeline.yaml"]
    assert steps["release"]["template"]["spec"]["template"]["spec"]["containers"][0]["args"][:5] == [
        "run", "/etc/baton/pipeline.yaml", "--run-id", "r1", "--only"]


def test_parameter_servers_start_before_their_workers_and_the_coordinator_last(tmp_path):
    files = _generate(tmp_path, "--workers", "2", "--ps", "2", "--strategy", "parameter_server")
    steps = _steps(files["jobset.yaml"][0]["spec"])
    assert list(steps) == ["data", "ps", "worker", "chief", "release"]
    assert steps["worker"]["dependsOn"] == [{"name": "ps", "status": "Ready"}]
    assert steps["chief"]["dependsOn"] == [{"name": "worker", "status": "Ready"}]
    for server in ("ps", "worker"):  # Ready = the TensorFlow server listens
        [c] = steps[server]["template"]["spec"]["template"]["spec"]["containers"]
        assert c["readinessProbe"]["tcpSocket"] == {"port": "tf-grpc"}


def test_trainjob_references_a_plainml_runtime_with_a_trainer_node_job(tmp_path):
    files = _generate(tmp_path, "--target", "trainjob", "--workers", "4",
                      "--strategy", "multi_worker_mirrored", "--queue", "team-a")
    assert list(files).index("clustertrainingruntime.yaml") < list(files).index("trainjob.yaml")
    [runtime], [tj] = files["clustertrainingruntime.yaml"], files["trainjob.yaml"]
    assert "namespace" not in runtime["metadata"]  # cluster-scoped
    assert runtime["spec"]["mlPolicy"] == {"numNodes": 4}  # plainML: no framework policy
    steps = _steps(runtime["spec"]["template"]["spec"])
    assert list(steps) == ["data", "node", "release"]
    node = steps["node"]
    assert node["replicas"] == 1
    assert node["template"]["metadata"]["labels"] == {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
    assert node["template"]["spec"]["template"]["spec"]["containers"][0]["name"] == "node"
    assert tj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert tj["spec"]["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org",
                                        "kind": "ClusterTrainingRuntime", "name": "penguins-r1-tensorflow"}
    assert tj["spec"]["trainer"]["numNodes"] == 4
    assert tj["spec"]["trainer"]["resourcesPerNode"]["limits"]["cpu"] == "1"
    js = trainer_controller.to_jobset(tj, runtime)  # what Trainer's controller creates
    assert js["metadata"]["name"] == "penguins-r1"
    made = _steps(js["spec"])["node"]["template"]["spec"]
    assert (made["parallelism"], made["completions"]) == (4, 4)


def test_trainjob_under_parameter_servers_keeps_ps_and_coordinator_beside_the_nodes(tmp_path):
    files = _generate(tmp_path, "--target", "trainjob", "--workers", "2", "--ps", "1",
                      "--strategy", "parameter_server")
    steps = _steps(files["clustertrainingruntime.yaml"][0]["spec"]["template"]["spec"])
    assert list(steps) == ["data", "ps", "node", "chief", "release"]
    assert steps["node"]["dependsOn"] == [{"name": "ps", "status": "Ready"}]
    assert files["trainjob.yaml"][0]["spec"]["trainer"]["numNodes"] == 2


def test_a_digest_pins_the_image_and_is_pulled_if_not_present(tmp_path):
    digest = "reg.io/ml/baton@sha256:" + "a" * 64
    files = _generate(tmp_path, "--image", digest)
    pods = [c for ds in files.values() for d in ds for c in _all_containers(d)]
    baton_pods = [c for c in pods if c["image"] == digest]
    assert baton_pods and {c["imagePullPolicy"] for c in baton_pods} == {"IfNotPresent"}
    serving = [c for c in pods if c["image"].startswith("tensorflow/serving:")]
    assert serving and {c["imagePullPolicy"] for c in serving} == {"Always"}  # a tag can move


def _all_containers(doc: dict) -> list[dict]:
    from baton.k8s.security import pod_specs

    return [c for _, p in pod_specs(doc) for c in [*p.get("initContainers", []), *p["containers"]]]


@pytest.mark.parametrize("argv,needle", [
    (["--queue", "Team_A"], "--queue: must be a Kueue LocalQueue name"),
    (["--queue", "q" * 64], "--queue: must be a Kueue LocalQueue name"),
    (["--image", "reg.io/baton"], "--image: must be pinned: a tag other than 'latest'"),
    (["--image", "reg.io/baton:latest"], "Received: 'reg.io/baton:latest'"),
    (["--image", "reg.io/baton@sha256:abc"], "--image: a digest must be '@sha256:'"),
    (["--name", "p" * 50], "--name: the 'release' pods would be named like"),
    (["--target", "trainjob", "--name", "p" * 50], "--name: the 'release' pods would be named like"),
    (["--target", "argo"], "invalid choice: 'argo'"),
])
def test_bad_input_exits_2_naming_the_flag(tmp_path, capsys, argv, needle):
    assert baton(["k8s", "--out", str(tmp_path / "o"), "--run-id", "r1", *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err, err
    assert not (tmp_path / "o").exists()


def test_a_long_pipeline_name_names_the_derived_job_name(tmp_path, capsys):
    data = yaml.safe_load(load_spec(None).to_yaml())
    data["pipeline"] = "penguins-with-a-long-descriptive-name"  # 37 characters: a valid name
    spec = tmp_path / "p.yaml"
    spec.write_text(yaml.safe_dump(data))
    assert baton(["k8s", str(spec), "--out", str(tmp_path / "o"), "--run-id", "20261204-203157-ebd7"]) == 2
    err = capsys.readouterr().err
    assert "the job name <pipeline>-<run id> (give a shorter --name, --run-id or pipeline name)" in err
    assert "longer than a DNS label (63)" in err


def test_a_trainjob_cannot_give_its_chief_node_other_resources(tmp_path, capsys):
    data = yaml.safe_load(load_spec(None).to_yaml())
    data["cluster"] = {"strategy": "multi_worker_mirrored", "workers": 2,
                       "replica_resources": {"chief": {"cpu": 4}}}
    spec = tmp_path / "p.yaml"
    spec.write_text(yaml.safe_dump(data))
    assert baton(["k8s", str(spec), "--out", str(tmp_path / "o"), "--target", "trainjob"]) == 2
    err = capsys.readouterr().err
    assert "cluster.replica_resources.chief: a TrainJob's 'node' pods share one pod template" in err
    assert baton(["k8s", str(spec), "--out", str(tmp_path / "o"), "--target", "jobset"]) == 0


def test_a_hand_edited_jobset_without_tf_config_inputs_is_refused_naming_them(tmp_path, capsys):
    from baton.pipeline.commands.k8s import main

    out = tmp_path / "m"
    assert main(["--out", str(out), "--run-id", "r1", "--workers", "2",
                 "--strategy", "multi_worker_mirrored"]) == 0
    js = yaml.safe_load((out / "jobset.yaml").read_text())
    worker = _steps(js["spec"])["worker"]
    [c] = worker["template"]["spec"]["template"]["spec"]["containers"]
    c["env"] = [e for e in c["env"] if e["name"] != "BATON_JOB_INDEX"]
    worker["template"]["spec"]["parallelism"] = 3
    (out / "jobset.yaml").write_text(yaml.safe_dump(js))
    capsys.readouterr()
    assert main(["validate", str(out)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert any("containers[0].env[BATON_JOB_INDEX]: must come from the downward API, fieldRef "
               "metadata.labels['jobset.sigs.k8s.io/job-index']" in ln and "[baton]" in ln for ln in lines)
    assert any("spec.replicatedJobs[2].template.spec.parallelism: is 3 but BATON_TF_TOPOLOGY says 1"
               in ln for ln in lines), lines
