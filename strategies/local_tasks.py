"""How the local launcher starts each task as a node of its own: its cores, and a straggler's
slowdown.

A local cluster stands for several nodes on one machine. Two things keep that honest:

- **Placement.** Each task is pinned to its share of the usable cores (strategies.inventory
  .core_sets), as the node it stands for would have them. Thread counts alone did not do it:
  TensorFlow ran a task given one intra-op thread on both cores of this machine, so a task that
  stalled (stopped, throttled, waiting) lent its core to the other and the "slow node" was
  never slow by the amount asked (its passes measured 1.34x slower at half speed).
- **A straggler's slowdown** (`--inject-slowdown`): a CPU quota (strategies.throttle) where
  the machine lets us set one, else the signal duty cycle (strategies.slowdown). The quota
  applies to the task's own cores, so `speed: 0.5` is half of what that node has.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from baton.strategies.cluster import ClusterSpecError, TaskId
from baton.strategies.inventory import core_sets, usable_cores
from baton.strategies.slowdown import MIN_SIGNAL_PERIOD_MS, DutyCycle, Slowdown
from baton.strategies.supervisor import Command, ProcessGroup

Cores = dict[str, tuple[int, ...]]


def placement(tasks: list[TaskId], node_tasks: int, pin: bool = True) -> Cores | None:
    """Each task's cores, or None: every task shares every core (not asked, or fewer cores
    than the `node_tasks` nodes they stand for). Shares go in task order (worker:i, share i)."""
    if not pin:
        return None
    sets = core_sets(node_tasks, usable_cores())
    if sets is None:
        return None
    return {t.name: sets[i] for i, t in enumerate(tasks)}


def describe_cores(cores: Cores) -> str:
    return ", ".join(f"{name} {','.join(map(str, c))}" for name, c in cores.items())


@dataclasses.dataclass(frozen=True)
class Starter:
    """A task's command as the group starts (or restarts) it: its environment, its cores, and
    (the slowed task) the cgroup of its CPU quota."""

    command: Callable[[TaskId], list[str]]
    envs: dict[str, dict[str, str]]
    cores: Cores
    quota_procs: Path | None = None
    slowed: str = ""

    def __call__(self, task: TaskId, log: Path) -> Command:
        return Command(self.command(task), self.envs[task.name], log=log,
                       cpus=self.cores.get(task.name),
                       cgroup=self.quota_procs if task.name == self.slowed else None)


def cpu_quota(slow: Slowdown | None, tasks: list[TaskId], cores: Cores | None,
              say: Callable[[str], None]) -> Any:
    """The slowed task's CPU quota (strategies.throttle.CpuQuota), or None: signals instead
    (said why). An explicit `:quota` that cannot be had is an error, not a silent fallback."""
    from baton.strategies import throttle

    if slow is None or slow.method == "signals" or slow.task not in tasks:
        return None
    own = len(cores[slow.task.name]) if cores else len(usable_cores())
    quota = throttle.CpuQuota.create(slow.task.name, slow.speed, slow.period_ms, own)
    if quota is None:
        why = "no writable cgroup CPU controller here (it needs root or a delegated cgroup)"
        if slow.method == "quota":
            raise ClusterSpecError(f"--inject-slowdown {slow}: {why}")
        say(f"{why}: slowing {slow.task.name} with signals instead")
        return None
    say(f"slowing {slow.task.name} down to {slow.speed:g} of its {own} core(s): a CPU quota "
        f"of {quota.quota_us / 1000:g} ms every {quota.period_us / 1000:g} ms")
    return quota


def duty_cycle(slow: Slowdown | None, group: ProcessGroup,
               say: Callable[[str], None]) -> DutyCycle | None:
    """The signal duty cycle on the slowed task, started (None: no such task here)."""
    if slow is None or slow.task.name not in group:
        return None
    if slow.period_ms < MIN_SIGNAL_PERIOD_MS:
        slow = dataclasses.replace(slow, period_ms=MIN_SIGNAL_PERIOD_MS)
    say(f"slowing {slow.task.name} down to {slow.speed:g} of its speed "
        f"(SIGSTOP/SIGCONT every {slow.period_ms} ms)")
    name = slow.task.name
    return DutyCycle(slow, lambda signum: group.signal(name, signum)).start()
