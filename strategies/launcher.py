"""Local multi-process clusters: one process per task on free 127.0.0.1 ports, supervised.

The launcher starts every task of a ClusterSpec as its own process group with its own TF_CONFIG
(the exact JSON the Kubeflow operator injects), prefixes each output line with the task name, and
supervises the group the way the operator's restart policy would:

- synchronous strategies (multi-worker mirrored): any task that dies takes the whole group down;
  the group restarts from the chief's last backup, with fresh ports, up to `max_restarts` times;
- parameter-server strategy: a dead worker is restarted alone at the same address (the
  coordinator reschedules its closures meanwhile); a dead PS or coordinator restarts the group;
- exit code 1 (bad config) is permanent: no retry, like `restartPolicy: ExitCode`.

SIGTERM to the launcher is a preemption: the training tasks (every worker under multi-worker
mirrored, the coordinator under parameter server) get SIGTERM, save a backup at their next step
boundary and exit 143; the launcher waits for them (up to `preempt_grace_seconds`), then stops
the rest and returns `preempted=True` without retrying.

Teardown is unconditional: on success, failure, Ctrl-C or SIGTERM every process group it started
is sent SIGTERM, then SIGKILL after a grace period; each child also gets PR_SET_PDEATHSIG so it
dies if the launcher itself is killed with SIGKILL. Only pids started here are ever signalled.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from baton.errors import EXIT_FAILED, EXIT_PREEMPTED
from baton.strategies.cluster import ClusterSpec, TaskId, TFConfig
from baton.strategies.faults import Fault
from baton.strategies.preemption import stop_on_sigterm

PERMANENT_EXIT = EXIT_FAILED
PREEMPTED_EXIT = EXIT_PREEMPTED


@dataclasses.dataclass(frozen=True)
class LaunchConfig:
    workers: int
    strategy: str = "multi_worker_mirrored"
    ps: int = 0
    max_restarts: int = 3
    fault: Fault | None = None
    state_dir: Path = Path(".launcher")
    grace_seconds: float = 5.0
    preempt_grace_seconds: float = 60.0  # SIGTERM: how long the tasks get to save and exit
    worker_restart_delay: float = 1.0
    extra_env: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def parameter_server(self) -> bool:
        return self.strategy == "parameter_server"

    def cluster(self) -> ClusterSpec:
        if self.parameter_server:
            return ClusterSpec.local(workers=self.workers, ps=self.ps, chief=True)
        return ClusterSpec.local(workers=self.workers)


@dataclasses.dataclass
class LaunchResult:
    ok: bool
    error: str = ""
    preempted: bool = False  # SIGTERM seen: the training tasks were asked to save and stop
    restarts: int = 0
    worker_restarts: int = 0
    events: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "restarts": self.restarts,
            "worker_restarts": self.worker_restarts,
            "events": self.events[-20:],
            "seconds": round(self.seconds, 2),
        }


class _Task:
    """One running task process, its output pump and its log file."""

    def __init__(self, task: TaskId, argv: list[str], env: dict[str, str], sink: _Sink, log: Path):
        self.task = task
        self.log = log
        self.proc = subprocess.Popen(
            argv,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        self._pump = threading.Thread(
            target=sink.pump, args=(task.name, self.proc.stdout, log), daemon=True
        )
        self._pump.start()

    def poll(self) -> int | None:
        return self.proc.poll()

    def signal(self, signum: int) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signum)  # the group we created (start_new_session)

    def join_output(self) -> None:
        self._pump.join(timeout=2.0)


class _Sink:
    """Prefixes each line with its task and writes it to the stream and to the task's log."""

    def __init__(self, stream: IO[str], quiet: bool):
        self.stream, self.quiet = stream, quiet
        self.lock = threading.Lock()

    def pump(self, name: str, pipe: IO[bytes] | None, log: Path) -> None:
        if pipe is None:
            return
        with open(log, "ab") as fh:
            for raw in iter(pipe.readline, b""):
                fh.write(raw)
                fh.flush()
                line = raw.decode(errors="replace").rstrip()
                if line and not self.quiet and not _noise(line):
                    with self.lock:
                        self.stream.write(f"  [{name}] {line}\n")
                        self.stream.flush()

    def say(self, text: str) -> None:
        if not self.quiet:
            with self.lock:
                self.stream.write(f"  [launcher] {text}\n")
                self.stream.flush()


