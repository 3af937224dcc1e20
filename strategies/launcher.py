"""Local multi-process clusters: one process per task on free 127.0.0.1 ports, supervised.

The launcher starts every task of a ClusterSpec as its own process group with its own TF_CONFIG
(the exact JSON the Kubeflow operator injects), prefixes each output line with the task name (with
BATON_LOG_FORMAT=json: relays it as a record with a `task` field, see `TaskLines`), and supervises the
group the way the operator's restart policy would:

- synchronous strategies (multi-worker mirrored): any task that dies takes the whole group down;
  the group restarts from the chief's last backup, with fresh ports, up to `max_restarts` times;
- parameter-server strategy: a dead worker is restarted alone at the same address (the
  coordinator reschedules its closures meanwhile); a dead PS or coordinator restarts the group;
- exit code 1 (bad config) is permanent: no retry, like `restartPolicy: ExitCode`; the error is
  then the task's own message, which it leaves in the file BATON_ERROR_FILE names
  (`worker:0: train.config.model: ...`), not just its exit code;
- elastic multi-worker mirrored (`min_workers` < `workers`, strategies/elastic.py): a worker
  that is lost (a `:lost` fault, or its restarts exhausted) is left out and the group restarts
  with the workers left, renumbered so the chief stays worker:0, as long as `min_workers`
  remain; a replacement (`replacement_after_s`) is admitted at the next backup boundary.

SIGTERM to the launcher is a preemption: the training tasks (every worker under multi-worker
mirrored, the coordinator under parameter server) get SIGTERM, save a backup at their next step
boundary and exit 143; the launcher waits for them (up to `preempt_grace_seconds`), then stops
the rest and returns `preempted=True` without retrying.

Teardown is unconditional: on success, failure, Ctrl-C or SIGTERM every process group it started
is sent SIGTERM, then SIGKILL after a grace period; each child also gets PR_SET_PDEATHSIG so it
dies if the launcher itself is killed with SIGKILL. Only pids started here are ever signalled.

Each task is pinned to its own share of the cores and a straggler is rehearsed by CPU quota or
signals (strategies.local_tasks). The processes are run by `strategies.supervisor.ProcessGroup` (one per attempt) and the rules
above are its `GroupRestart` policy (`policy_for`); this module only builds the tasks' commands,
environments and logs, follows the chief's step, injects faults and reports. What a launch is
asked and answers is strategies.launch_config; the tasks' output lines, strategies.task_lines.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from baton.errors import EXIT_FAILED, EXIT_PREEMPTED
from baton.strategies import elastic, local_tasks
from baton.strategies.cluster import ClusterSpec, TaskId, TFConfig
from baton.strategies.exits import describe
from baton.strategies.inventory import TASKS_ON_NODE_ENV
from baton.strategies.launch_config import LaunchConfig, LaunchResult
from baton.strategies.preemption import stop_on_sigterm
from baton.strategies.restart_policies import Action, GroupRestart, Verdict
from baton.strategies.supervisor import Command, Exit, ProcessGroup
from baton.strategies.task_lines import TaskLines

PERMANENT_EXIT = EXIT_FAILED
PREEMPTED_EXIT = EXIT_PREEMPTED
ERROR_FILE_ENV = "BATON_ERROR_FILE"  # where a task leaves its one-line error (baton task)


def policy_for(config: LaunchConfig, cluster: ClusterSpec) -> GroupRestart:
    """Multi-worker mirrored: every task must finish, any failure restarts the group (elastic:
    a worker whose restarts are exhausted is lost instead). Parameter server: the coordinator's
    success ends the job, a worker is restarted alone, a PS restarts the group."""
    if not config.parameter_server:
        workers = [t.name for t in cluster.tasks()] if config.elastic else []
        return GroupRestart(config.max_restarts, permanent=(PERMANENT_EXIT,), elastic=workers)
    tasks = cluster.tasks()
    chief = next(t.name for t in tasks if cluster.is_chief(t))
    alone = [t.name for t in tasks if t.name != chief and t.type != "ps"]
    return GroupRestart(
        config.max_restarts, required=[chief], alone=alone, permanent=(PERMANENT_EXIT,)
    )


def launch(
    config: LaunchConfig,
    command: Callable[[TaskId], list[str]],
    stream: IO[str] | None = None,
    quiet: bool = False,
    on_step: Callable[[int], None] | None = None,
) -> LaunchResult:
    """Run the cluster to completion (or to the end of the retry budget); always tears down."""
    sink = TaskLines(stream or sys.stderr, quiet)
    state = config.state_dir
    (state / "logs").mkdir(parents=True, exist_ok=True)
    status_file = state / "status.json"
    result = LaunchResult(ok=False)
    start = time.monotonic()
    attempt = 0
    preempt = threading.Event()
    members = elastic.Membership(
        config.workers if not config.parameter_server else 1,
        config.min_workers,
        config.replacement_after_s,
    )
    policy = policy_for(config, config.cluster())
    with stop_on_sigterm(preempt.set):
        while True:
            status_file.unlink(missing_ok=True)
            cluster = config.cluster(members.workers)
            segment = members.begin(attempt)
            cores = local_tasks.placement(
                cluster.tasks(), len(cluster.tasks()) if config.parameter_server else config.workers,
                config.pin_cores)
            quota = local_tasks.cpu_quota(config.slowdown, cluster.tasks(), cores, sink.say)
            with contextlib.ExitStack() as stack:
                if quota is not None:  # removed once the group below has ended
                    stack.callback(_release_quota, quota, result)
                # Leaving the group stops every task: SIGTERM, SIGKILL after the grace period.
                group = stack.enter_context(ProcessGroup(
                    grace=config.grace_seconds, echo=sink.line, die_with_parent=True
                ))
                envs = {
                    t.name: _env(config, cluster, t, attempt, status_file, pinned=bool(cores))
                    for t in cluster.tasks()
                }
                starter = _with_error_file(local_tasks.Starter(
                    command, envs, cores or {}, quota.procs if quota else None,
                    config.slowdown.task.name if config.slowdown else ""), state)
                for t in cluster.tasks():
                    group.start(t.name, starter(t, _log(state, t, attempt)))
                sink.say(
                    f"attempt {attempt}: started {', '.join(group.names)} "
                    f"({json.dumps(cluster.as_dict())})"
                    + (f"; cores {local_tasks.describe_cores(cores)}" if cores else "")
                )
                result.placement = {k: list(v) for k, v in cores.items()} if cores else {}
                duty = None if quota else local_tasks.duty_cycle(config.slowdown, group, sink.say)
                try:
                    verdict = _supervise(
                        config,
                        cluster,
                        group,
                        policy,
                        starter,
                        sink,
                        status_file,
                        attempt,
                        result,
                        on_step,
                        state,
                        preempt,
                        segment,
                        members,
                    )
                finally:
                    if duty is not None:  # continued before the group is stopped
                        duty.stop()
                        result.slowdown = {"method": "signals",
                                           "period_ms": duty.slowdown.period_ms,
                                           "running_s": round(duty.running_s, 3),
                                           "stopped_s": round(duty.stopped_s, 3)}
            outcome = verdict.reason
            segment.ended = outcome
            result.events.append(f"attempt {attempt}: {outcome}")
            if verdict.action is Action.SUCCEED:
                result.ok = True
                break
            if verdict.action is Action.FAIL:  # permanent, preempted, or no restarts left
                result.error = outcome
                if verdict.exhausted:
                    result.error += f"; retry budget of {config.max_restarts} restarts used up"
                break
            if preempt.is_set():  # SIGTERM while the group was failing: do not start another
                result.error = f"{outcome}; preempted by SIGTERM before a restart"
                break
            if verdict.action is Action.LOSE:
                try:
                    members.lose(verdict.member, outcome, segment.last_step)
                except elastic.ElasticError as exc:
                    result.error = f"{exc}; the job cannot continue" + (
                        "" if config.elastic else
                        " (min_workers lets a multi-worker mirrored job go on with fewer)"
                    )
                    break
                policy = policy_for(config, config.cluster(members.workers))  # a fresh budget
                sink.say(
                    f"{outcome}: continuing with {members.workers} worker(s) from the last "
                    f"backup (min_workers {members.min_workers}, global batch kept)"
                )
            elif verdict.action is Action.RESIZE:
                before = members.workers
                members.admit(segment.last_step)
                policy = policy_for(config, config.cluster(members.workers))
                sink.say(f"{outcome}: admitting the replacement(s), {before} -> "
                         f"{members.workers} workers, from that backup")
            else:
                result.restarts += 1
                sink.say(
                    f"{outcome}: restarting the whole group from the last backup "
                    f"(restart {policy.restarts}/{config.max_restarts})"
                )
            attempt += 1
        # A SIGTERM at any point (even one that came as training finished) is reported.
        result.preempted = preempt.is_set()
    result.seconds = time.monotonic() - start
    if not config.parameter_server:
        result.elastic = members.events()
        result.segments = members.segments(config.global_batch_size)
    return result


def _release_quota(quota: Any, result: LaunchResult) -> None:
    """Record what the kernel throttled, then remove the cgroup (its group has ended)."""
    result.slowdown = {"method": "quota", "period_ms": quota.period_us / 1000,
                       "quota_ms": quota.quota_us / 1000, **quota.throttled()}
    quota.remove()


def _error_file(state: Path, task: TaskId) -> Path:
    """Where `task` leaves its error (one per task: the supervisor removes it before each
    start, so a restarted task's message is never its predecessor's)."""
    return state / "errors" / f"{task.name.replace(':', '-')}.txt"


def _with_error_file(
    starter: Callable[[TaskId, Path], Command], state: Path
) -> Callable[[TaskId, Path], Command]:
    """`starter` with each command's `message_file` set to its task's error file, so the
    group reads the task's own account of a failure into its `Exit`."""

    def start(task: TaskId, log: Path) -> Command:
        return dataclasses.replace(starter(task, log), message_file=_error_file(state, task))

    return start


