"""Run a TFJob on this machine, one local process per replica, as the training operator would.

The controller loop mirrors the operator's: create every pod, restart a replica according to its
`restartPolicy` (ExitCode: 128 and above is retryable, 1-127 permanent), count restarts against
`runPolicy.backoffLimit`, enforce `activeDeadlineSeconds`, decide success by the success policy
(the Chief/Master succeeded; without one, worker 0; or all workers with `AllWorkers`), then stop
what is left (`cleanPodPolicy`) and report the job's conditions with the operator's types and
reasons. One difference: v1.9.0 does not count ExitCode pod re-creations toward backoffLimit;
the emulator does, so a crash-looping replica ends a local run instead of looping forever.

The processes are run by `strategies.supervisor.ProcessGroup` (one member per pod: its init
containers, then `tensorflow`) and the restart decisions are its `ReplicaRestart` policy; this
module keeps the operator's bookkeeping: conditions, success policy, deadline, status.

SIGTERM or SIGINT (Ctrl-C) to the emulator stands for deleting the TFJob: as the operator deletes
the pods then, the emulator stops every pod (SIGTERM, the grace period, SIGKILL) and `run()`
returns 143 or 130; each pod also gets PR_SET_PDEATHSIG, so even a SIGKILLed emulator leaves none.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import signal
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

from baton.k8s import tfconfig
from baton.k8s.emulator.pods import (
    EmulationError,
    InitWatch,
    PodPlan,
    controller_exit,
    deleted_on_signals,
    find_configmaps,
    plan_pod,
)
from baton.strategies.restart_policies import Action, ReplicaRestart, Verdict
from baton.strategies.supervisor import Command, Exit, ProcessGroup, exit_code

ORDER = ("Chief", "Master", "Worker", "PS", "Evaluator")
ATTEMPT_ENV = "BATON_ATTEMPT"  # read by `baton task`: a fault is injected on attempt 0 only


@dataclasses.dataclass
class EmulatorOptions:
    """How to map the cluster onto this machine.

    Attributes:
        volume_dir: local directory standing in for every PersistentVolumeClaim.
        work_dir: logs (`logs/<pod>.log`), `status.json`, `tf_config.json`, pod directories.
        manifests_dir: where ConfigMaps mounted by the pods are found (default: the TFJob's dir).
        command: replaces the `tensorflow` container's command+args (a hook for tests and for
            trying a job before its image exists); None runs the container as written.
        env: extra environment for every container.
        grace_seconds: cap on terminationGracePeriodSeconds when stopping pods locally.
        on_event: called with (event, pod name, details) for pod starts/exits and conditions.
    """

    volume_dir: Path
    work_dir: Path
    manifests_dir: Path | None = None
    command: list[str] | None = None
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    grace_seconds: float = 10.0
    poll_seconds: float = 0.05
    stream: TextIO | None = None
    on_event: Callable[[str, str, dict], None] | None = None


@dataclasses.dataclass
class _Pod:
    plan: PodPlan
    step: int = 0  # the container running (init containers first)
    phase: str = "Pending"  # Pending, Running, Succeeded, Failed
    restarts: int = 0
    exit_codes: list[int] = dataclasses.field(default_factory=list)
    # Set when the job ended with this pod still running and it was deleted (cleanPodPolicy):
    # the exit code it gave on SIGTERM, or 137 when the grace period ran out. Kept apart from
    # exit_codes, which the restart policy and backoffLimit count.
    deleted_exit_code: int | None = None


class Emulator:
    """One TFJob's local run. `run()` returns 0 when the job succeeds, 1 when it fails, and
    143 (SIGTERM) or 130 (SIGINT, Ctrl-C) when a signal ended it.

    A signal to the emulator is the TFJob's deletion: the operator deletes its pods, so the
    emulator deletes them the same way (SIGTERM to every pod, one grace period, SIGKILL) before
    it returns; no pod process outlives it. The handlers are in place only during `run()`, and
    only on the main thread (signals are delivered there).
    """

    def __init__(self, tfjob: Mapping[str, Any], options: EmulatorOptions) -> None:
        self.job = tfjob
        self.opts = options
        meta = tfjob["metadata"]
        self.name, self.namespace = meta["name"], meta.get("namespace") or "default"
        spec = tfjob["spec"]
        self.replica_specs: dict[str, Any] = spec["tfReplicaSpecs"]
        policy = spec.get("runPolicy") or {}
        self.backoff_limit = policy.get("backoffLimit")
        self.deadline = policy.get("activeDeadlineSeconds")
        self.clean_pod_policy = policy.get("cleanPodPolicy", "None")
        self.success_policy = spec.get("successPolicy", "")
        self.conditions: list[dict[str, str]] = []
        self.history: list[str] = []  # every condition type set, in order (for reports and tests)
        self.pods: dict[str, _Pod] = {}
        self.local_addresses: dict[str, str] = {}  # pod -> the 127.0.0.1:port it serves on
        # The processes: one member per pod (its init containers, then `tensorflow`), deleted
        # together at the end; the operator's restartPolicy per replica decides on each exit.
        self.group = ProcessGroup(grace=options.grace_seconds, on_start=self._started,
                                  exec_failure_exit=127,  # the kubelet's "executable not found"
                                  die_with_parent=True)  # even a SIGKILLed emulator leaves none
        self.signalled: int | None = None  # SIGTERM/SIGINT received: the job is being deleted
        self.policy = ReplicaRestart({}, self.backoff_limit)
        self.started = time.monotonic()
        self.start_time = ""
        self.init_watch = InitWatch()  # what a pod's init container waits for, on the console

    @property
    def total_restarts(self) -> int:
        """Pod restarts so far, all replicas together (what backoffLimit counts)."""
        return self.policy.restarts

    # ------------------------------------------------------------------ setup
    def _plan(self) -> None:
        from baton.strategies.inventory import TASKS_ON_NODE_ENV

        configmaps = find_configmaps(self.opts.manifests_dir)
        order = sorted(self.replica_specs, key=lambda r: ORDER.index(r) if r in ORDER else 9)
        # every emulated pod runs on this one machine: each task gets its share of the cores
        pods = sum(int(self.replica_specs[r].get("replicas", 1)) for r in order)
        env = {TASKS_ON_NODE_ENV: str(pods), **self.opts.env}
        if not tfconfig.is_distributed(self.job):
            # The operator's SetClusterSpec: no TF_CONFIG for a job that is not distributed.
            for rtype in order:
                for i in range(int(self.replica_specs[rtype].get("replicas", 1))):
                    plan = plan_pod(self.job, rtype, i, None, None, self.opts.volume_dir,
                                    self.opts.work_dir, configmaps, self.opts.command, env)
                    self.pods[plan.name] = _Pod(plan)
            mapping: dict[str, dict[str, Any]] = {pod: {
                "operator_address": None, "local_address": None,
                "operator_tf_config": None, "local_tf_config": None} for pod in self.pods}
            (self.opts.work_dir / "tf_config.json").write_text(json.dumps(mapping, indent=2))
            self._say("not distributed (one replica in all): no TF_CONFIG, as with the operator")
            return
        cluster = tfconfig.operator_cluster(self.job)
        tfconfig.as_cluster_spec(cluster)  # one chief, distinct addresses
        flat = [(k, i) for k in cluster for i in range(len(cluster[k]))]
        from baton.strategies.cluster import free_ports

        ports = dict(zip(flat, free_ports(len(flat)), strict=True))
        local = {k: [f"127.0.0.1:{ports[(k, i)]}" for i in range(len(v))] for k, v in cluster.items()}
        mapping = {}
        for rtype in order:
            for i in range(int(self.replica_specs[rtype].get("replicas", 1))):
                op = tfconfig.tf_config_json(cluster, rtype, i)
                lo = tfconfig.tf_config_json(local, rtype, i)
                plan = plan_pod(self.job, rtype, i, op, lo, self.opts.volume_dir, self.opts.work_dir,
                                configmaps, self.opts.command, env)
                self.pods[plan.name] = _Pod(plan)
                self.local_addresses[plan.name] = local[rtype.lower()][i]
                mapping[plan.name] = {
                    "operator_address": cluster[rtype.lower()][i],
                    "local_address": local[rtype.lower()][i],
                    "operator_tf_config": op,
                    "local_tf_config": lo,
                }
        (self.opts.work_dir / "tf_config.json").write_text(json.dumps(mapping, indent=2))
        for pod, m in mapping.items():
            self._say(f"{pod}: {m['operator_address']} -> {m['local_address']}")

    # ------------------------------------------------------------------ reporting
    def _say(self, text: str) -> None:
        if self.opts.stream is not None:
            self.opts.stream.write(f"[{time.monotonic() - self.started:6.1f}s] {text}\n")
            self.opts.stream.flush()

    def _event(self, kind: str, pod: str, **details: Any) -> None:
        if self.opts.on_event:
            self.opts.on_event(kind, pod, details)

    def set_condition(self, ctype: str, message: str, reason: str | None = None) -> None:
        """The operator's setCondition: Running and Restarting replace each other; a terminal
        condition turns Running to False."""
        now = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        kept = []
        for c in self.conditions:
            if c["type"] == ctype or {c["type"], ctype} == {"Running", "Restarting"}:
                continue
            if ctype in ("Succeeded", "Failed") and c["type"] == "Running":
                c = {**c, "status": "False", "lastUpdateTime": now}
            kept.append(c)
        kept.append({"type": ctype, "status": "True", "reason": reason or f"TFJob{ctype}",
                     "message": message, "lastUpdateTime": now, "lastTransitionTime": now})
        self.conditions = kept
        self.history.append(ctype)
        self._say(f"condition {ctype}: {message}")
        self._event("condition", "", type=ctype, message=message)
        self._write_status()

    def status(self) -> dict[str, Any]:
        replica_statuses: dict[str, dict[str, int]] = {}
        for pod in self.pods.values():
            rs = replica_statuses.setdefault(pod.plan.rtype, {"active": 0, "succeeded": 0, "failed": 0})
            key = {"Running": "active", "Pending": "active", "Succeeded": "succeeded"}.get(pod.phase, "failed")
            rs[key] += 1
        return {"conditions": self.conditions, "replicaStatuses": replica_statuses,
                "startTime": self.start_time, "restarts": self.total_restarts,
                "pods": {n: self._pod_status(p) for n, p in self.pods.items()}}

    @staticmethod
    def _pod_status(pod: _Pod) -> dict[str, Any]:
        out: dict[str, Any] = {"phase": pod.phase, "restarts": pod.restarts, "exitCodes": pod.exit_codes}
        if pod.deleted_exit_code is not None:
            out["deletedExitCode"] = pod.deleted_exit_code
        return out

    def _write_status(self) -> None:
        (self.opts.work_dir / "status.json").write_text(json.dumps(self.status(), indent=2))

    def _restart_policies(self) -> dict[str, str]:
        return {name: self.replica_specs[pod.plan.rtype].get("restartPolicy", "Never")
                for name, pod in self.pods.items()}

    # ------------------------------------------------------------------ processes
    def _start_pod(self, pod: _Pod) -> None:
        """Start the pod's containers (init containers first, each after the last exits 0).

        Each gets BATON_ATTEMPT, the pod's restart count (0 first), as the local launcher gives
        its tasks their attempt: `baton task` injects BATON_INJECT_FAILURE on attempt 0 only,
        so a rehearsed fault fires once and the restarted replica resumes from the backup
        instead of failing the same way until backoffLimit.
        """
        pod.step = 0
        log = self.opts.work_dir / "logs" / f"{pod.plan.name}.log"
        commands = [
            Command(step.argv, {**step.env, ATTEMPT_ENV: str(pod.restarts)}, step.cwd, log=log,
                    label=step.name,
                    header=f"===== {pod.plan.name} container {step.name} (attempt {pod.restarts}) =====\n")
            for step in pod.plan.steps
        ]
        self.group.start(pod.plan.name, commands, grace=pod.plan.grace_seconds)

    def _started(self, name: str, index: int, command: Command, pid: int) -> None:
        pod = self.pods[name]
        pod.step = index
        pod.phase = "Running"
        self._event("started", name, pid=pid, container=command.label, attempt=pod.restarts)
        if command.label == "tensorflow" or index == len(pod.plan.steps) - 1:
            self._say(f"{name}: started pid {pid} (attempt {pod.restarts})")
        else:
            self._say(f"{name}: init container {command.label} (pid {pid})")

    def _relay_init(self) -> None:
        """Say what each pod held by an init container waits for (InitWatch)."""
        now = time.monotonic()
        for name, pod in self.pods.items():
            if pod.phase == "Running" and pod.step < len(pod.plan.steps) - 1:
                line = self.init_watch.news(name, self.opts.work_dir / "logs" / f"{name}.log", now)
                if line:
                    self._say(f"{name}: {pod.plan.steps[pod.step].name}: {line}")

    def _stop_all(self) -> list[str]:
        """Delete every pod still running, all at once as the API server does: SIGTERM each
        process group, then SIGKILL what is left when its grace period ends. Returns their names.

        Concurrent, not one after another: three pods blocked in `Server.join()` would otherwise
        hold the job's end for three grace periods.
        """
        stopped = self.group.stop(grace=self.opts.grace_seconds)
        for name, rc in stopped.items():  # None: not even SIGKILL ended it in time
            self.pods[name].deleted_exit_code = exit_code(-9 if rc is None else rc)
        return list(stopped)

    # ------------------------------------------------------------------ controller
    def _succeeded(self) -> bool:
        chief = [p for p in self.pods.values() if p.plan.rtype in ("Chief", "Master")]
        if chief:
            return chief[0].phase == "Succeeded"
        workers = [p for p in self.pods.values() if p.plan.rtype == "Worker"]
        if self.success_policy == "AllWorkers":
            return bool(workers) and all(p.phase == "Succeeded" for p in workers)
        return any(p.plan.index == 0 and p.phase == "Succeeded" for p in workers)

    def _handle_exit(self, pod: _Pod, ended: Exit, verdict: Verdict) -> str | None:
        """Carry out the restart policy's verdict; returns "Failed" when the job fails."""
        rtype = pod.plan.rtype
        code = ended.code
        pod.exit_codes.append(code)
        if code == 0:
            pod.phase = "Succeeded"
            self._say(f"{pod.plan.name}: exited 0")
            self._event("exited", pod.plan.name, code=0)
            return None
        self._event("exited", pod.plan.name, code=code)
        self._say(f"{pod.plan.name}: {verdict.reason}")
        self._say_port_holders(pod)
        if verdict.action is Action.RESTART:
            pod.restarts += 1
            self.set_condition(
                "Restarting",
                f"TFJob {self.namespace}/{self.name} is restarting because 1 {rtype} replica(s) failed.",
            )
            self._start_pod(pod)
            if pod.phase == "Running":
                self.set_condition("Running", f"TFJob {self.namespace}/{self.name} is running.")
            return None
        pod.phase = "Failed"
        self._tail(pod)
        if verdict.exhausted:
            self.set_condition(
                "Failed",
                f"TFJob {self.namespace}/{self.name} has failed because it has reached the "
                f"specified backoff limit ({self.backoff_limit}).",
                reason="BackoffLimitExceeded",
            )
        else:
            self.set_condition(
                "Failed",
                f"TFJob {self.namespace}/{self.name} has failed because 1 {rtype} replica(s) "
                f"failed (exit code {code}).",
            )
        return "Failed"

    def _say_port_holders(self, pod: _Pod) -> None:
        """A replica that failed while another process holds its port cannot come back on it
        (a pod here keeps its port across restarts): say who holds it."""
        from baton.strategies.cluster import port_holders

        address = self.local_addresses.get(pod.plan.name)
        holders = port_holders(int(address.rsplit(":", 1)[1])) if address else []
        if holders:
            self._say(f"{pod.plan.name}: its port {address} is held by " + "; ".join(holders))

    def _tail(self, pod: _Pod, lines: int = 15) -> None:
        path = self.opts.work_dir / "logs" / f"{pod.plan.name}.log"
        if path.exists():
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            self._say(f"{pod.plan.name}: last log lines ({path}):\n    " + "\n    ".join(tail))

    def run(self) -> int:
        with deleted_on_signals(self._on_signal):
            result = self._run()
        return controller_exit(result, self.signalled)

    def _on_signal(self, signum: int) -> None:
        """SIGTERM/SIGINT: only noted here; the controller loop deletes the pods (`_loop`)."""
        if self.signalled is None:
            self.signalled = signum

    def _run(self) -> str:
        self.opts.work_dir.mkdir(parents=True, exist_ok=True)
        self.opts.volume_dir.mkdir(parents=True, exist_ok=True)
        self.started = time.monotonic()
        self.start_time = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self._plan()
        self.policy.policies = self._restart_policies()
        self.set_condition("Created", f"TFJob {self.name} is created.")
        result = "Failed"
        try:
            for pod in self.pods.values():
                if self.signalled is None:
                    self._start_pod(pod)
            if any(p.phase == "Running" for p in self.pods.values()):
                self.set_condition("Running", f"TFJob {self.namespace}/{self.name} is running.")
            result = self._loop()
        finally:
            stopped = self._stop_all()
            if stopped:
                codes = ", ".join(f"{n} exited {self.pods[n].deleted_exit_code}" for n in stopped)
                if self.clean_pod_policy in ("Running", "All"):
                    self._say(f"cleanPodPolicy {self.clean_pod_policy}: deleted the running pods ({codes})")
                else:  # the operator would leave them running; locally nothing outlives the run
                    self._say("cleanPodPolicy None: the operator would leave the running pods; "
                              f"stopped locally ({codes})")
            self._write_status()
        return result

    def _loop(self) -> str:
        exits = self.group.poll()
        while True:
            if self.signalled is not None:  # the TFJob is deleted: the finally deletes its pods
                name = signal.Signals(self.signalled).name
                self._say(f"{name}: the TFJob is deleted; deleting its pods")
                self._event("deleted", "", signal=name)
                return "Deleted"
            for ended in exits:
                pod = self.pods[ended.name]
                verdict = self.policy.decide(self.group, ended)
                if self._handle_exit(pod, ended, verdict) == "Failed":
                    return "Failed"
            if self._succeeded():
                self.set_condition("Succeeded", f"TFJob {self.namespace}/{self.name} successfully completed.")
                return "Succeeded"
            if self.deadline and time.monotonic() - self.started > self.deadline:
                self.set_condition("Failed", f"TFJob {self.namespace}/{self.name} has failed because it "
                                   f"exceeded activeDeadlineSeconds={self.deadline}.",
                                   reason="DeadlineExceeded")
                return "Failed"
            self._relay_init()
            exits = self.group.wait(self.opts.poll_seconds)


def emulate_file(path: str | Path, options: EmulatorOptions) -> int:
    """Validate and emulate the TFJob in `path` (the first TFJob document in the file)."""
    import yaml

    from baton.k8s.validate import check

    docs = [d for d in yaml.safe_load_all(Path(path).read_text()) if isinstance(d, dict)]
    jobs = [d for d in docs if d.get("kind") == "TFJob"]
    if not jobs:
        raise EmulationError(f"{path}: no TFJob document. Received kinds: {[d.get('kind') for d in docs]}")
    check(jobs[:1])
    if options.manifests_dir is None:
        options.manifests_dir = Path(path).parent
    if options.stream is None:
        options.stream = sys.stdout
    return Emulator(jobs[0], options).run()
