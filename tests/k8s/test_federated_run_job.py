"""The federation `baton k8s` writes, rehearsed with `baton k8s emulate OUT`: the data Job,
the SuperLink Deployment and Service, one SuperNode Deployment per client (each with only its
silo mounted, read-only) and the run Job (`baton run ... --only fl --superlink <Service>`), as
local processes from the manifests' own commands. The stage must publish its outputs with
lineage and start no SuperLink or SuperNode of its own; the emulator stops the Deployments
when the Job is done."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from baton.k8s import federated
from baton.pipeline.cli import main as baton
from baton.pipeline.commands.k8s import main as k8s

pytestmark = [pytest.mark.slow, pytest.mark.multi_worker]

# round_timeout_s: a loaded 2-core machine spawns each ClientApp (TensorFlow's import) in ~30 s
CONFIG = {"clients": 2, "partition": {"iid": True}, "rounds": 1, "min_clients": 2,
          "round_timeout_s": 300, "batch_size": 32, "model_params": {"hidden_units": [8]}}


def _spec(tmp_path: Path, config: dict | None = None) -> Path:
    stages = [
        {"name": "ingest", "type": "ingest", "config": {"source": "penguins"}},
        {"name": "fl", "type": "federated", "inputs": {"examples": "ingest.examples"},
         "config": config or CONFIG},
    ]
    path = tmp_path / "fed.yaml"
    path.write_text(yaml.safe_dump({"pipeline": "fedpen", "stages": stages}, sort_keys=False))
    return path


def test_baton_k8s_emulate_runs_the_generated_federation(tmp_path, capsys):
    out, work, volume = tmp_path / "m", tmp_path / "work", tmp_path / "volume"
    assert k8s([str(_spec(tmp_path)), "--out", str(out), "--run-id", "r1", "--namespace",
                "ml"]) == 0
    capsys.readouterr()
    assert k8s(["emulate", str(out), "--work-dir", str(work), "--volume-dir", str(volume)]) == 0
    said = capsys.readouterr().out
    assert "every Job succeeded (fedpen-r1-data, fedpen-r1-flwr-run)" in said, said[-3000:]
    status = json.loads((work / "status.json").read_text())
    assert set(status["pods"]) == {"fedpen-r1-superlink-0", "fedpen-r1-node-client-0-0",
                                   "fedpen-r1-node-client-1-0", "fedpen-r1-data-0",
                                   "fedpen-r1-flwr-run-0"}  # the serving Deployment is not run
    restarted = {name: (pod["exitCodes"], (work / "logs" / f"{name}.log").read_text(
        errors="replace")[-2000:]) for name, pod in status["pods"].items() if pod["restarts"]}
    assert status["problems"] == [] and not restarted, (status["problems"], restarted,
                                                         said[-3000:])
    link = json.loads((work / "addresses.json").read_text())["services"][
        "fedpen-r1-superlink.ml.svc:9091"]

    run_dir = volume / "runs" / "fedpen" / "r1"
    record = json.loads((run_dir / "fl" / "lineage.json").read_text())
    assert record["status"] == "succeeded" and set(record["outputs"]) == {"model",
                                                                          "transform_graph"}
    assert record["metrics"]["rounds"] == 1 and "bytes_per_round" not in record["metrics"]
    rounds = json.loads((run_dir / "fl" / "model" / "rounds.json").read_text())
    assert [r["round"] for r in rounds] == [1]
    assert rounds[0]["clients"] == ["client-0", "client-1"] and "bytes_up" not in rounds[0]
    assert any((run_dir / "fl" / "transform_graph").iterdir())
    fed_dir = run_dir / "fl.federation"
    plan = json.loads((fed_dir / "plan.json").read_text())
    assert plan["out_dir"] == str(fed_dir / "server") and plan["wire_path"] == ""
    assert all((fed_dir / "clients" / f"client-{i}" / "schema.json").is_file() for i in (0, 1))
    log = (work / "logs" / "fedpen-r1-flwr-run-0.log").read_text()
    assert f"external SuperLink at {link}: no SuperLink or SuperNode started here" in log
    assert "bytes on the wire are not counted" in log
    assert not (run_dir / "fl" / "federation").exists()  # no local federation's files
    node_log = (work / "logs" / "fedpen-r1-node-client-0-0.log").read_text()
    assert "container wait-for-data" in node_log and "container supernode" in node_log
    # TLS and node authentication, from the manifests' own Secrets: the SuperLink serves
    # HTTPS with only registered nodes; the run Job registered exactly the two clients'
    # keys before submitting; each node proved its key (no self-registration) and its warm
    # ClientApp host, not a process per message, answered
    link_log = (work / "logs" / "fedpen-r1-superlink-0.log").read_text()
    assert "Uvicorn running on https://" in link_log and "--insecure" not in link_log
    assert "SuperNode authentication is disabled" not in link_log
    assert "registered 2 SuperNode keys (exactly the spec's clients)" in log
    for i in (0, 1):
        node_log = (work / "logs" / f"fedpen-r1-node-client-{i}-0.log").read_text()
        assert "SuperNode ID" in node_log and "served train" in node_log, node_log[-2000:]
    keys = list((work / "configmaps").glob("secret-*/node.key"))
    assert len(keys) == 2 and all(k.stat().st_mode & 0o077 == 0 for k in keys)
    # nothing outlives the emulation: not the daemons, nor what they spawned in their own
    # sessions (flower-superexec, flwr-serverapp, flwr-clientapp dial the daemons' ports)
    ports = [a.rsplit(":", 1)[1] for a in json.loads((work / "addresses.json").read_text())[
        "services"].values()]
    assert _processes_mentioning([str(tmp_path), *(f"127.0.0.1:{p}" for p in ports)]) == []


def _processes_mentioning(needles: list[str]) -> list[str]:
    found = []
    for d in Path("/proc").iterdir():
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z" and any(n in cmd for n in needles):
            found.append(cmd)
    return found


def test_superlink_refuses_inject_failure_naming_the_flag(tmp_path, capsys):
    spec = _spec(tmp_path)
    assert baton(["run", str(spec), "--superlink", "127.0.0.1:9091", "--superlink-credentials",
                  str(tmp_path), "--inject-failure", "client:1@round:1", "--check"]) == 2
    err = capsys.readouterr().err
    assert "--inject-failure kills a SuperNode or the SuperLink this stage started" in err
    assert "'client:1@round:1' with --superlink 127.0.0.1:9091" in err


def test_superlink_without_its_credentials_exits_2_naming_the_flag(tmp_path, capsys):
    assert baton(["run", str(_spec(tmp_path)), "--superlink", "h:9091", "--check"]) == 2
    err = capsys.readouterr().err
    assert "--superlink h:9091 needs --superlink-credentials DIR" in err
    assert baton(["run", str(_spec(tmp_path)), "--superlink-credentials", str(tmp_path),
                  "--check"]) == 2
    assert "--superlink-credentials goes with --superlink" in capsys.readouterr().err


def test_insecure_with_superlink_exits_2(tmp_path, capsys):
    spec = _spec(tmp_path, {**CONFIG, "insecure": True})
    assert baton(["run", str(spec), "--superlink", "h:9091", "--superlink-credentials",
                  str(tmp_path), "--check"]) == 2
    assert "insecure: true is for a local rehearsal on 127.0.0.1" in capsys.readouterr().err


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