def _explained(verdict: Verdict, ended: Exit) -> Verdict:
    """A permanent failure told in the task's own words (`worker:0: train.config.model: ...`)
    when it left them: the exit code alone says only that something was wrong, and the reason
    would otherwise sit in the task's output, possibly among other tasks' lines."""
    if verdict.action is Action.FAIL and ended.returncode == PERMANENT_EXIT and ended.message:
        return dataclasses.replace(verdict, reason=f"{ended.name}: {ended.message}")
    return verdict


def _log(state: Path, task: TaskId, attempt: int, restart: int | None = None) -> Path:
    suffix = "" if restart is None else f".r{restart}"
    return state / "logs" / f"{task.name.replace(':', '-')}.attempt{attempt}{suffix}.log"


def _supervise(
    config: LaunchConfig,
    cluster: ClusterSpec,
    group: ProcessGroup,
    policy: GroupRestart,
    start: Callable[[TaskId, Path], Command],
    sink: TaskLines,
    status_file: Path,
    attempt: int,
    result: LaunchResult,
    on_step: Callable[[int], None] | None,
    state: Path,
    preempt: threading.Event | None = None,
    segment: elastic.Segment | None = None,
    members: elastic.Membership | None = None,
) -> Verdict:
    """Watch the group until it finishes or must be restarted; returns the policy's verdict
    (or RESIZE: a replacement is available and the group stopped at a backup to admit it)."""
    fault = config.fault if attempt == 0 else None
    external_fault = fault is not None and config.parameter_server and fault.task.type != "chief"
    lost = fault.task.name if fault is not None and fault.lost else None
    last_step = -1
    tasks = {t.name: t for t in cluster.tasks()}
    chief = next(t.name for t in cluster.tasks() if cluster.is_chief(t))
    while True:
        exits = group.wait(0.05)
        if preempt is not None and preempt.is_set():
            return _preempt(config, group, chief, sink)
        status = _read_status(status_file)
        step = status.step if status else None
        if status is not None and segment is not None:
            segment.seen(status.step, status.resumed_from, status.time, status.first_chunk)
        if step is not None and step != last_step:
            last_step = step
            if on_step is not None:
                on_step(step)
        if (members is not None and segment is not None and members.replacements_ready()
                and status is not None and status.resumed_from is not None
                and status.step > status.resumed_from):
            return _admit(config, group, sink, step)
        if external_fault and step is not None and step >= fault.step:  # type: ignore[union-attr]
            if fault.task.name in group:  # type: ignore[union-attr]
                sink.say(f"injecting fault {fault} at step {step}")
                group.signal(fault.task.name, fault.signum)  # type: ignore[union-attr]
            external_fault = False
        if lost is not None and any(e.name == lost for e in exits):
            # its node is gone: decided first, whatever else ended in the same poll (a survivor
            # that saw the broken all-reduce)
            policy.mark_gone(lost)
            exits = sorted(exits, key=lambda e: e.name != lost)
        for ended in exits:
            verdict = _explained(policy.decide(group, ended), ended)
            if verdict.action is Action.CONTINUE:
                continue
            if verdict.action is not Action.RESTART:
                return verdict
            sink.say(f"{verdict.reason}; restarting it at the same address")
            result.worker_restarts = policy.member_restarts
            time.sleep(config.worker_restart_delay)
            task = tasks[ended.name]
            log = _log(state, task, attempt, result.worker_restarts)
            group.start(ended.name, start(task, log))