def launch(
    config: LaunchConfig,
    command: Callable[[TaskId], list[str]],
    stream: IO[str] | None = None,
    quiet: bool = False,
    on_step: Callable[[int], None] | None = None,
) -> LaunchResult:
    """Run the cluster to completion (or to the end of the retry budget); always tears down."""
    sink = _Sink(stream or sys.stderr, quiet)
    state = config.state_dir
    (state / "logs").mkdir(parents=True, exist_ok=True)
    status_file = state / "status.json"
    result = LaunchResult(ok=False)
    start = time.monotonic()
    attempt = 0
    preempt = threading.Event()
    with stop_on_sigterm(preempt.set):
        while True:
            status_file.unlink(missing_ok=True)
            cluster = config.cluster()
            group: dict[str, _Task] = {}
            try:
                envs = {
                    t.name: _env(config, cluster, t, attempt, status_file) for t in cluster.tasks()
                }
                for t in cluster.tasks():
                    log = state / "logs" / f"{t.name.replace(':', '-')}.attempt{attempt}.log"
                    group[t.name] = _Task(t, command(t), envs[t.name], sink, log)
                sink.say(
                    f"attempt {attempt}: started {', '.join(group)} "
                    f"({json.dumps(cluster.as_dict())})"
                )
                outcome = _supervise(
                    config,
                    cluster,
                    group,
                    envs,
                    command,
                    sink,
                    status_file,
                    attempt,
                    result,
                    on_step,
                    state,
                    preempt,
                )
            finally:
                _stop_all(group.values(), config.grace_seconds)
            result.events.append(f"attempt {attempt}: {outcome}")
            if outcome == "ok":
                result.ok = True
                break
            if outcome.startswith("preempted"):
                result.error = outcome
                break
            if outcome.startswith("permanent"):
                result.error = outcome
                break
            if attempt >= config.max_restarts:
                result.error = f"{outcome}; retry budget of {config.max_restarts} restarts used up"
                break
            if preempt.is_set():  # SIGTERM while the group was failing: do not start another
                result.error = f"{outcome}; preempted by SIGTERM before a restart"
                break
            attempt += 1
            result.restarts = attempt
            sink.say(
                f"{outcome}: restarting the whole group from the last backup "
                f"(restart {attempt}/{config.max_restarts})"
            )
        # A SIGTERM at any point (even one that came as training finished) is reported.
        result.preempted = preempt.is_set()
    result.seconds = time.monotonic() - start
    return result


def _supervise(
    config: LaunchConfig,
    cluster: ClusterSpec,
    group: dict[str, _Task],
    envs: dict[str, dict[str, str]],
    command: Callable[[TaskId], list[str]],
    sink: _Sink,
    status_file: Path,
    attempt: int,
    result: LaunchResult,
    on_step: Callable[[int], None] | None,
    state: Path,
    preempt: threading.Event | None = None,
) -> str:
    """Watch the group until it finishes or must be restarted; returns the outcome."""
    fault = config.fault if attempt == 0 else None
    external_fault = fault is not None and config.parameter_server and fault.task.type != "chief"
    last_step = -1
    chief = next(t.name for t in cluster.tasks() if cluster.is_chief(t))
    while True:
        time.sleep(0.05)
        if preempt is not None and preempt.is_set():
            return _preempt(config, group, chief, sink)
        step = _read_step(status_file)
        if step is not None and step != last_step:
            last_step = step
            if on_step is not None:
                on_step(step)
        if external_fault and step is not None and step >= fault.step:  # type: ignore[union-attr]
            target = group.get(fault.task.name)  # type: ignore[union-attr]
            if target is not None:
                sink.say(f"injecting fault {fault} at step {step}")
                target.signal(fault.signum)  # type: ignore[union-attr]
            external_fault = False
        codes = {name: t.poll() for name, t in group.items()}
        if config.parameter_server:
            code = codes[chief]
            if code == 0:
                return "ok"
            if code is not None:
                return _classify(chief, code)
            for name, c in codes.items():
                if c is None or name == chief:
                    continue
                task = group[name].task
                if task.type == "ps":
                    return f"{name} exited with {_code(c)}"
                sink.say(f"{name} exited with {_code(c)}; restarting it at the same address")
                result.worker_restarts += 1
                time.sleep(config.worker_restart_delay)
                log = (
                    state
                    / "logs"
                    / f"{name.replace(':', '-')}.attempt{attempt}.r{result.worker_restarts}.log"
                )
                group[name] = _Task(task, command(task), envs[name], sink, log)
            continue
        if all(c == 0 for c in codes.values()):
            return "ok"
        for name, c in codes.items():
            if c not in (None, 0):
                return _classify(name, c)


