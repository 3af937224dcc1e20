"""Flower's processes on this machine: their environment, start, stop and logs (Flower-free).

What Flower 1.42 needs, found by running it offline (docs/federated.md): both daemons start
`flower-superexec` by name, so the venv's bin goes first on PATH; telemetry, the update check
and the runtime `uv sync` are switched off (no network); every component gets its own
FLWR_HOME. Processes start in their own sessions and are stopped by process group (and their
descendants, which the daemons spawn), SIGTERM then SIGKILL: nothing is left behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from baton.errors import StageError
from baton.strategies.supervisor import descendants


def free_port() -> int:
    """A free port below the ephemeral range (strategies.cluster.free_ports says why)."""
    from baton.strategies.cluster import free_ports

    return free_ports(1)[0]


def bin_path(name: str) -> str:
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


def wait_for(predicate: Any, timeout: float, what: str, proc: Proc | None = None) -> None:
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