def _admit(config: LaunchConfig, group: ProcessGroup, sink: TaskLines, step: int | None) -> Verdict:
    """Capacity is back: ask every worker to save a backup at its next step boundary and stop
    (the preemption path), so the group can start again at full size from that backup."""
    names = group.names
    sink.say(f"a replacement node is available at step {step}: asking {', '.join(names)} "
             "to save a backup and stop to admit it")
    group.stop(names, grace=config.preempt_grace_seconds, kill=False)
    codes = [group.returncode(n) for n in names]
    if all(c == 0 for c in codes):
        return Verdict(Action.SUCCEED, "ok")  # training had just finished
    saved = all(c == PREEMPTED_EXIT for c in codes)
    return Verdict(
        Action.RESIZE,
        "replacement available: " + ("the group saved a backup and stopped" if saved else
                                     "the group stopped (resuming from its last backup)"),
    )


def _preempt(config: LaunchConfig, group: ProcessGroup, chief: str, sink: TaskLines) -> Verdict:
    """SIGTERM the training tasks, wait for them to save and exit; the caller stops the rest.

    Under the parameter-server strategy only the coordinator trains (and saves: the variables
    live on the PS tasks, which must stay up until it has); under multi-worker mirrored every
    worker runs the loop and they agree on the stopping step through the all-reduce.
    """
    names = [chief] if config.parameter_server else group.names
    sink.say(f"SIGTERM: asking {', '.join(names)} to save a backup and stop")
    group.stop(names, grace=config.preempt_grace_seconds, kill=False)
    codes = {name: group.returncode(name) for name in names}
    if all(c == 0 for c in codes.values()):
        return Verdict(Action.SUCCEED, "ok")  # training had just finished: the model is written
    saved = group.returncode(chief) == PREEMPTED_EXIT
    shown = ", ".join(
        f"{n} {'still running' if c is None else describe(c)}" for n, c in codes.items()
    )
    return Verdict(
        Action.FAIL,
        f"preempted by SIGTERM ({shown}; {'backup saved' if saved else 'no backup confirmed'})",
    )


