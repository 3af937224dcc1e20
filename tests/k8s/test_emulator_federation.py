"""`baton k8s emulate` of a federation's manifests with tiny Python stand-ins (fast).

The manifests are the ones `baton k8s` writes (k8s.federated), validated; only each main
container's `command` is replaced by a stand-in that keeps the manifest's own args, so the
init containers run as written and the Service address, the containerPorts, the bind address
and the volumes are translated exactly as for the real SuperLink and SuperNodes
(tests/k8s/test_federated_run_job.py runs those).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from baton.errors import EXIT_FAILED, EXIT_OK, EXIT_PREEMPTED
from baton.k8s.emulator.federation import FederationEmulator, FederationOptions, select
from baton.k8s.federated import Federation
from baton.k8s.render import write_manifests

from .conftest import make_options

# argv[1] says which part it plays; the rest are the manifest's args, untouched
STAND_IN = r"""
import os, socket, sys, time
role, args = sys.argv[1], sys.argv[2:]
def arg(flag):
    return args[args.index(flag) + 1]
def secret(flag):  # a file of the pod's own Secret, materialised by the emulator
    path = arg(flag)
    assert os.path.isfile(path) and os.stat(path).st_mode & 0o077 == 0, path
    return open(path).read()
if role == "superlink":
    assert "BEGIN CERTIFICATE" in secret("--ssl-certfile") and secret("--ssl-keyfile")
    assert len(open(os.environ["BATON_CONTROL_TOKEN_FILE"]).read()) == 64
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((arg("--host"), int(arg("--port")))); s.listen(16)
    with open(arg("--database"), "w") as fh:
        fh.write(f"{arg('--host')}:{arg('--port')}")
    while True:
        s.accept()[0].close()
elif role == "supernode":
    assert "OPENSSH PRIVATE KEY" in secret("--auth-supernode-private-key")
    assert "BEGIN CERTIFICATE" in secret("--root-certificates")
    host, _, port = arg("--superlink").rpartition(":")
    socket.create_connection((host, int(port)), 5).close()
    config = dict(kv.split("=", 1) for kv in arg("--node-config").split())
    data = config["data-dir"].strip("'")
    assert os.path.isfile(os.path.join(data, "schema.json")), data
    with open(os.path.join(os.environ["FLWR_HOME"], "node.txt"), "w") as fh:
        fh.write(f"{arg('--host')}:{arg('--port')} {data}")
    if os.environ.get("WRITE_DATA"):  # break the manifest's readOnly: the run must fail
        open(os.path.join(data, "written-by-the-node"), "w").close()
    time.sleep(600)
else:  # the run Job: `baton run ... --superlink ADDRESS --superlink-credentials DIR`
    creds = arg("--superlink-credentials")
    assert sorted(os.listdir(os.path.join(creds, "nodes"))) == ["client-0.pub", "client-1.pub"]
    assert os.path.isfile(os.path.join(creds, "ca.crt"))
    host, _, port = arg("--superlink").rpartition(":")
    socket.create_connection((host, int(port)), 5).close()
    print("run job reached", arg("--superlink"), flush=True)
    time.sleep(float(os.environ.get("JOB_SECONDS", "1.5")))
    sys.exit(int(os.environ.get("JOB_EXIT", "0")))
"""


def _federation(tmp_path: Path) -> tuple[list[dict], Path, Path]:
    """The federation's documents with stand-in commands, the manifests dir, the volume dir."""
    opts = make_options(pipeline="fedpen", run_id="r1", namespace="ml", tfjob=False,
                        data_stages=(), release_stages=(), train_inputs=(), release_inputs=())
    fed = Federation.from_config("fl", {"clients": 2}, inputs=())
    out = tmp_path / "manifests"
    write_manifests(opts, out, federation=fed)
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    docs = [d for f in sorted(out.glob("federated-*.yaml"))
            for d in yaml.safe_load_all(f.read_text()) if d]
    for d in docs:
        if d["kind"] in ("Deployment", "Job"):
            c = d["spec"]["template"]["spec"]["containers"][0]
            role = d["metadata"]["labels"]["app.kubernetes.io/component"]
            c["command"] = [sys.executable, str(script), role]
    volume = tmp_path / "volume"
    for i in range(2):  # what the run Job's stage writes before the nodes start
        silo = volume / "runs" / "fedpen" / "r1" / "fl.federation" / "clients" / f"client-{i}"
        silo.mkdir(parents=True)
        (silo / "schema.json").write_text("{}")
    return select(docs), out, volume


def _options(tmp_path: Path, out: Path, volume: Path, **env: str) -> FederationOptions:
    return FederationOptions(volume_dir=volume, work_dir=tmp_path / "work", manifests_dir=out,
                             env=env, grace_seconds=5.0)


