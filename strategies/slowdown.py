"""Rehearse a straggler: slow one task of a local cluster down from outside its process.

`--inject-slowdown worker:1@speed:0.5:10ms:signals` (or `:quota`, strategies.throttle, the
default where a cgroup CPU controller is writable) makes the launcher stop and continue task
worker:1's process group on a duty cycle (SIGSTOP for half of the time, SIGCONT for the other half, in
slots of `period_ms` on average), the way a node shared with a noisy neighbour, a throttled CPU
or a slower machine type looks to a synchronous job: the task makes progress at `speed` of its
normal rate and knows nothing of it.

The slots' lengths are drawn at random (exponential, with means `speed * period_ms` running
and `(1 - speed) * period_ms` stopped), not fixed: a synchronous worker locks onto a fixed
cycle. It waits in the all-reduce while stopped, is continued at the start of a run slot, and a
step that fits in one slot then never sees a stop while it computes, so the straggler is slow
only where it waits for the others (measured here: a fifth of the time running, yet its timed
passes 1.2x the other's, not 5x). With memoryless slots the time left in a run slot does not
depend on when the work began, so any stretch of work of `t` seconds takes `t / speed` on
average, the compute included. This is what `train.config.balance: auto` is tested and benchmarked
against (strategies.balance); unlike `--inject-failure` it applies to every attempt (a slow node
stays slow after a restart).

The fraction is kept by the clock, not only by the draws: the launcher's thread that sends
SIGSTOP wakes late when the cores are busy (the task it should stop is running), but on time to
send SIGCONT (the stopped task's core is idle), so run slots overran and a task meant to run
half of the time ran ~60 % of it (its passes measured 1.6-1.7x slower, not 2x). Each stop slot
now adds the stop time owed (the measured running time times `(1 - speed) / speed`, less the
measured stopped time), up to two mean slots per stop; the thread also asks for real-time
scheduling (SCHED_FIFO; granted to root) so that it wakes when due.

The task is always continued before the launcher stops it (a stopped process does not act on
SIGTERM until continued), and only processes the launcher started are signalled.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import random
import re
import signal
import threading
import time
from collections.abc import Callable

from baton.errors import EXIT_USAGE, BatonError
from baton.strategies.cluster import TASK_TYPES, TaskId

_RE = re.compile(
    r"^(?P<type>[a-z]+)(?::(?P<index>\d+))?@speed:(?P<speed>[0-9.]+)(?::(?P<period>\d+)ms)?"
    r"(?::(?P<method>[a-z]+))?$"
)
METHODS = ("quota", "signals")  # strategies.throttle's CPU quota; the duty cycle below
MIN_SIGNAL_PERIOD_MS = 5  # shorter, the signals' own cost slowed a task beyond its speed


class SlowdownSpecError(BatonError, ValueError):
    """A slowdown spec that cannot be parsed."""

    exit_code = EXIT_USAGE


@dataclasses.dataclass(frozen=True)
class Slowdown:
    task: TaskId
    speed: float  # the fraction of its CPU time the task may use, in (0, 1)
    period_ms: int = 50  # a run slot and a stop slot together (on average, with signals)
    method: str | None = None  # "quota", "signals"; None: the quota where the machine allows

    def __str__(self) -> str:
        how = f":{self.method}" if self.method else ""
        return f"{self.task.name}@speed:{self.speed:g}:{self.period_ms}ms{how}"


def parse_slowdown(text: str | None) -> Slowdown | None:
    """`"worker:1@speed:0.5[:50ms][:quota|:signals]"` -> Slowdown; None or "" -> None."""
    if not text:
        return None
    m = _RE.match(text.strip())
    if not m or m.group("type") not in TASK_TYPES or (m.group("method") or "quota") not in METHODS:
        raise SlowdownSpecError(
            "--inject-slowdown must look like 'worker:1@speed:0.5' (optionally ':50ms', the "
            "period, and ':quota' or ':signals', how), task type one of "
            f"{', '.join(TASK_TYPES)}. Received: {text!r}"
        )
    speed = float(m.group("speed"))
    period = int(m.group("period") or 50)
    method = m.group("method")
    if not 0 < speed < 1:
        raise SlowdownSpecError(f"--inject-slowdown speed must be in (0, 1). Received: {speed:g}")
    if not 1 <= period <= 10_000:
        raise SlowdownSpecError(
            f"--inject-slowdown period must be 1-10000 ms. Received: {period}ms")
    if method == "signals" and period < MIN_SIGNAL_PERIOD_MS:
        raise SlowdownSpecError(
            f"--inject-slowdown period must be at least {MIN_SIGNAL_PERIOD_MS} ms with signals. "
            f"Received: {period}ms")
    if method != "signals" and speed * period < 1:
        raise SlowdownSpecError(
            "--inject-slowdown: a CPU quota is at least 1 ms per period (speed x period); use a "
            f"period of at least {math.ceil(1 / speed)} ms. Received: speed {speed:g}, "
            f"period {period}ms")
    return Slowdown(TaskId(m.group("type"), int(m.group("index") or 0)), speed, period, method)


class DutyCycle:
    """A thread that SIGSTOPs and SIGCONTs one task on the slowdown's duty cycle.

    `send(signum)` delivers a signal to the task's current process (group); it returns False
    while there is none (between restarts), which is harmless. `seed` fixes the slot lengths.
    """

    def __init__(self, slowdown: Slowdown, send: Callable[[int], bool], seed: int = 0) -> None:
        self.slowdown, self._send = slowdown, send
        self._rng = random.Random(seed)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="baton-slowdown", daemon=True)
        self.cycles = 0
        self.running_s = self.stopped_s = 0.0  # measured between the signals sent

    def start(self) -> DutyCycle:
        self._thread.start()
        return self

    def _run(self) -> None:
        with contextlib.suppress(AttributeError, OSError, PermissionError):
            # this thread only: wake when a slot ends, not when a busy core is next free
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        period = self.slowdown.period_ms / 1000
        speed = self.slowdown.speed
        running, stopped = period * speed, period * (1 - speed)
        now = time.monotonic()
        while not self._done.is_set():
            self._send(signal.SIGCONT)
            began, now = now, time.monotonic()
            self.stopped_s += now - began
            if self._done.wait(self.slot(running)):
                break
            self._send(signal.SIGSTOP)
            began, now = now, time.monotonic()
            self.running_s += now - began
            self.cycles += 1
            owed = self.running_s * (1 - speed) / speed - self.stopped_s
            if self._done.wait(max(0.0, self.slot(stopped) + min(owed, 2 * stopped))):
                break
        self._send(signal.SIGCONT)

    def slot(self, mean: float) -> float:
        """One slot's seconds: exponential with `mean`, capped at 10x it (a runaway draw would
        stop the task for seconds on end)."""
        return min(self._rng.expovariate(1 / mean), 10 * mean)

    def stop(self) -> None:
        """End the cycle with the task running (SIGCONT), before anyone stops the task."""
        self._done.set()
        self._thread.join(timeout=5)
        self._send(signal.SIGCONT)
