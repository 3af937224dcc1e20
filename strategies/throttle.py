"""A straggler by CPU quota: the kernel's CFS bandwidth control, as a Kubernetes CPU limit is.

`--inject-slowdown worker:1@speed:0.5` can slow a task in two ways. The launcher's signal duty
cycle (strategies.slowdown.DutyCycle) stops and continues it in slots of milliseconds; this
module instead puts the task in a cgroup whose CPU quota is `speed` of its cores in every
period, so the kernel throttles it, with no thread of ours in the loop and down to 1 ms slots.

Why both: a synchronous step meets the slow task at every collective. Each stop slot the task
is in when its peer needs an answer (a ring all-reduce trades several messages per step) is
waited out whole, which a node that is simply slower never makes anyone do. Measured with
bench/training/profile_step.py (8,192 global batch, 2 workers, the slow one at 0.5): with
stop slots of 5 ms on average, a step split in proportion to speed spent ~18 ms beyond its
passes, against ~5 ms at equal speeds; with a 1 ms quota slot, ~14 ms. The finer the slots, the
nearer the rehearsal is to a slower node; the coarser, the nearer to a pod throttled at
Kubernetes' default 100 ms period. The period is therefore the spec's to choose
(`worker:1@speed:0.5:2ms:quota`), and recorded.

The quota needs a writable CPU controller: cgroup v1's `cpu` hierarchy, or cgroup v2's root
with `cpu` in its `cgroup.subtree_control` (root in a VM or container that has one). Where
there is none, `CpuQuota.create` returns None and the launcher says why it uses signals.
The task joins the cgroup before it executes (`supervisor.Command.cgroup`), so every thread and
child it starts is throttled with it; the cgroup is removed when the attempt ends.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

MIN_QUOTA_US = 1000  # the kernel refuses a CFS quota below 1 ms


def controller() -> tuple[Path, int] | None:
    """(the directory to create cgroups in, cgroup version) if the CPU quota is writable here."""
    v1 = _v1_cpu_dir()
    if v1 is not None and os.access(v1, os.W_OK) and (v1 / "cpu.cfs_quota_us").exists():
        return v1, 1
    root = Path("/sys/fs/cgroup")
    try:
        subtree = (root / "cgroup.subtree_control").read_text().split()
    except OSError:
        return None
    if "cpu" in subtree and os.access(root, os.W_OK):
        return root, 2
    return None


def _v1_cpu_dir() -> Path | None:
    """This process's cgroup in the v1 `cpu` hierarchy, from /proc/self/{mountinfo,cgroup}."""
    try:
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
        groups = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    mount = None
    for line in mounts:
        left, _, right = line.partition(" - ")
        fields, extra = left.split(), right.split()
        if len(extra) >= 3 and extra[0] == "cgroup" and "cpu" in extra[2].split(","):
            mount = Path(fields[4])
    own = next((g.split(":", 2)[2] for g in groups
                if len(g.split(":", 2)) == 3 and "cpu" in g.split(":", 2)[1].split(",")), None)
    if mount is None or own is None:
        return None
    return mount / own.lstrip("/")


def min_period_ms(speed: float) -> float:
    """The shortest period whose quota (`speed` of it, per core) the kernel accepts."""
    return MIN_QUOTA_US / 1000 / speed


class CpuQuota:
    """One cgroup with a CPU quota: `speed` x `cores` CPUs in every `period_ms`."""

    def __init__(self, directory: Path, version: int, period_us: int, quota_us: int) -> None:
        self.directory, self.version = directory, version
        self.period_us, self.quota_us = period_us, quota_us

    @classmethod
    def create(cls, label: str, speed: float, period_ms: float, cores: int) -> CpuQuota | None:
        """A new cgroup named after `label` and this process; None where no quota can be set
        (no writable controller, or the kernel refused the values)."""
        found = controller()
        if found is None:
            return None
        parent, version = found
        period_us = round(period_ms * 1000)
        quota_us = round(period_us * speed * max(cores, 1))
        if quota_us < MIN_QUOTA_US:
            return None
        directory = parent / f"baton-{os.getpid()}-{label.replace(':', '-')}"
        try:
            directory.mkdir(exist_ok=True)
            if version == 1:
                (directory / "cpu.cfs_period_us").write_text(str(period_us))
                (directory / "cpu.cfs_quota_us").write_text(str(quota_us))
            else:
                (directory / "cpu.max").write_text(f"{quota_us} {period_us}")
        except OSError:
            with contextlib.suppress(OSError):
                directory.rmdir()
            return None
        return cls(directory, version, period_us, quota_us)

    @property
    def procs(self) -> Path:
        """Write "0" here (in the child, before exec) to join the cgroup."""
        return self.directory / "cgroup.procs"

    def throttled(self) -> dict[str, float]:
        """The kernel's count: periods, periods throttled, seconds throttled."""
        try:
            stat = dict(line.split() for line in (self.directory / "cpu.stat").read_text()
                        .splitlines() if len(line.split()) == 2)
        except OSError:
            return {}
        if self.version == 1:
            return {"periods": float(stat.get("nr_periods", 0)),
                    "throttled_periods": float(stat.get("nr_throttled", 0)),
                    "throttled_s": float(stat.get("throttled_time", 0)) / 1e9}
        return {"periods": float(stat.get("nr_periods", 0)),
                "throttled_periods": float(stat.get("nr_throttled", 0)),
                "throttled_s": float(stat.get("throttled_usec", 0)) / 1e6}

    def remove(self) -> None:
        """Remove the cgroup (its processes have ended; a straggler is moved out first)."""
        parent = self.directory.parent / "cgroup.procs"
        with contextlib.suppress(OSError):
            for pid in self.procs.read_text().split():
                parent.write_text(pid)
        with contextlib.suppress(OSError):
            self.directory.rmdir()
