"""Local tasks as nodes: each pinned to its share of the cores, a straggler by CPU quota.

`core_sets` is arithmetic; the supervisor's `Command.cpus` and `Command.cgroup` are checked on
real child processes (the quota only where this machine has a writable cgroup CPU controller:
root on these machines and CI)."""

from __future__ import annotations

import os
import sys
import time

import pytest

from baton.strategies import throttle
from baton.strategies.cluster import TaskId
from baton.strategies.inventory import core_sets
from baton.strategies.local_tasks import placement
from baton.strategies.supervisor import Command, ProcessGroup


def test_cores_are_dealt_out_in_equal_contiguous_shares() -> None:
    assert core_sets(2, [0, 1]) == [(0,), (1,)]
    assert core_sets(2, [0, 1, 2, 3]) == [(0, 1), (2, 3)]
    assert core_sets(2, [0, 1, 2]) == [(0,), (1,)]  # equal nodes; the odd core stays free
    assert core_sets(3, [0, 1]) is None  # shares would overlap: no pinning
    assert core_sets(1, [4, 5]) == [(4, 5)]


def test_placement_is_off_when_asked_or_when_cores_are_short() -> None:
    tasks = [TaskId("worker", 0), TaskId("worker", 1)]
    assert placement(tasks, 2, pin=False) is None
    assert placement(tasks, len(os.sched_getaffinity(0)) + 1) is None
    if len(os.sched_getaffinity(0)) >= 2:
        cores = placement(tasks, 2)
        assert cores is not None and set(cores) == {"worker:0", "worker:1"}
        assert not set(cores["worker:0"]) & set(cores["worker:1"])


def _run(tmp_path, cmd: Command) -> str:  # noqa: ANN001
    with ProcessGroup(grace=2) as group:
        group.start("t", cmd)
        exits = []
        deadline = time.monotonic() + 30
        while not exits and time.monotonic() < deadline:
            exits = group.wait(0.5)
        assert exits and exits[0].returncode == 0
    return (tmp_path / "log").read_text()


def test_a_command_runs_on_the_cores_it_is_given(tmp_path) -> None:
    core = min(os.sched_getaffinity(0))
    out = _run(tmp_path, Command(
        [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
        log=tmp_path / "log", cpus=(core,)))
    assert out.strip() == f"[{core}]"


@pytest.mark.skipif(throttle.controller() is None, reason="no writable cgroup CPU controller")
def test_a_cpu_quota_holds_a_busy_process_to_its_share(tmp_path) -> None:
    quota = throttle.CpuQuota.create("worker:9", 0.25, 4, cores=1)
    assert quota is not None and quota.quota_us == 1000 and quota.period_us == 4000
    try:
        core = min(os.sched_getaffinity(0))
        busy = ("import time, resource\n"
                "t = time.monotonic()\n"
                "while time.monotonic() - t < 1.0: pass\n"
                "print(resource.getrusage(resource.RUSAGE_SELF).ru_utime)")
        out = _run(tmp_path, Command([sys.executable, "-c", busy], log=tmp_path / "log",
                                     cpus=(core,), cgroup=quota.procs))
        cpu_s = float(out.strip().splitlines()[-1])
        assert 0.1 < cpu_s < 0.45, cpu_s  # a quarter of the second's wall time, not all of it
        assert quota.throttled()["throttled_periods"] > 50
    finally:
        quota.remove()
    assert not quota.directory.exists()


def test_no_quota_below_the_kernels_minimum() -> None:
    assert throttle.CpuQuota.create("worker:9", 0.1, 5, cores=1) is None  # 0.5 ms < 1 ms
    assert throttle.min_period_ms(0.5) == 2.0
