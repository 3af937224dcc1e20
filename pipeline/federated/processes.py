"""A Flower federation on this machine: one SuperLink, one SuperNode per client, real processes.

What Flower 1.42 needs, found by running it offline (the helper's notes are in
docs/federated.md): the SuperLink serves its Fleet, Runtime and Control APIs on one HTTP port;
both daemons start `flower-superexec` by name, so the venv's bin goes first on PATH; telemetry,
the update check and the runtime `uv sync` are switched off (no network); every component gets
its own FLWR_HOME. A run is submitted with `flwr run <app> <connection>` (the connection named in
the CLI's own FLWR_HOME/config.toml) and followed with `flwr ls --format json`.

Every SuperNode reaches the SuperLink through its own counting relay (pipeline.federated.wire),
so bytes per client are measured on the wire. `Control` is the CLI side alone (submit, status,
logs) for a SuperLink at any address: `Federation` is one, and `baton run --superlink HOST:PORT`
uses one for a SuperLink this process did not start (a Kubernetes Service), where there are no
relays and no bytes are counted. Processes start in their own sessions on free
127.0.0.1 ports and are stopped by process group (and their descendants, which the daemons
spawn), SIGTERM then SIGKILL: nothing is left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from baton.errors import StageError
from baton.pipeline.federated import wire
from baton.strategies.supervisor import descendants

APP_PYPROJECT = """\
[project]
name = "baton-federated"
version = "1.0.0"
description = "Baton's federated training (ServerApp and ClientApp live in the baton package)"
dependencies = []

[tool.flwr.app]
publisher = "baton"

[tool.flwr.app.components]
serverapp = "baton.pipeline.federated.flower_server:app"
clientapp = "baton.pipeline.federated.flower_client:app"

[tool.flwr.app.config]
baton-plan = ""
"""
CONNECTION = "baton"


def free_port() -> int:
    """A free port below the ephemeral range (strategies.cluster.free_ports says why)."""
    from baton.strategies.cluster import free_ports

    return free_ports(1)[0]


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def flower_env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The daemons' environment. Their SuperExecs keep Flower's 1 s poll for apps to launch
    (FLWR_SUPEREXEC_TASK_POLL_INTERVAL): each ask is an HTTP call a daemon answers, and on a
    busy 2-core machine CPU is the scarce thing, not the 0.4 s a faster ask saves a message
    (pipeline.federated.grid has the figures)."""
    home.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               FLWR_HOME=str(home), FLWR_TELEMETRY_ENABLED="0", FLWR_DISABLE_UPDATE_CHECK="1",
               FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1", TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONUNBUFFERED="1")
    env.update(extra or {})
    return env


def _descendants(pid: int) -> list[int]:
    return [p for p, _ in descendants(pid)]


