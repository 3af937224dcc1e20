"""Cluster topology and TF_CONFIG, in the exact format the Kubeflow training operator injects.

One ClusterSpec describes who plays in the orchestra (chief, workers, parameter servers,
evaluator) and where they listen. The same object becomes the TF_CONFIG of every local process
(`strategies.launcher`) and of every pod in a TFJob (`k8s`), so a job behaves the same on a laptop
and on a cluster. TF_CONFIG is read once, at the edge (`ClusterSpec.from_env`), and passed down.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from baton.errors import EXIT_USAGE, BatonError

TASK_TYPES = ("chief", "worker", "ps", "evaluator")
TF_CONFIG_ENV = "TF_CONFIG"  # the variable the operator (and strategies.launcher) sets


class ClusterSpecError(BatonError, ValueError):
    """A topology or TF_CONFIG that cannot describe a runnable cluster."""

    exit_code = EXIT_USAGE


@dataclasses.dataclass(frozen=True)
class TaskId:
    """Which task this process is: the `task` half of TF_CONFIG."""

    type: str
    index: int

    def __post_init__(self) -> None:
        if self.type not in TASK_TYPES:
            raise ClusterSpecError(
                f"task.type must be one of {', '.join(TASK_TYPES)}. Received: type={self.type!r}"
            )
        if not isinstance(self.index, int) or self.index < 0:
            raise ClusterSpecError(
                f"task.index must be a non-negative integer. Received: index={self.index!r}"
            )

    @property
    def name(self) -> str:
        return f"{self.type}:{self.index}"


@dataclasses.dataclass(frozen=True)
class ClusterSpec:
    """Addresses of every task, by type. Frozen: a topology is decided once per job.

    `worker` is a tuple of `host:port` strings; `chief`, `ps` and `evaluator` likewise.
    An empty tuple means the type is absent.
    """

    chief: tuple[str, ...] = ()
    worker: tuple[str, ...] = ()
    ps: tuple[str, ...] = ()
    evaluator: tuple[str, ...] = ()
    # enableDynamicWorker: `worker` holds only some addresses ("" for the unknown ones).
    sparse: bool = False

    def __post_init__(self) -> None:
        for kind in TASK_TYPES:
            addrs = getattr(self, kind)
            if isinstance(addrs, str) or not isinstance(addrs, Sequence):
                raise ClusterSpecError(
                    f"cluster.{kind} must be a list of 'host:port' strings. Received: {addrs!r}"
                )
            object.__setattr__(self, kind, tuple(addrs))
            for addr in getattr(self, kind):
                if not (self.sparse and kind == "worker" and addr == ""):
                    _check_address(kind, addr)
        if len(self.chief) > 1:
            raise ClusterSpecError(
                f"at most one chief is allowed. Received: chief={list(self.chief)}"
            )
        if len(self.evaluator) > 1:
            raise ClusterSpecError(
                f"at most one evaluator is allowed. Received: evaluator={list(self.evaluator)}"
            )
        seen: dict[str, str] = {}
        for task in self.tasks():
            addr = self.address(task)
            if not addr:
                continue
            if addr in seen:
                raise ClusterSpecError(
                    f"two tasks share the address {addr}: {seen[addr]} and {task.name}"
                )
            seen[addr] = task.name

    # ----------------------------------------------------------------- queries
    def tasks(self) -> list[TaskId]:
        """Every task in a stable order: chief, workers, ps, evaluator."""
        return [TaskId(kind, i) for kind in TASK_TYPES for i in range(len(getattr(self, kind)))]

    def address(self, task: TaskId) -> str:
        addrs = getattr(self, task.type)
        if task.index >= len(addrs):
            raise ClusterSpecError(
                f"{task.name} is not in the cluster ({task.type} has {len(addrs)} tasks)"
            )
        return str(addrs[task.index])

    def num_workers(self) -> int:
        """Tasks that compute gradients: the chief counts as a worker under tf.distribute."""
        return len(self.chief) + len(self.worker)

    def is_chief(self, task: TaskId) -> bool:
        """The task that alone writes checkpoints, summaries and exports.

        With a chief, the chief; without one, worker 0 (the Kubeflow success policy agrees).
        """
        if self.chief:
            return task.type == "chief"
        return task.type == "worker" and task.index == 0

    def as_dict(self) -> dict[str, Any]:
        """The `cluster` half of TF_CONFIG: only present task types, as lists."""
        out: dict[str, Any] = {
            kind: list(getattr(self, kind)) for kind in TASK_TYPES if getattr(self, kind)
        }
        if self.sparse:
            out["worker"] = {str(i): a for i, a in enumerate(self.worker) if a}
        return out

    # ----------------------------------------------------------------- builders
    @classmethod
    def from_dict(cls, cluster: Mapping[str, Any]) -> ClusterSpec:
        unknown = sorted(set(cluster) - set(TASK_TYPES) - {"master"})
        if unknown:
            raise ClusterSpecError(
                f"unknown task type(s) in cluster: {unknown}; expected {list(TASK_TYPES)}"
            )
        kwargs: dict[str, Any] = {}
        for kind, addrs in cluster.items():
            key = "chief" if kind == "master" else kind
            if isinstance(addrs, Mapping):
                # enableDynamicWorker: the operator writes {index: address} for this task only.
                try:
                    by_index = {int(k): v for k, v in addrs.items()}
                except ValueError:
                    raise ClusterSpecError(
                        f"cluster.{kind} map keys must be task indices. Received: {dict(addrs)}"
                    ) from None
                size = max(by_index, default=-1) + 1
                addrs = [by_index.get(i, "") for i in range(size)]
                kwargs["sparse"] = True
            kwargs[key] = tuple(addrs)
        return cls(**kwargs)

    @classmethod
    def local(
        cls, workers: int, ps: int = 0, chief: bool = False, evaluator: bool = False,
        host: str = "127.0.0.1",
    ) -> ClusterSpec:
        """A cluster of local tasks on free ports of `host` (ports picked by binding to 0)."""
        if workers < 0 or ps < 0:
            raise ClusterSpecError(
                f"workers and ps must be >= 0. Received: workers={workers}, ps={ps}"
            )
        if workers + int(chief) == 0:
            raise ClusterSpecError("a cluster needs at least one worker or a chief. Received: workers=0")
        n = int(chief) + workers + ps + int(evaluator)
        ports = free_ports(n, host)
        addrs = [f"{host}:{p}" for p in ports]
        i = 0

        def take(k: int) -> tuple[str, ...]:
            nonlocal i
            out = tuple(addrs[i : i + k])
            i += k
            return out

        return cls(
            chief=take(int(chief)), worker=take(workers), ps=take(ps),
            evaluator=take(int(evaluator)),
        )


@dataclasses.dataclass(frozen=True)
class TFConfig:
    """A parsed TF_CONFIG: the cluster, this process's task and the environment tag."""

    cluster: ClusterSpec
    task: TaskId
    environment: str = "cloud"

    def __post_init__(self) -> None:
        self.cluster.address(self.task)  # raises when the task is not in the cluster

    def to_json(self) -> str:
        """The exact JSON the Kubeflow operator injects (key order as the operator writes it)."""
        return json.dumps(
            {
                "cluster": self.cluster.as_dict(),
                "task": {"type": self.task.type, "index": self.task.index},
                "environment": self.environment,
            }
        )

    def to_env(self) -> dict[str, str]:
        return {TF_CONFIG_ENV: self.to_json()}

    @property
    def is_chief(self) -> bool:
        return self.cluster.is_chief(self.task)

    @classmethod
    def from_json(cls, text: str) -> TFConfig:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ClusterSpecError(f"TF_CONFIG is not valid JSON: {exc}. Received: {text[:200]!r}") from exc
        if not isinstance(data, dict):
            raise ClusterSpecError(f"TF_CONFIG must be a JSON object. Received: {text[:200]!r}")
        if "cluster" not in data or "task" not in data:
            raise ClusterSpecError(
                f"TF_CONFIG needs 'cluster' and 'task'. Received keys: {sorted(data)}"
            )
        task = data["task"]
        if not isinstance(task, dict) or "type" not in task:
            raise ClusterSpecError(f"TF_CONFIG task needs 'type' and 'index'. Received: {task!r}")
        kind = "chief" if task["type"] == "master" else task["type"]
        return cls(
            cluster=ClusterSpec.from_dict(data["cluster"]),
            task=TaskId(kind, int(task.get("index", 0))),
            environment=str(data.get("environment", "cloud")),
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TFConfig | None:
        """TF_CONFIG from the environment, or None when the process runs alone."""
        env = os.environ if environ is None else environ
        text = env.get(TF_CONFIG_ENV, "").strip()
        return cls.from_json(text) if text else None


PORT_RANGE_ENV = "BATON_PORT_RANGE"  # "LOW-HIGH": where free_ports picks (inclusive)


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """`n` distinct ports free on `host` now, for tasks that bind them seconds later.

    They are picked at random below the kernel's ephemeral range (ip_local_port_range) and
    checked by binding, not by binding to port 0: a port-0 port is an ephemeral one, which any
    outgoing connection on the machine may take as its local port between this choice and the
    task's own bind (TensorFlow's import alone takes seconds). Seen in a full suite: a TFJob
    emulator worker's server failed "Could not start gRPC server" on all four attempts because
    its port had become another connection's. A port below the range is only handed out by an
    explicit bind. All sockets are held open until every port is chosen, so the ports differ; with
    too small a range below the ephemeral one, the port-0 scheme is the fallback. A loopback
    port is checked on the wildcard address, as TensorFlow's server binds it, and without
    SO_REUSEADDR (with it, Linux lets a second unlistened socket bind a port already bound).

    A port is only free when chosen: a cluster keeps its ports for its life, and a restarted
    task binds its port again. Two launchers or emulators on one machine can pick the same port
    (one's task is down, restarting, when the other checks it), and then the restarted task
    cannot bind it: the likely cause of a CI failure where a TFJob worker failed three restarts
    on "Could not start gRPC server" while a federation emulated beside it had a pod restart.
    Such neighbours get ranges of their own with BATON_PORT_RANGE=LOW-HIGH (inclusive, the test
    suite gives each pytest-xdist worker one); within it there is no fallback, so the choice
    never leaves the range it was given. Within one process, a port handed out is not handed
    out again while the range has room (a launcher starting two clusters at once).
    """
    with _HANDED_OUT_LOCK:  # one choice at a time in this process, each remembered
        ports = _free_ports(n, host)
        for port in ports:
            _HANDED_OUT.pop(port, None)
            _HANDED_OUT[port] = None
        while len(_HANDED_OUT) > _HANDED_OUT_KEPT:
            _HANDED_OUT.pop(next(iter(_HANDED_OUT)))
        return ports


def _free_ports(n: int, host: str) -> list[int]:
    import random

    given = _given_range()
    low, high = given or (_PRIVATE_FROM, _ephemeral_low() - 1)
    pick = random.SystemRandom()
    socks: list[socket.socket] = []
    # Ports this process handed out lately are skipped while the range has room: their tasks
    # may not have bound them yet (two clusters launched at once from one process, seen in CI:
    # the second took a port the first had chosen, whose worker then failed to bind it).
    recent = set(_HANDED_OUT) if len(_HANDED_OUT) < (high + 1 - low) // 2 else set()
    try:
        tries, limit = 0, max(200 * n, 4 * (high + 1 - low)) if given else 200 * n
        while len(socks) < n and (given or high + 1 - low >= 64 * n) and tries < limit:
            tries += 1
            port = pick.randint(low, high)
            if port in recent:
                continue
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:  # no SO_REUSEADDR: a port in any use, lingering connections included, is refused
                s.bind(("" if host in _LOOPBACK else host, port))
            except OSError:
                s.close()
                continue
            socks.append(s)
        if given and len(socks) < n:
            raise ClusterSpecError(
                f"{PORT_RANGE_ENV}={os.environ[PORT_RANGE_ENV]!r} has fewer than {n} free "
                f"port(s) on {host}: found {len(socks)}")
        while len(socks) < n:  # fallback: the kernel's choice
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def port_holders(port: int) -> list[str]:
    """The live processes with `port` bound on this machine, as "pid N (command) STATE": what
    a message says when a task that exited could not have bound its port again. Connections
    without a process (TIME_WAIT, which SO_REUSEADDR binds over) are left out; empty when
    nothing is found or the system does not let us look."""
    import psutil

    try:
        connections = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return []
    found = set()
    for c in connections:
        if c.laddr and c.laddr.port == port and c.pid:
            try:
                command = " ".join(psutil.Process(c.pid).cmdline())[:160]
            except psutil.Error:
                command = "?"
            found.add(f"pid {c.pid} ({command}) {c.status}")
    return sorted(found)


# Ports free_ports handed out in this process, oldest first (an insertion-ordered dict)
_HANDED_OUT: dict[int, None] = {}
_HANDED_OUT_KEPT = 512
_HANDED_OUT_LOCK = threading.Lock()
_PRIVATE_FROM = 20000  # above the ports services usually listen on (8080, 8500, 9000...)
# A loopback port is checked on every address: TensorFlow's server binds the wildcard
_LOOPBACK = ("127.0.0.1", "localhost")


def _given_range() -> tuple[int, int] | None:
    """BATON_PORT_RANGE as (low, high), inclusive; None when unset. A malformed value is a
    usage error naming the variable and what it held."""
    text = os.environ.get(PORT_RANGE_ENV, "").strip()
    if not text:
        return None
    low_s, sep, high_s = text.partition("-")
    try:
        low, high = int(low_s), int(high_s)
    except ValueError:
        low = high = -1
    if not sep or not 1024 <= low <= high <= 65535:
        raise ClusterSpecError(
            f"{PORT_RANGE_ENV} must be LOW-HIGH, two ports with 1024 <= LOW <= HIGH <= 65535. "
            f"Received: {text!r}")
    return low, high


def _ephemeral_low() -> int:
    """The lowest port the kernel hands out to outgoing connections (Linux: 32768 by default)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default; macOS's range starts at 49152


def _check_address(kind: str, addr: object) -> None:
    if not isinstance(addr, str) or ":" not in addr:
        raise ClusterSpecError(f"cluster.{kind} addresses must be 'host:port'. Received: {addr!r}")
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ClusterSpecError(f"cluster.{kind} address has a bad host or port. Received: {addr!r}")
