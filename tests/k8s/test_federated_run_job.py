"""The federation `baton k8s` writes, run on this machine: the SuperLink and SuperNodes started
with exactly the command lines of the generated Deployments (127.0.0.1 and free ports for the
Service and pod ports, local directories for the volumes), the data Job's command, then the run
Job's (`baton run ... --only fl --superlink <Service>`) against them. The stage must publish
its outputs with lineage and start no SuperLink or SuperNode of its own."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
import yaml

from baton.k8s import federated
from baton.pipeline.cli import main as baton
from baton.pipeline.commands.k8s import main as k8s

pytestmark = [pytest.mark.slow, pytest.mark.multi_worker]

CONFIG = {"clients": 2, "partition": {"iid": True}, "rounds": 1, "min_clients": 2,
          "round_timeout_s": 60, "batch_size": 32, "model_params": {"hidden_units": [8]}}


def _spec(tmp_path: Path, config: dict | None = None) -> Path:
    stages = [
        {"name": "ingest", "type": "ingest", "config": {"source": "penguins"}},
        {"name": "fl", "type": "federated", "inputs": {"examples": "ingest.examples"},
         "config": config or CONFIG},
    ]
    path = tmp_path / "fed.yaml"
    path.write_text(yaml.safe_dump({"pipeline": "fedpen", "stages": stages}, sort_keys=False))
    return path


def _manifests(spec: Path, out: Path) -> dict[str, dict]:
    assert k8s([str(spec), "--out", str(out), "--run-id", "r1", "--namespace", "ml"]) == 0
    docs = {}
    for f in out.glob("*.yaml"):
        for d in yaml.safe_load_all(f.read_text()):
            if d and d.get("kind") in ("Deployment", "Job"):
                docs[d["metadata"]["name"]] = d
    return docs


def _container(doc: dict) -> tuple[dict, dict]:
    pod = doc["spec"]["template"]["spec"]
    return pod, pod["containers"][0]


def _local_mounts(pod: dict, container: dict, roots: dict[str, Path]) -> dict[str, Path]:
    """mountPath -> local directory: a claim is a directory under tmp (its subPath inside it)."""
    vols = {v["name"]: v for v in pod["volumes"]}
    out = {}
    for m in container["volumeMounts"]:
        vol = vols[m["name"]]
        if "persistentVolumeClaim" in vol:
            base = roots[vol["persistentVolumeClaim"]["claimName"]]
        elif "configMap" in vol:
            base = roots["configmap"]
        else:
            base = roots["emptydir"] / m["name"]
        out[m["mountPath"]] = base / m.get("subPath", "")
    return out


def _argv(container: dict, mounts: dict[str, Path], ports: dict[str, str]) -> list[str]:
    """The container's command line with the pod's paths and addresses made local."""
    argv = []
    for arg in [*container["command"], *container["args"]]:
        for cluster, local in sorted(mounts.items(), key=lambda kv: -len(kv[0])):
            arg = arg.replace(f"'{cluster}'", f"'{local}'")
            if arg == cluster or arg.startswith(cluster + "/"):
                arg = str(local) + arg[len(cluster):]
        argv.append(ports.get(arg, arg))
    exe = Path(sys.executable).parent
    if argv[0] == "baton":
        return [sys.executable, "-m", "baton", *argv[1:]]
    return [str(exe / argv[0]), *argv[1:]]


def _env(container: dict, home: Path) -> dict[str, str]:
    from baton.pipeline.federated.processes import flower_env

    env = flower_env(home)  # PATH with the venv first, as the image has it
    env.update({e["name"]: e["value"] for e in container.get("env", [])
                if e["name"] != "FLWR_HOME"})
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


def _flower_descendants(pid: int) -> list[str]:
    from baton.pipeline.federated.processes import _descendants

    found = []
    for child in _descendants(pid):
        try:
            cmd = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "flower-superlink" in cmd or "flower-supernode" in cmd:
            found.append(cmd)
    return found


def test_the_generated_run_job_trains_against_the_generated_superlink_and_supernodes(tmp_path):
    from baton.pipeline.federated.processes import Proc, free_port

    spec = _spec(tmp_path)
    docs = _manifests(spec, tmp_path / "m")
    link_doc, run_doc, data_doc = (docs["fedpen-r1-superlink"], docs["fedpen-r1-flwr-run"],
                                   docs["fedpen-r1-data"])
    node_docs = [d for n, d in docs.items() if "-node-" in n]
    assert len(node_docs) == 2
    roots = {"fedpen-artifacts": tmp_path / "artifacts", "fedpen-r1-superlink-state":
             tmp_path / "state", "configmap": tmp_path / "cm", "emptydir": tmp_path / "emptydir"}
    for p in roots.values():
        p.mkdir(parents=True, exist_ok=True)
    (roots["configmap"] / "pipeline.yaml").write_text(spec.read_text())  # the spec ConfigMap
    port, service = str(free_port()), "fedpen-r1-superlink.ml.svc:9091"
    logs = tmp_path / "logs"
    started: list[Proc] = []
    try:
        # the SuperLink Deployment
        pod, c = _container(link_doc)
        argv = _argv(c, _local_mounts(pod, c, roots), {"0.0.0.0": "127.0.0.1", "9091": port})
        started.append(Proc("superlink", argv, _env(c, tmp_path / "home" / "superlink"), logs))
        # the data Job (ingest), as the cluster runs it before the federation's inputs exist
        pod, c = _container(data_doc)
        data = Proc("data-job", _argv(c, _local_mounts(pod, c, roots), {}),
                    _env(c, tmp_path / "home" / "data"), logs)
        started.append(data)
        assert data.popen.wait(timeout=240) == 0, data.tail()
        # the run Job; its init containers waited for ingest/examples and the SuperLink's port
        pod, c = _container(run_doc)
        assert [i["name"] for i in pod["initContainers"]] == ["wait-for-inputs",
                                                              "wait-for-superlink"]
        job_argv = _argv(c, _local_mounts(pod, c, roots), {service: f"127.0.0.1:{port}"})
        assert job_argv[job_argv.index("--superlink") + 1] == f"127.0.0.1:{port}"
        job = Proc("run-job", job_argv, _env(c, tmp_path / "home" / "job"), logs)
        started.append(job)
        # the SuperNode Deployments: each starts once its silo's schema.json is there (its
        # init container `wait-for-data`), with only that silo mounted at /data
        waiting = list(node_docs)
        deadline = time.time() + 300
        while job.alive() and time.time() < deadline:
            assert _flower_descendants(job.popen.pid) == []
            for doc in list(waiting):
                pod, c = _container(doc)
                mounts = _local_mounts(pod, c, roots)
                if (mounts[federated.DATA_DIR] / "schema.json").is_file():
                    argv = _argv(c, mounts, {"0.0.0.0": "127.0.0.1",
                                             str(federated.NODE_PORT): str(free_port()),
                                             service: f"127.0.0.1:{port}"})
                    name = doc["metadata"]["annotations"]["baton.dev/client"]
                    started.append(Proc(f"supernode-{name}", argv,
                                        _env(c, tmp_path / "home" / name), logs))
                    waiting.remove(doc)
            time.sleep(0.5)
        assert job.popen.wait(timeout=10) == 0, job.tail(6000)
        assert not waiting
    finally:
        for proc in reversed(started):
            proc.stop()

    run_dir = tmp_path / "artifacts" / "runs" / "fedpen" / "r1"
    record = json.loads((run_dir / "fl" / "lineage.json").read_text())
    assert record["status"] == "succeeded" and set(record["outputs"]) == {"model",
                                                                          "transform_graph"}
    assert record["metrics"]["rounds"] == 1 and "bytes_per_round" not in record["metrics"]
    rounds = json.loads((run_dir / "fl" / "model" / "rounds.json").read_text())
    assert [r["round"] for r in rounds] == [1]
    assert rounds[0]["clients"] == ["client-0", "client-1"] and "bytes_up" not in rounds[0]
    assert (run_dir / "fl" / "transform_graph" / "saved_model.pb").is_file() or any(
        (run_dir / "fl" / "transform_graph").iterdir())
    fed_dir = run_dir / "fl.federation"
    assert (fed_dir / "plan.json").is_file()
    plan = json.loads((fed_dir / "plan.json").read_text())
    assert plan["out_dir"] == str(fed_dir / "server") and plan["wire_path"] == ""
    assert all((fed_dir / "clients" / f"client-{i}" / "schema.json").is_file() for i in (0, 1))
    log = (logs / "run-job.log").read_text()
    assert f"external SuperLink at 127.0.0.1:{port}: no SuperLink or SuperNode started here" in log
    assert "bytes on the wire are not counted" in log
    assert not (run_dir / "fl" / "federation").exists()  # no local federation's files


def test_superlink_refuses_inject_failure_naming_the_flag(tmp_path, capsys):
    spec = _spec(tmp_path)
    assert baton(["run", str(spec), "--superlink", "127.0.0.1:9091", "--inject-failure",
                  "client:1@round:1", "--check"]) == 2
    err = capsys.readouterr().err
    assert "--inject-failure kills a SuperNode or the SuperLink this stage started" in err
    assert "'client:1@round:1' with --superlink 127.0.0.1:9091" in err


@pytest.mark.parametrize("address", ["nohost", "host:", ":9091", "host:port", "host:70000"])
def test_a_bad_superlink_address_exits_2(tmp_path, capsys, address):
    assert baton(["run", str(_spec(tmp_path)), "--superlink", address, "--check"]) == 2
    assert "--superlink must be HOST:PORT of a Flower SuperLink" in capsys.readouterr().err


def test_superlink_without_a_federated_stage_to_run_exits_2(tmp_path, capsys):
    assert baton(["run", str(_spec(tmp_path)), "--superlink", "h:9091", "--only", "ingest",
                  "--check"]) == 2
    assert "none of the stages that would run is one" in capsys.readouterr().err


def test_the_stage_and_the_manifests_agree_on_the_federation_directory():
    from baton.pipeline.stages import federated as stage

    assert stage.FEDERATION_SUFFIX == federated.FEDERATION_SUFFIX
