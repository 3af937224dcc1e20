"""`--inject-slowdown`: the spec's parsing and the duty cycle's timing (no processes: a fake
`send` records the signals with their times)."""

from __future__ import annotations

import signal
import statistics
import threading
import time

import pytest

from baton.strategies.cluster import TaskId
from baton.strategies.slowdown import DutyCycle, Slowdown, SlowdownSpecError, parse_slowdown


def test_a_spec_parses_with_and_without_a_period_and_a_method() -> None:
    assert parse_slowdown("worker:1@speed:0.5") == Slowdown(TaskId("worker", 1), 0.5, 50)
    assert parse_slowdown("worker:1@speed:0.2:10ms") == Slowdown(TaskId("worker", 1), 0.2, 10)
    assert parse_slowdown("worker:1@speed:0.5:2ms:quota") == Slowdown(
        TaskId("worker", 1), 0.5, 2, "quota")
    assert str(parse_slowdown("worker:1@speed:0.5:10ms:signals")) == (
        "worker:1@speed:0.5:10ms:signals")
    assert parse_slowdown(None) is None and parse_slowdown("") is None


@pytest.mark.parametrize(("text", "named"), [
    ("worker:1", "must look like"),
    ("gpu:1@speed:0.5", "task type one of"),
    ("worker:1@speed:1.5", "speed must be in (0, 1). Received: 1.5"),
    ("worker:1@speed:0.5:0ms", "period must be 1-10000 ms. Received: 0ms"),
    ("worker:1@speed:0.5:4ms:signals", "at least 5 ms with signals. Received: 4ms"),
    ("worker:1@speed:0.2:4ms", "use a period of at least 5 ms. Received: speed 0.2, period 4ms"),
    ("worker:1@speed:0.5:10ms:nice", "':quota' or ':signals'"),
])
def test_a_bad_spec_is_a_usage_error_naming_what_was_received(text: str, named: str) -> None:
    with pytest.raises(SlowdownSpecError) as err:
        parse_slowdown(text)
    assert named in str(err.value) and err.value.exit_code == 2


def _record(slowdown: Slowdown, seconds: float, seed: int = 0) -> list[tuple[float, int]]:
    events: list[tuple[float, int]] = []
    lock = threading.Lock()

    def send(signum: int) -> bool:
        with lock:
            events.append((time.monotonic(), signum))
        return True

    cycle = DutyCycle(slowdown, send, seed=seed).start()
    time.sleep(seconds)
    cycle.stop()
    return events


def test_the_task_runs_its_fraction_of_the_time_in_slots_of_random_length() -> None:
    events = _record(Slowdown(TaskId("worker", 1), 0.25, 20), 2.0)
    assert events[-1][1] == signal.SIGCONT  # it always ends running
    running = stopped = 0.0
    runs: list[float] = []
    for (t0, sig), (t1, _) in zip(events, events[1:], strict=False):
        if sig == signal.SIGCONT:
            running += t1 - t0
            runs.append(t1 - t0)
        else:
            stopped += t1 - t0
    assert 0.15 < running / (running + stopped) < 0.35, (running, stopped)
    # memoryless slots, not a fixed cycle a synchronous worker could lock onto: the run slots
    # spread about as an exponential's do (coefficient of variation 1; a fixed cycle's ~0)
    runs = runs[:-1]  # the last one ends at stop()
    assert len(runs) > 30
    assert statistics.pstdev(runs) / statistics.mean(runs) > 0.5, runs


def test_the_same_seed_draws_the_same_slots() -> None:
    a = DutyCycle(Slowdown(TaskId("worker", 1), 0.5, 10), lambda s: True, seed=3)
    b = DutyCycle(Slowdown(TaskId("worker", 1), 0.5, 10), lambda s: True, seed=3)
    assert [a.slot(0.005) for _ in range(5)] == [b.slot(0.005) for _ in range(5)]
    assert all(0 <= a.slot(0.005) <= 0.05 for _ in range(1000))


def test_run_slots_that_overrun_are_paid_back_in_stop_time() -> None:
    """The launcher's thread is late to stop a task whose core is busy (modelled: each SIGSTOP
    takes effect 4 ms after it is due); the cycle adds the time owed to the next stop slot, so
    the task still runs half of the time (uncorrected it ran ~64 %)."""
    events: list[tuple[float, int]] = []

    def send(signum: int) -> bool:
        if signum == signal.SIGSTOP:
            time.sleep(0.004)
        events.append((time.monotonic(), signum))
        return True

    cycle = DutyCycle(Slowdown(TaskId("worker", 1), 0.5, 10), send, seed=1).start()
    time.sleep(2.0)
    cycle.stop()
    running = stopped = 0.0
    for (t0, sig), (t1, _) in zip(events, events[1:], strict=False):
        if sig == signal.SIGCONT:
            running += t1 - t0
        else:
            stopped += t1 - t0
    assert 0.42 < running / (running + stopped) < 0.58, (running, stopped)
    assert 0.42 < cycle.running_s / (cycle.running_s + cycle.stopped_s) < 0.58
