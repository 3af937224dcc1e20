"""`baton k8s` end to end through the CLI glue (pipeline.commands.k8s)."""

from __future__ import annotations

import sys

import pytest
import yaml

from baton.pipeline.cli import main as baton
from baton.pipeline.commands.k8s import main


def test_generate_default_pipeline_both_strategies(tmp_path, capsys):
    for strategy, extra in (("multi_worker_mirrored", []), ("parameter_server", ["--ps", "1"])):
        out = tmp_path / strategy
        assert main(["--out", str(out), "--strategy", strategy, "--workers", "2", "--target", "tfjob",
                     "--run-id", "r1", "--namespace", "ml", "--image", "reg.io/baton:1", *extra]) == 0
        job = yaml.safe_load((out / "tfjob.yaml").read_text())
        assert job["metadata"] == {**job["metadata"], "name": "penguins-r1", "namespace": "ml"}
        c = job["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]["containers"][0]
        assert c["image"] == "reg.io/baton:1"
        assert main(["validate", str(out)]) == 0
    assert "penguins-r1" in capsys.readouterr().out


@pytest.mark.parametrize("argv,needle", [
    (["--workers", "0"], "--workers"),
    (["--workers", "x"], "invalid int value: 'x'"),
    (["--strategy", "horovod"], "'horovod'"),
    (["--strategy", "parameter_server", "--workers", "2", "--ps", "0"], "--ps"),
    (["--name", "Bad_Name"], "'Bad_Name'"),
    (["--namespace", "Prod"], "'Prod'"),
    (["--image", ""], "--image"),
    (["--image", "  "], "--image"),
    (["--namespace", ""], "--namespace"),
    (["--name", ""], "--name"),
    (["--run-id", ""], "--run-id"),
    (["--out", ""], "--out"),
])
def test_bad_flags_exit_2_naming_flag_and_value(tmp_path, capsys, argv, needle):
    assert baton(["k8s", "--out", str(tmp_path / "o"), *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err
    assert not (tmp_path / "o").exists()


def test_out_that_is_a_file_exits_2_naming_out(tmp_path, capsys):
    target = tmp_path / "manifests"
    target.write_text("not a directory\n")
    assert baton(["k8s", "--out", str(target), "--run-id", "r1"]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and str(target) in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert target.read_text() == "not a directory\n"
    inside = tmp_path / "file-parent"  # a parent that is a file: nothing written, same message
    inside.write_text("")
    assert baton(["k8s", "--out", str(inside / "sub"), "--run-id", "r1"]) == 2
    assert "--out" in capsys.readouterr().err


def test_validate_reports_each_violation_and_exits_1(tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["--out", str(out), "--run-id", "r1", "--target", "tfjob"]) == 0
    job = yaml.safe_load((out / "tfjob.yaml").read_text())
    job["metadata"]["name"] = "Bad"
    job["spec"]["tfReplicaSpecs"]["Chief"]["replicas"] = "1"
    (out / "tfjob.yaml").write_text(yaml.safe_dump(job))
    capsys.readouterr()
    assert main(["validate", str(out / "tfjob.yaml")]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert any("metadata.name" in line and "[webhook]" in line for line in lines)
    assert any("spec.tfReplicaSpecs.Chief.replicas" in line and "[schema]" in line for line in lines)
    assert baton(["k8s", "validate", str(tmp_path / "missing.yaml")]) == 2


def test_emulate_cli_runs_the_generated_job(tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["--out", str(out), "--run-id", "r1", "--strategy", "multi_worker_mirrored",
                 "--workers", "2", "--target", "tfjob"]) == 0
    job = yaml.safe_load((out / "tfjob.yaml").read_text())
    for rspec in job["spec"]["tfReplicaSpecs"].values():  # no upstream data in this test
        del rspec["template"]["spec"]["initContainers"]
    (out / "tfjob.yaml").write_text(yaml.safe_dump(job))
    cmd = f"{sys.executable} -c 'import os,sys; sys.exit(0 if os.path.exists(sys.argv[1]) else 1)' /etc/baton/pipeline.yaml"
    rc = main(["emulate", str(out / "tfjob.yaml"), "--work-dir", str(tmp_path / "w"), "--command", cmd])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "condition Succeeded" in text and "penguins-r1-worker-0.default.svc:2222 -> 127.0.0.1:" in text


def test_shipped_spec_pushes_to_the_shared_volume(tmp_path):
    from baton.pipeline.spec import spec_from_dict

    assert main(["--out", str(tmp_path), "--run-id", "r1"]) == 0
    cm = yaml.safe_load((tmp_path / "pipeline-spec.yaml").read_text())
    spec = spec_from_dict(yaml.safe_load(cm["data"]["pipeline.yaml"]))
    push = [s for s in spec.stages if s.type == "push"]
    assert push and all(s.config["serving_base"] == "/artifacts/models/penguins" for s in push)
    deploy = yaml.safe_load((tmp_path / "serving-deployment.yaml").read_text())
    assert "--model_base_path=/artifacts/models/penguins" in deploy["spec"]["template"]["spec"]["containers"][0]["args"]


def _train_spec(path, cluster: str, config: str):
    """ingest (penguins) -> transform -> train, with the given cluster section and train config."""
    path.write_text(
        f"pipeline: p\ncluster: {cluster}\nstages:\n"
        "  - {name: ingest, type: ingest, config: {source: penguins}}\n"
        "  - {name: transform, type: transform, inputs: {examples: ingest.examples}}\n"
        "  - name: train\n    type: train\n"
        "    inputs: {transformed: transform.transformed, transform_graph: transform.transform_graph}\n"
        f"    config: {config}\n")
    return path


@pytest.mark.parametrize("cluster,config,flags,source", [
    ("{strategy: parameter_server, workers: 2, ps: 1}", "{balance: auto}", [],
     "(cluster.strategy=parameter_server)"),
    ("{strategy: parameter_server, workers: 2, ps: 1}", "{jit_compile: true}", [],
     "(cluster.strategy=parameter_server)"),
    ("{strategy: multi_worker_mirrored, workers: 2}", "{balance: auto}",
     ["--strategy", "parameter_server", "--ps", "1"], "(--strategy parameter_server)"),
])
def test_train_config_the_strategy_refuses_exits_2_as_baton_run_does(
        tmp_path, capsys, cluster, config, flags, source):
    """The train stage's check_options runs for the TFJob's topology: `baton k8s` exits 2 with
    `baton run`'s message (same spec, same flags) and writes nothing, instead of manifests
    whose every replica fails."""
    spec = _train_spec(tmp_path / "spec.yaml", cluster, config)
    assert baton(["run", str(spec), "--check", *flags]) == 2
    expected = capsys.readouterr().err.split("baton run: error: ", 1)[1]
    assert source in expected
    assert baton(["k8s", str(spec), "--out", str(tmp_path / "o"), *flags]) == 2
    assert capsys.readouterr().err.split("baton k8s: error: ", 1)[1] == expected
    assert not (tmp_path / "o").exists()


def test_train_checks_follow_the_flags_and_not_this_machine(tmp_path, monkeypatch):
    """Flags that give a strategy `balance: auto` fits pass; and the batch is checked against
    the pods' resources only: two GPUs here (4 replicas, over which 34 does not divide) say
    nothing about the CPU pods (2 replicas)."""
    from baton.strategies import inventory

    ps = _train_spec(tmp_path / "ps.yaml", "{strategy: parameter_server, workers: 2, ps: 1}",
                     "{balance: auto}")
    assert baton(["k8s", str(ps), "--out", str(tmp_path / "a"), "--strategy",
                  "multi_worker_mirrored", "--ps", "0"]) == 0
    node = inventory.node_inventory()
    monkeypatch.setattr(inventory, "node_inventory", lambda: {**node, "gpus": 2})
    mwm = _train_spec(tmp_path / "mwm.yaml", "{strategy: multi_worker_mirrored, workers: 2}",
                      "{batch_size: 34}")
    assert baton(["run", str(mwm), "--check"]) == 2  # this machine's check would refuse it
    assert baton(["k8s", str(mwm), "--out", str(tmp_path / "b")]) == 0


def test_a_topology_given_in_the_train_config_shapes_the_tfjob(tmp_path):
    """The replicas resolve flags, then the train config, then `cluster:` (commands.task);
    the TFJob is shaped the same way (it was shaped by `cluster:` and the flags alone)."""
    spec = _train_spec(tmp_path / "spec.yaml", "{}",
                       "{strategy: parameter_server, workers: 3, ps: 1, batch_size: 48}")
    assert baton(["k8s", str(spec), "--out", str(tmp_path / "a"), "--target", "tfjob"]) == 0
    replicas = yaml.safe_load((tmp_path / "a" / "tfjob.yaml").read_text())["spec"]["tfReplicaSpecs"]
    assert {k: v["replicas"] for k, v in replicas.items()} == {"Chief": 1, "Worker": 3, "PS": 1}
    # a flag still beats the config
    assert baton(["k8s", str(spec), "--out", str(tmp_path / "b"), "--workers", "2",
                  "--target", "tfjob"]) == 0
    replicas = yaml.safe_load((tmp_path / "b" / "tfjob.yaml").read_text())["spec"]["tfReplicaSpecs"]
    assert replicas["Worker"]["replicas"] == 2