def _env(
    config: LaunchConfig, cluster: ClusterSpec, task: TaskId, attempt: int, status_file: Path,
    pinned: bool = False,
) -> dict[str, str]:
    env = dict(os.environ)
    env.update(config.extra_env)
    env.update(TFConfig(cluster, task).to_env())
    env["BATON_ATTEMPT"] = str(attempt)
    env["BATON_STATUS_FILE"] = str(status_file)
    env[ERROR_FILE_ENV] = str(_error_file(config.state_dir, task))
    env["BATON_INVENTORY_DIR"] = str(config.state_dir / "inventory")
    # every task of the group runs on this machine: each gets its share of the cores, the share
    # of one node of the full-size cluster (an elastic job that lost a node lost its cores too);
    # a pinned task's affinity is that share already, all of it its own
    shared = len(cluster.tasks()) if config.parameter_server else config.workers
    env[TASKS_ON_NODE_ENV] = "1" if pinned else str(shared)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.pop("BATON_INJECT_FAILURE", None)
    if config.fault is not None and attempt == 0:
        env["BATON_INJECT_FAILURE"] = str(config.fault)
    return env


def _read_status(path: Path) -> elastic.Status | None:
    """The chief's status file (strategies.callbacks.StatusFile); None: none yet."""
    try:
        data = json.loads(path.read_text())
        resumed, first = data.get("resumed_from"), data.get("first_chunk")
        return elastic.Status(int(data["step"]), None if resumed is None else int(resumed),
                      None if data.get("time") is None else float(data["time"]),
                      None if first is None else (float(first[0]), int(first[1])))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError):
        return None