def test_the_federation_runs_until_its_job_ends_on_local_addresses_and_ports(tmp_path):
    docs, out, volume = _federation(tmp_path)
    assert {d["kind"] for d in docs} == {"Deployment", "Service", "Job", }
    emu = FederationEmulator(docs, _options(tmp_path, out, volume))
    assert emu.run() == EXIT_OK, emu.status()
    work = tmp_path / "work"
    addresses = json.loads((work / "addresses.json").read_text())
    local = addresses["services"]["fedpen-r1-superlink.ml.svc:9091"]
    link_port = addresses["pods"]["fedpen-r1-superlink-0"]["9091"]
    assert local == f"127.0.0.1:{link_port}" and link_port != 9091
    # the SuperLink bound 127.0.0.1 and its local port; its database is on the state claim
    assert (volume / "superlink.db").read_text() == local
    node_ports = set()
    for i in range(2):
        pod = f"fedpen-r1-node-client-{i}-0"
        text = (work / "pods" / pod / "flwr-home" / "node.txt").read_text()
        bind, data = text.split()
        assert bind.startswith("127.0.0.1:") and data.endswith(f"clients/client-{i}")
        node_ports.add(bind)
    assert len(node_ports) == 2  # the two nodes' ClientAppIo ports differ
    log = (work / "logs" / "fedpen-r1-flwr-run-0.log").read_text()
    assert f"run job reached {local}" in log and "container wait-for-superlink" in log
    status = json.loads((work / "status.json").read_text())
    assert status["pods"]["fedpen-r1-flwr-run-0"]["phase"] == "Succeeded"
    assert all(p["phase"] == "Deleted" for n, p in status["pods"].items() if "run" not in n)


def test_a_failed_job_fails_the_run_after_its_backoff_limit(tmp_path):
    docs, out, volume = _federation(tmp_path)
    for d in docs:
        if d["kind"] == "Job":
            d["spec"]["backoffLimit"] = 1
    emu = FederationEmulator(docs, _options(tmp_path, out, volume, JOB_EXIT="3", JOB_SECONDS="0"))
    assert emu.run() == EXIT_FAILED
    run = emu.status()["pods"]["fedpen-r1-flwr-run-0"]
    assert run["exitCodes"] == [3, 3] and run["restarts"] == 1
    assert "Job fedpen-r1-flwr-run failed (exit code 3, backoffLimit 1 reached)" in emu.problems


def test_a_write_under_a_read_only_data_mount_fails_the_run(tmp_path):
    docs, out, volume = _federation(tmp_path)
    emu = FederationEmulator(docs, _options(tmp_path, out, volume, WRITE_DATA="1"))
    assert emu.run() == EXIT_FAILED
    assert any("fedpen-r1-node-client-0-0: /data is read-only in its manifest" in p
               and "written-by-the-node" in p for p in emu.problems), emu.problems


def test_sigterm_deletes_every_pod_and_exits_143(tmp_path):
    docs, out, volume = _federation(tmp_path)
    (tmp_path / "docs.json").write_text(json.dumps(docs))
    code = (
        "import json, sys; from pathlib import Path\n"
        "from baton.k8s.emulator.federation import FederationOptions, emulate_documents\n"
        f"docs = json.loads(Path({str(tmp_path / 'docs.json')!r}).read_text())\n"
        f"sys.exit(emulate_documents(docs, FederationOptions(volume_dir=Path({str(volume)!r}), "
        f"work_dir=Path({str(tmp_path / 'work')!r}), manifests_dir=Path({str(out)!r}), "
        "grace_seconds=5.0)))\n")
    env = {**os.environ, "JOB_SECONDS": "600"}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        log = tmp_path / "work" / "logs" / "fedpen-r1-flwr-run-0.log"
        deadline = time.time() + 60
        while not (log.exists() and "run job reached" in log.read_text()):
            assert proc.poll() is None and time.time() < deadline, proc.stdout.read().decode()
            time.sleep(0.2)
        pids = _descendants(proc.pid)
        assert len(pids) >= 4  # SuperLink, two SuperNodes, the run Job
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == EXIT_PREEMPTED
        time.sleep(0.2)
        assert [p for p in pids if Path(f"/proc/{p}").exists() and not _zombie(p)] == []
        assert "SIGTERM: the objects are deleted" in proc.stdout.read().decode()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_service_selecting_no_deployment_is_refused(tmp_path):
    from baton.k8s.emulator.pods import EmulationError

    docs, out, volume = _federation(tmp_path)
    for d in docs:
        if d["kind"] == "Service":
            d["spec"]["selector"] = {"app": "nothing"}
    with pytest.raises(EmulationError, match="matches no Deployment"):
        FederationEmulator(docs, _options(tmp_path, out, volume))


def _descendants(pid: int) -> list[int]:
    from baton.pipeline.federated.launch import _descendants as found

    return found(pid)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


@pytest.mark.parametrize("extra, message", [
    (["--volume", "no-equals"], "--volume must be CLAIM=DIR. Received: 'no-equals'"),
    (["--command", "true"], "--command replaces a TFJob file's tensorflow container"),
])
def test_emulate_cli_refuses_bad_federation_flags_naming_them(tmp_path, capsys, extra, message):
    from baton.pipeline.cli import main as baton

    _federation(tmp_path)
    assert baton(["k8s", "emulate", str(tmp_path / "manifests"), *extra]) == 2
    assert message in capsys.readouterr().err


def test_emulate_cli_names_the_kinds_when_there_is_nothing_to_run(tmp_path, capsys):
    from baton.pipeline.cli import main as baton

    _federation(tmp_path)
    assert baton(["k8s", "emulate", str(tmp_path / "manifests" / "pvc.yaml")]) == 2
    assert "no TFJob, JobSet, TrainJob or federation (SuperLink Deployment) to emulate. Received kinds: " \
           "['PersistentVolumeClaim']" in capsys.readouterr().err


def test_a_pod_mounting_a_secret_that_is_not_beside_the_manifests_is_refused(tmp_path):
    from baton.k8s.emulator.pods import EmulationError

    docs, out, volume = _federation(tmp_path)
    (out / "federated-secrets.yaml").unlink()
    emu = FederationEmulator(docs, _options(tmp_path, out, volume))
    with pytest.raises(EmulationError, match="mounts Secret 'fedpen-r1-.*-credentials', which is not in the"):
        emu.run()