class Proc:
    def __init__(self, name: str, argv: list[str], env: dict[str, str], logs: Path) -> None:
        logs.mkdir(parents=True, exist_ok=True)
        self.name, self.log = name, logs / f"{name}.log"
        with self.log.open("ab") as fh:
            # a restarted process appends to its predecessor's log: tail() reads only its own
            # part, so "Application startup complete" of the killed SuperLink does not count
            self.offset = fh.tell()
            self.popen = subprocess.Popen(argv, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal_tree(self, sig: int) -> None:
        for pid in [self.popen.pid, *_descendants(self.popen.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def kill(self) -> None:
        """SIGKILL the process and everything it started (a crashed host)."""
        self.signal_tree(signal.SIGKILL)
        self.popen.wait(timeout=10)

    def stop(self, grace: float = 5.0) -> None:
        tree = [self.popen.pid, *_descendants(self.popen.pid)]
        self.signal_tree(signal.SIGTERM)
        deadline = time.time() + grace
        while time.time() < deadline and self.alive():
            time.sleep(0.1)
        for pid in tree + _descendants(self.popen.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=5)

    def tail(self, n: int = 3000) -> str:
        try:
            with self.log.open("rb") as fh:
                fh.seek(self.offset)
                return fh.read().decode(errors="replace")[-n:]
        except OSError:
            return ""


def _wait(predicate: Any, timeout: float, what: str, proc: Proc | None = None) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        if proc is not None and not proc.alive():
            raise StageError(f"federated: {what}: {proc.name} exited "
                             f"({proc.popen.returncode}): {proc.tail(800)}")
        time.sleep(0.1)
    raise StageError(f"federated: {what} within {timeout:.0f} s"
                     + (f"; {proc.name}'s log: {proc.tail(800)}" if proc else ""))


class Control:
    """The Flower CLI's view of a SuperLink at `address` (HOST:PORT of its Control API): submit
    a run, ask its status, read its logs. Nothing is started: the SuperLink may be this
    machine's (Federation) or another one's (`baton run --superlink`, the k8s Service)."""

    def __init__(self, work: Path, address: str) -> None:
        self.work, self.address = work, address
        self._client: Any = None  # Flower's Control API client, opened on the first status

    def wait_reachable(self, timeout: float) -> None:
        """Until the SuperLink accepts a TCP connection at `address` (StageError after `timeout`)."""
        host, _, port = self.address.rpartition(":")
        deadline = time.time() + timeout
        while True:
            try:
                socket.create_connection((host.strip("[]"), int(port)), 5).close()
                return
            except OSError as exc:
                if time.time() > deadline:
                    raise StageError(f"federated: no SuperLink answers at {self.address} within "
                                     f"{timeout:.0f} s ({exc})") from None
                time.sleep(1.0)

    def submit(self, plan_path: Path) -> int:
        app = self.work / "app"
        app.mkdir(parents=True, exist_ok=True)
        (app / "pyproject.toml").write_text(APP_PYPROJECT)
        home = self.work / "home" / "cli"
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text(
            f'[superlink]\ndefault = "{CONNECTION}"\n\n[superlink.{CONNECTION}]\n'
            f'address = "{self.address}"\ninsecure = true\n')
        res = self._flwr("run", str(app), CONNECTION, "--format", "json", "--run-config",
                         f'baton-plan="{plan_path}"')
        try:
            return int(json.loads(res[res.index("{"):])["run-id"])
        except (ValueError, KeyError) as exc:
            raise StageError(f"federated: flwr run gave no run id: {res[-1500:]}") from exc

    def _flwr(self, *args: str, timeout: float = 120) -> str:
        try:
            proc = subprocess.run([_bin("flwr"), *args],
                                  env=flower_env(self.work / "home" / "cli"),
                                  capture_output=True, text=True, timeout=timeout,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            raise StageError(f"federated: flwr {args[0]} got no answer from the SuperLink at "
                             f"{self.address} within {timeout:.0f} s") from exc
        if proc.returncode != 0:
            raise StageError(f"federated: flwr {args[0]} failed ({proc.returncode}): "
                             f"{(proc.stdout + proc.stderr)[-1500:]}")
        return proc.stdout

    def status(self, run_id: int) -> str:
        """The run's status as `flwr ls` prints it ("running", "finished:completed", ...),
        asked over Flower's Control API from this process with the client the CLI uses. The
        stage polls it every 2 s for the whole run, and a `flwr ls` process costs a Python
        start and about 4 s of CPU (the CLI's imports): about two thirds of a core for each
        federation running. The CLI is the fallback when Flower's classes are not where
        1.42 keeps them."""
        try:
            from flwr.proto.control_pb2 import ListRunsRequest
        except ImportError:
            out = self._flwr("ls", CONNECTION, "--run-id", str(run_id), "--format", "json")
            runs = json.loads(out[out.index("{"):]).get("runs", [])
            return str(runs[0].get("status", "")) if runs else ""
        try:
            res = self._control().ListRuns(ListRunsRequest(run_id=run_id))
        except Exception as exc:  # noqa: BLE001 - Flower's HTTP errors; a restart in progress
            raise StageError(f"federated: the SuperLink at {self.address} did not answer "
                             f"for run {run_id}: {exc}") from exc
        for run in res.run_dict.values():
            st = run.status
            return f"{st.status}:{st.sub_status}" if st.sub_status else str(st.status)
        return ""

    def close(self) -> None:
        """Close the Control API client, if one was opened."""
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()
            self._client = None

    def _control(self) -> Any:
        """The Control API client, kept for the run (one HTTP connection; a restarted
        SuperLink listens at the same address and the client reconnects)."""
        if self._client is None:
            from flwr.cli.cli_client_interceptor import CliClientHttpInterceptor
            from flwr.supercore.control import ControlHttpClient
            from flwr.supercore.interceptors.http.runtime_version import (
                RuntimeVersionHttpInterceptor,
            )

            self._client = ControlHttpClient.from_server_address(
                server_address=self.address, insecure=True, root_certificates=None,
                interceptors=[CliClientHttpInterceptor(),
                              RuntimeVersionHttpInterceptor(component_name="flwr CLI")])
        return self._client

    def logs_of(self, run_id: int) -> str:
        try:
            return self._flwr("log", str(run_id), CONNECTION, "--show", timeout=60)
        except (StageError, subprocess.TimeoutExpired):
            return ""


class Federation(Control):
    """The SuperLink, the SuperNodes (one per client data directory) and the relays."""

    def __init__(self, work: Path, clients: dict[str, Path], start_timeout: float = 120) -> None:
        port = free_port()
        super().__init__(work, f"127.0.0.1:{port}")
        self.clients, self.timeout, self.port = clients, start_timeout, port
        self.logs = work / "logs"
        self.relays = wire.Relays(("127.0.0.1", self.port), work / "wire.json")
        self.superlink: Proc | None = None
        self.nodes: dict[str, Proc] = {}

    def start(self) -> None:
        self.start_superlink()
        for name in self.clients:
            self.start_node(name)
        for name, proc in self.nodes.items():
            _wait(lambda p=proc: "SuperNode ID" in p.tail(20000) or "Connected" in p.tail(20000),
                  self.timeout, f"SuperNode {name} did not connect", proc)

    def start_superlink(self) -> None:
        self.superlink = Proc("superlink", [
            _bin("flower-superlink"), "--insecure", "--host", "127.0.0.1", "--port",
            str(self.port), "--database", str(self.work / "superlink.db"),
            "--disable-runtime-dependency-installation"],
            flower_env(self.work / "home" / "superlink"), self.logs)
        link = self.superlink
        _wait(lambda: "Application startup complete" in link.tail(20000), self.timeout,
              "the SuperLink did not start", link)

    def start_node(self, name: str) -> Proc:
        port = self.relays.relays[name].port if name in self.relays.relays else \
            self.relays.add(name)
        data = self.clients[name]
        self.nodes[name] = Proc(f"supernode-{name}", [
            _bin("flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{port}",
            "--host", "127.0.0.1", "--port", str(free_port()), "--isolation", "subprocess",
            "--node-config", f"data-dir='{data}' client='{name}'"],
            flower_env(self.work / "home" / f"node-{name}"),
            self.logs)
        return self.nodes[name]

    def stop(self) -> None:
        self.close()
        for proc in self.nodes.values():
            proc.stop()
        if self.superlink is not None:
            self.superlink.stop()
        self.relays.close()