def _preempt(config: LaunchConfig, group: dict[str, _Task], chief: str, sink: _Sink) -> str:
    """SIGTERM the training tasks, wait for them to save and exit; the caller stops the rest.

    Under the parameter-server strategy only the coordinator trains (and saves: the variables
    live on the PS tasks, which must stay up until it has); under multi-worker mirrored every
    worker runs the loop and they agree on the stopping step through the all-reduce.
    """
    names = [chief] if config.parameter_server else list(group)
    sink.say(f"SIGTERM: asking {', '.join(names)} to save a backup and stop")
    for name in names:
        group[name].signal(signal.SIGTERM)
    deadline = time.monotonic() + config.preempt_grace_seconds
    for name in names:
        with contextlib.suppress(subprocess.TimeoutExpired):
            group[name].proc.wait(timeout=max(deadline - time.monotonic(), 0.01))
    codes = {name: group[name].poll() for name in names}
    if all(c == 0 for c in codes.values()):
        return "ok"  # training had just finished: the model is written
    saved = group[chief].poll() == PREEMPTED_EXIT
    shown = ", ".join(f"{n} {'still running' if c is None else _code(c)}" for n, c in codes.items())
    return f"preempted by SIGTERM ({shown}; {'backup saved' if saved else 'no backup confirmed'})"


def _classify(name: str, code: int) -> str:
    if code == PERMANENT_EXIT:
        return f"permanent failure: {name} exited with 1 (bad config or a bug; not retried)"
    return f"{name} exited with {_code(code)}"


def _code(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"signal {signal.Signals(-code).name}"
    return f"code {code}"


def _env(
    config: LaunchConfig, cluster: ClusterSpec, task: TaskId, attempt: int, status_file: Path
) -> dict[str, str]:
    env = dict(os.environ)
    env.update(config.extra_env)
    env.update(TFConfig(cluster, task).to_env())
    env["BATON_ATTEMPT"] = str(attempt)
    env["BATON_STATUS_FILE"] = str(status_file)
    env["BATON_INVENTORY_DIR"] = str(config.state_dir / "inventory")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.pop("BATON_INJECT_FAILURE", None)
    if config.fault is not None and attempt == 0:
        env["BATON_INJECT_FAILURE"] = str(config.fault)
    return env


def _read_step(path: Path) -> int | None:
    try:
        return int(json.loads(path.read_text())["step"])
    except (OSError, ValueError, KeyError):
        return None


def _stop_all(tasks: Any, grace: float) -> None:
    tasks = list(tasks)
    for t in tasks:
        t.signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for t in tasks:
        with contextlib.suppress(subprocess.TimeoutExpired):
            t.proc.wait(timeout=max(deadline - time.monotonic(), 0.01))
    for t in tasks:
        t.signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            t.proc.wait(timeout=5.0)
        t.join_output()


def _die_with_parent() -> None:
    """In the child before exec: get SIGKILL when the launcher dies (Linux PR_SET_PDEATHSIG)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass


_NOISE = (
    "cpu_feature_guard",
    "To enable the following instructions",
    "oneDNN custom operations",
    "cudart_stub",
    "cuda_platform",
    "Could not find cuda",
    "generator_dataset_op",
    "rebuild TensorFlow with",
    "absl::InitializeLog",
    "WARNING: All log messages before",
    "function_handle_cache",
    "use_unbounded_threadpool",
    "Failed to register function remotely",
    "Failed to remove function remotely",
    "Additional GRPC error information",
    ":UNKNOWN:Error received from peer",
    "This could happen if the remote target",
)


def _noise(line: str) -> bool:
    return any(n in line for n in _NOISE)
