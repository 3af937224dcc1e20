"""A federation meets the attacks a security probe ran against it, on real Flower processes.

- `baton run` of a federated spec (the rehearsal, as a user runs it) serves TLS with SuperNode
  authentication; while it runs, an attacker on the machine holding only public material (the
  SuperLink's address and its CA certificate) starts SuperNodes of their own under a client
  name already taken, with a key of their own and with none, and `flwr run`s an app bundle of
  their own. The SuperNodes are refused at the door and never receive a message, the run is
  refused by the Control API, and the rounds are the two registered clients'.
- With the Control API token leaked (an insider), a foreign bundle that even calls itself
  Baton's is accepted by the SuperLink, but no SuperNode runs its code: the warm ClientApp
  hosts answer "refused".
- In an `insecure: true` rehearsal the SuperLink admits any node, and the ServerApp still
  talks only to the nodes it registered: an unknown node under a taken name gets nothing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

pytestmark = [pytest.mark.slow, pytest.mark.multi_worker]

FOREIGN = Path(__file__).parent / "foreign_app"
BIN = Path(sys.executable).parent
PORT = re.compile(r"Uvicorn running on (https?)://127\.0\.0\.1:(\d+)")


def _env(home: Path) -> dict[str, str]:
    """An attacker's Flower environment: this venv's tools, a home of their own, offline."""
    home.mkdir(parents=True, exist_ok=True)
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "FLWR_HOME": str(home), "FLWR_TELEMETRY_ENABLED": "0",
            "FLWR_DISABLE_UPDATE_CHECK": "1", "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}


def _wait(predicate, timeout: float, what: str, proc: subprocess.Popen | None = None):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{what}: the run ended first ({proc.returncode})")
        time.sleep(0.3)
    raise AssertionError(f"{what} within {timeout} s")


def _superlink(root: Path) -> tuple[str, int] | None:
    """The scheme and port of the SuperLink a run under `root` started, from its log."""
    for log in root.rglob("superlink.log"):
        m = PORT.search(log.read_text(errors="replace"))
        if m:
            return m.group(1), int(m.group(2))
    return None


def _rogue(tmp: Path, name: str, port: int, ca: Path | None, data: Path,
           own_key: bool) -> subprocess.Popen:
    """A SuperNode that is not one of the federation's, claiming client-0's name."""
    args = [str(BIN / "flower-supernode"), "--superlink", f"127.0.0.1:{port}",
            "--host", "127.0.0.1", "--port", str(_free_port()),
            "--node-config", f"data-dir='{data}' client='client-0'", "--max-retries", "2"]
    if ca is None:
        args.append("--insecure")
    else:
        args += ["--root-certificates", str(ca)]
        if own_key:
            if not (tmp / f"{name}.key").exists():
                _key_pair(tmp, name)
            args += ["--auth-supernode-private-key", str(tmp / f"{name}.key")]
    log = (tmp / f"{name}.log").open("wb")
    return subprocess.Popen(args, env=_env(tmp / f"home-{name}"), stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)


def _key_pair(tmp: Path, name: str) -> Path:
    """An attacker's own SuperNode key pair (`name`.key, `name`.pub); the public key's path."""
    from baton.k8s import federation_pki as pki

    keys = pki.node_key_pair()
    (tmp / f"{name}.key").write_text(keys.private_openssh)
    (tmp / f"{name}.pub").write_text(keys.public_openssh)
    return tmp / f"{name}.pub"


def _free_port() -> int:
    from baton.strategies.cluster import free_ports

    return free_ports(1)[0]


def _cli(tmp: Path, label: str, port: int, ca: Path | None, token: str | None = None) -> Path:
    """A Flower CLI home for the SuperLink at `port`, as someone with the CA (public) and,
    given `token`, the Control API token would set one up."""
    home = tmp / f"cli-{label}"
    home.mkdir(parents=True)
    tls = "insecure = true\n" if ca is None else f'root-certificates = "{ca}"\n'
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "x"\n\n[superlink.x]\naddress = "127.0.0.1:{port}"\n{tls}')
    if token is not None:
        from baton.pipeline.federated.credentials import cli_login

        cli_login(home, f"127.0.0.1:{port}", token)
    return home


def _answer(res: subprocess.CompletedProcess) -> dict:
    """The JSON `flwr ... --format json` prints (it exits 0 on failures too)."""
    return json.loads(res.stdout[res.stdout.index("{"):])


def _flwr_run(tmp: Path, label: str, app: Path, port: int, ca: Path | None,
              token: str | None = None) -> subprocess.CompletedProcess:
    """`flwr run` of `app` against the SuperLink."""
    home = _cli(tmp, label, port, ca, token)
    out, marker = tmp / f"server-{label}.json", tmp / f"marker-{label}.json"
    return subprocess.run(
        [str(BIN / "flwr"), "run", str(app), "x", "--format", "json", "--run-config",
         f'out="{out}" marker="{marker}"'], env=_env(home), capture_output=True, text=True,
        timeout=120)


def _flwr_register(tmp: Path, public_key: Path, port: int, ca: Path | None
                   ) -> subprocess.CompletedProcess:
    """`flwr supernode register` of an attacker's own key, without the token."""
    home = _cli(tmp, "register", port, ca)
    return subprocess.run([str(BIN / "flwr"), "supernode", "register", str(public_key), "x",
                           "--format", "json"], env=_env(home), capture_output=True, text=True,
                          timeout=120)


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def test_the_rehearsal_runs_tls_and_node_auth_and_refuses_foreign_nodes_and_runs(tmp_path):
    spec = tmp_path / "fed.yaml"
    spec.write_text(yaml.safe_dump({"pipeline": "fedsec", "stages": [
        {"name": "ingest", "type": "ingest", "config": {"source": "penguins"}},
        {"name": "fl", "type": "federated", "inputs": {"examples": "ingest.examples"},
         "config": {"clients": 2, "partition": {"iid": True}, "rounds": 1, "min_clients": 2,
                    "round_timeout_s": 120, "model_params": {"hidden_units": [8]}}}]}))
    runs, attacker = tmp_path / "runs", tmp_path / "attacker"
    attacker.mkdir()
    out = (tmp_path / "baton.log").open("wb")
    run = subprocess.Popen([str(BIN / "baton"), "run", str(spec), "--runs-dir", str(runs)],
                           cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT,
                           start_new_session=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    rogues: list[subprocess.Popen] = []
    try:
        scheme, port = _wait(lambda: _superlink(runs), 300, "the SuperLink's start", run)
        ca = next(runs.rglob("ca.crt"), None)  # public: every silo gets it
        data = next(p.parent for p in runs.rglob("schema.json") if "ingest" in p.parts)
        # register a key of one's own first (the Control API), then join with it
        registered = _flwr_register(attacker, _key_pair(attacker, "rogue-keyed"), port, ca) \
            if ca is not None else None
        rogues = [_rogue(attacker, "rogue-keyed", port, ca, data, own_key=True),
                  _rogue(attacker, "rogue-keyless", port, ca, data, own_key=False)]
        foreign = _flwr_run(attacker, "tokenless", FOREIGN, port, ca)
        assert run.wait(timeout=600) == 0, (tmp_path / "baton.log").read_text()[-3000:]
    finally:
        _stop([run, *rogues])
    said = (tmp_path / "baton.log").read_text(errors="replace")
    # the foreign run: refused by the Control API, nothing of it ran anywhere
    answer = _answer(foreign)
    assert answer["success"] is False and "run-id" not in answer, answer
    assert "Authentication failed" in answer["error-message"], answer
    # registering a key of one's own: refused the same way
    assert registered is not None and _answer(registered)["success"] is False, registered
    assert not (attacker / "server-tokenless.json").exists()
    assert not (attacker / "marker-tokenless.json").exists()
    # the foreign SuperNodes: refused at the door, never a message
    for name in ("rogue-keyed", "rogue-keyless"):
        text = (attacker / f"{name}.log").read_text(errors="replace")
        assert "Failed to initialize the connection" in text, text[-2000:]
        assert "Receiving:" not in text, text[-2000:]
    assert all(p.returncode not in (None, 0) for p in rogues)
    # TLS and node authentication, by default
    assert scheme == "https" and ca is not None, said[-2000:]
    assert re.search(r"2 SuperNodes connected .*TLS, node authentication: registered node ids",
                     said), said[-3000:]
    # the rounds are the registered clients', each weighed by its own rows
    fl = runs / "fedsec"
    rounds = json.loads(next(fl.rglob("model/rounds.json")).read_text())
    assert [r["clients"] for r in rounds] == [["client-0", "client-1"]]
    log = [json.loads(x) for x in next(fl.rglob("server/rounds.jsonl")).read_text().splitlines()]
    setup = next(r for r in log if r["event"] == "setup")["clients"]
    silo = next(fl.rglob("clients/client-0/schema.json"))
    assert setup["client-0"]["train"] <= json.loads(silo.read_text())["splits"]["train"]
    assert not list(fl.rglob("control.token")), "the run's secrets outlive it"


def test_a_leaked_token_runs_a_foreign_serverapp_but_no_node_runs_its_clientapp(tmp_path, examples):
    """Defense in depth: the SuperNodes' ClientApp hosts run Baton's ClientApp, never code
    from a run's bundle, even one that names itself Baton's."""
    from baton.pipeline.federated.credentials import rehearsal
    from baton.pipeline.federated.processes import Federation

    app = tmp_path / "spoof"
    shutil.copytree(FOREIGN, app)
    text = (app / "pyproject.toml").read_text()
    (app / "pyproject.toml").write_text(text.replace('name = "foreign-app"',
                                                     'name = "baton-federated"').replace(
        'publisher = "mallory"', 'publisher = "baton"'))
    creds = rehearsal(tmp_path / "creds", ["client-0"])
    fed = Federation(tmp_path / "fed", {"client-0": Path(examples)}, creds)
    try:
        fed.start()
        # without the SuperExec secret nobody takes a task: not the SuperLink's ServerApp
        # tasks (its Runtime API shares the public port), not the node's ClientApp tasks
        args = fed.nodes["client-0"].popen.args
        node_port = args[args.index("--port") + 1]
        for url, verify in ((f"https://127.0.0.1:{fed.port}", str(creds.ca_cert)),
                            (f"http://127.0.0.1:{node_port}", False)):
            res = httpx.post(f"{url}/v1/runtime/acquire-task", verify=verify, content=b"",
                             headers={"content-type": "application/protobuf"}, timeout=30)
            assert res.status_code == 401, (url, res.status_code, res.text)
        res = _flwr_run(tmp_path, "leaked", app, fed.port, creds.ca_cert, creds.token())
        answer = _answer(res)
        assert answer["success"] is True, answer  # the token opens the Control API
        out = _wait(lambda: (tmp_path / "server-leaked.json").is_file()
                    and json.loads((tmp_path / "server-leaked.json").read_text()),
                    240, "the foreign ServerApp's answer")
    finally:
        fed.stop()
    assert out["nodes"] == [fed.registry["client-0"]] and out["ok"] == 0, out
    assert len(out["errors"]) == 1 and "refused" in out["errors"][0], out
    assert "names clientapp 'foreign_app:client'" in out["errors"][0], out
    assert not (tmp_path / "marker-leaked.json").exists()
    host = (tmp_path / "fed" / "logs" / "supernode-client-0.log").read_text(errors="replace")
    assert "refused: run" in host


def test_an_insecure_rehearsal_still_talks_only_to_the_nodes_it_started(tmp_path, examples):
    """`insecure: true` drops TLS and node authentication (the SuperLink admits any node);
    the ServerApp's registry still leaves an unknown node out of every message."""
    import threading

    from baton.pipeline.testing import run_stage

    attacker = tmp_path / "attacker"
    attacker.mkdir()
    result: dict = {}

    def stage() -> None:
        try:
            result["out"], result["metrics"] = run_stage(
                "federated", {"clients": 2, "partition": {"iid": True}, "rounds": 2,
                              "min_clients": 2, "round_timeout_s": 120, "insecure": True,
                              "model_params": {"hidden_units": [8]}},
                {"examples": examples}, tmp_path / "root")
        except Exception as exc:  # noqa: BLE001 - reported below
            result["error"] = exc

    thread = threading.Thread(target=stage)
    thread.start()
    rogue = None
    try:
        scheme, port = _wait(lambda: _superlink(tmp_path / "root"), 300, "the SuperLink")
        rogue = _rogue(attacker, "rogue", port, None, Path(examples), own_key=False)
        thread.join(timeout=600)
    finally:
        if rogue is not None:
            _stop([rogue])
        thread.join(timeout=60)
    assert "error" not in result, result.get("error")
    assert scheme == "http"
    text = (attacker / "rogue.log").read_text(errors="replace")
    assert "SuperNode ID" in text, text[-2000:]  # admitted by the insecure SuperLink...
    assert "Receiving:" not in text, text[-2000:]  # ...and never sent a message
    rounds = json.loads((result["out"]["model"] / "rounds.json").read_text())
    assert [r["clients"] for r in rounds] == [["client-0", "client-1"]] * 2
    rogue_id = int(re.findall(r"SuperNode ID: (\d+)", text)[-1])
    log = [json.loads(x) for x in next((tmp_path / "root").rglob("server/rounds.jsonl"))
           .read_text().splitlines()]
    refused = [e for r in log if r.get("event") == "admission" for e in r["events"]]
    assert {"refused": "unregistered node", "node": rogue_id} in refused, log
