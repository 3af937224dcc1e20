"""`workers: auto`: the candidate topologies, what a probe of each measured, and the choice.

The train stage probes each candidate (one process with one_device; multi-worker mirrored with
2..max_workers workers) on the real job for one warm-up chunk plus `probe_steps` timed steps
(`TrainJob.probe_steps`; the trainer's `info["window"]`), then trains with the one this module
picks: the most examples/s (`objective: speed`) or the fewest joules per example
(`objective: energy`).

Energy over a probe's window follows the stage accounting's method (baton.energy): the node's
RAPL counters between the window's start and end when readable (`RaplSampler`, read by the
driver while the probes run), else the Green Algorithms estimate from the CPU seconds and memory
of every task of the probe over its window; either times the spec's PUE.

Pure logic apart from `RaplSampler`'s thread: no TensorFlow here.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Sequence
from typing import Any

from baton import energy
from baton.strategies.factory import MULTI_WORKER_MIRRORED, ONE_DEVICE

SPEED, ENERGY = "speed", "energy"
OBJECTIVES = (SPEED, ENERGY)


@dataclasses.dataclass(frozen=True)
class Candidate:
    strategy: str
    workers: int

    @property
    def label(self) -> str:
        return f"{self.workers} worker{'s' if self.workers > 1 else ''}"


def candidates(max_workers: int) -> list[Candidate]:
    """One process (one_device), then multi-worker mirrored with 2..max_workers workers."""
    if max_workers < 1:
        raise ValueError(f"max_workers must be >= 1. Received: max_workers={max_workers}")
    return [Candidate(ONE_DEVICE, 1)] + [
        Candidate(MULTI_WORKER_MIRRORED, n) for n in range(2, max_workers + 1)
    ]


@dataclasses.dataclass(frozen=True)
class Measurement:
    """What the probe of one candidate measured over its timed window (error: it failed)."""

    candidate: Candidate
    steps: int = 0
    seconds: float = 0.0
    examples_per_sec: float = 0.0
    cpu_s: float = 0.0
    energy_j: float = 0.0
    j_per_example: float = 0.0
    energy_method: str = energy.ESTIMATE
    wall_s: float = 0.0  # the whole probe, startup included (its cost)
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and self.steps > 0

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "strategy": self.candidate.strategy, "workers": self.candidate.workers,
            "steps": self.steps, "seconds": round(self.seconds, 4),
            "examples_per_sec": round(self.examples_per_sec, 1), "cpu_s": round(self.cpu_s, 3),
            "energy_j": round(self.energy_j, 3), "j_per_example": float(f"{self.j_per_example:.4g}"),
            "energy_method": self.energy_method, "wall_s": round(self.wall_s, 2),
        }
        if self.error:
            out["error"] = self.error
        return out


def measure(
    candidate: Candidate,
    windows: Sequence[dict[str, Any]],
    global_batch: int,
    pue: float = 1.0,
    rapl_j: float | None = None,
    wall_s: float = 0.0,
) -> Measurement:
    """One candidate's figures from its tasks' windows (the first is the chief's: its seconds
    give the speed; a synchronous job's workers share their steps). `rapl_j`: the node's RAPL
    joules over the chief's window (None: estimate from every task's CPU seconds)."""
    if not windows or not windows[0].get("steps"):
        return Measurement(candidate, wall_s=wall_s, error="no timed window reported")
    chief = windows[0]
    steps, seconds = int(chief["steps"]), float(chief["seconds"])
    examples = steps * global_batch
    cpu_s = sum(float(w.get("cpu_s", 0.0)) for w in windows)
    if rapl_j is not None:
        joules, method = rapl_j, energy.RAPL
    else:
        joules = sum(
            energy.estimate_joules(float(w.get("cpu_s", 0.0)), float(w.get("seconds", 0.0)),
                                   float(w.get("peak_rss_mb", 0.0)) / 1024)
            for w in windows
        )
        method = energy.ESTIMATE
    joules *= pue
    return Measurement(
        candidate, steps=steps, seconds=seconds,
        examples_per_sec=examples / max(seconds, 1e-9), cpu_s=cpu_s, energy_j=joules,
        j_per_example=joules / max(examples, 1), energy_method=method, wall_s=wall_s,
    )


def choose(measured: Sequence[Measurement], objective: str) -> tuple[Measurement, str]:
    """The best candidate for `objective` and a sentence saying why, e.g. "picked 1 worker:
    14,200 ex/s vs 2 workers 6,700 ex/s (0.47x)". Ties go to fewer workers."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}. "
                         f"Received: objective={objective!r}")
    ok = [m for m in measured if m.ok]
    if not ok:
        errors = "; ".join(f"{m.candidate.label}: {m.error}" for m in measured)
        raise ValueError(f"every topology probe failed ({errors})")
    if objective == SPEED:
        best = max(ok, key=lambda m: (m.examples_per_sec, -m.candidate.workers))
    else:
        best = min(ok, key=lambda m: (m.j_per_example, m.candidate.workers))
    others = [m for m in ok if m is not best]
    if objective == SPEED:
        head = f"picked {best.candidate.label}: {best.examples_per_sec:,.0f} ex/s"
        rest = [f"{m.candidate.label} {m.examples_per_sec:,.0f} ex/s "
                f"({m.examples_per_sec / best.examples_per_sec:.2f}x)" for m in others]
    else:
        head = (f"picked {best.candidate.label}: {_j(best.j_per_example)} J/example "
                f"({best.energy_method})")
        rest = [f"{m.candidate.label} {_j(m.j_per_example)} J/example "
                f"({m.j_per_example / max(best.j_per_example, 1e-30):.2f}x)" for m in others]
    failed = [f"{m.candidate.label} failed ({m.error})" for m in measured if not m.ok]
    reason = head + (" vs " + ", ".join(rest) if rest else "") + (
        "; " + "; ".join(failed) if failed else "")
    return best, reason


def table(measured: Sequence[Measurement], chosen: Measurement | None = None) -> list[str]:
    """The probe's alternatives as aligned lines (the stage log prints them)."""
    head = ("topology", "steps", "ex/s", "cpu s", "J/example", "probe s", "")
    rows = [head]
    for m in measured:
        mark = "<- chosen" if m is chosen else (m.error[:60] if m.error else "")
        name = f"{m.candidate.label} ({m.candidate.strategy})"
        rows.append((name, str(m.steps), f"{m.examples_per_sec:,.0f}", f"{m.cpu_s:.2f}",
                     _j(m.j_per_example), f"{m.wall_s:.1f}", mark))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def _j(x: float) -> str:
    return f"{x:.3g}"


class RaplSampler:
    """Reads a RAPL counter every `interval` seconds (a daemon thread) so that the joules
    between two wall-clock times (a probe task's window) can be read afterwards."""

    def __init__(self, counter: energy.RaplCounter, interval: float = 0.1) -> None:
        self.counter, self.interval = counter, interval
        self._start = counter.read()
        self._samples: list[tuple[float, float]] = [(time.time(), 0.0)]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RaplSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        self._samples.append((time.time(), self.counter.joules_since(self._start)))

    def joules_between(self, t0: float, t1: float) -> float:
        """Energy between two times, interpolated linearly between the nearest samples."""
        return self._at(t1) - self._at(t0)

    def _at(self, t: float) -> float:
        samples = list(self._samples)
        if t <= samples[0][0]:
            return samples[0][1]
        for (ta, ja), (tb, jb) in zip(samples, samples[1:], strict=False):
            if ta <= t <= tb:
                return ja + (jb - ja) * ((t - ta) / (tb - ta) if tb > ta else 0.0)
        return samples[-1][1]
