"""Compute accounting for a stage: wall time, CPU seconds, peak memory, an energy estimate.

Peak memory is sampled (process plus children) by a background thread, because `ru_maxrss` only
ever grows over a process's life and so cannot attribute a peak to one stage of many.

Energy (baton.energy): the node's RAPL counters over the stage where they are readable (a
measurement of the whole node, so other work on it during the stage counts too), else the Green
Algorithms estimate (CPU seconds x one busy core's power + memory held x power per GiB); either
times the spec's PUE. Each record names its method and adds gCO2e at the spec's carbon
intensity.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
from types import TracebackType
from typing import Any

import psutil

from baton import energy
from baton.energy import EnergyConfig, RaplCounter

_GIB = 1024**3


@dataclasses.dataclass
class Usage:
    wall_s: float = 0.0
    cpu_s: float = 0.0
    peak_rss_mb: float = 0.0
    rapl_j: float | None = None  # measured by RAPL over the block (None: estimated)
    pue: float = 1.0
    carbon_intensity: float = energy.CARBON_INTENSITY  # gCO2e/kWh
    examples: int | None = None  # examples the stage trained on (its `examples_trained` metric)

    @property
    def energy_method(self) -> str:
        return energy.RAPL if self.rapl_j is not None else energy.ESTIMATE

    @property
    def energy_j(self) -> float:
        it = self.rapl_j if self.rapl_j is not None else energy.estimate_joules(
            self.cpu_s, self.wall_s, self.peak_rss_mb * 2**20 / _GIB)
        return it * self.pue

    @property
    def co2e_g(self) -> float:
        return energy.co2e_grams(self.energy_j, self.carbon_intensity)

    @property
    def j_per_example(self) -> float | None:
        return self.energy_j / self.examples if self.examples else None

    def as_dict(self) -> dict[str, float | str]:
        out: dict[str, float | str] = {
            "wall_s": round(self.wall_s, 3), "cpu_s": round(self.cpu_s, 3),
            "peak_rss_mb": round(self.peak_rss_mb, 1), "energy_j": round(self.energy_j, 1),
            "energy_method": self.energy_method, "co2e_g": _significant(self.co2e_g),
        }
        if self.j_per_example is not None:
            out["j_per_example"] = _significant(self.j_per_example)
        return out


def recorded_usage(recorded: dict[str, Any], energy_config: dict[str, Any]) -> Usage:
    """A stage's Usage as a record holds it: a RAPL reading is kept as read, an estimate
    recomputed from the same times and memory (equal to the record up to its rounding)."""
    pue = float(energy_config.get("pue", 1.0))
    measured = recorded.get("energy_method") == energy.RAPL
    return Usage(
        wall_s=float(recorded.get("wall_s") or 0.0), cpu_s=float(recorded.get("cpu_s") or 0.0),
        peak_rss_mb=float(recorded.get("peak_rss_mb") or 0.0),
        rapl_j=float(recorded["energy_j"]) / pue if measured else None, pue=pue,
        carbon_intensity=float(energy_config.get("carbon_intensity", energy.CARBON_INTENSITY)),
    )


def _significant(x: float, digits: int = 4) -> float:
    """`x` to `digits` significant figures: grams of CO2e and joules per example are small."""
    return float(f"{x:.{digits}g}")


def totals(usages: list[Usage]) -> dict[str, float | str]:
    """A run's totals: times and energy summed, the peak the largest, the method(s) named."""
    methods = sorted({u.energy_method for u in usages if u.wall_s})
    return {
        "wall_s": round(sum(u.wall_s for u in usages), 3),
        "cpu_s": round(sum(u.cpu_s for u in usages), 3),
        "peak_rss_mb": round(max((u.peak_rss_mb for u in usages), default=0.0), 1),
        "energy_j": round(sum(u.energy_j for u in usages), 1),
        "co2e_g": _significant(sum(u.co2e_g for u in usages)),
        "energy_method": "+".join(methods) or energy.ESTIMATE,
    }


class Meter:
    """`with Meter() as m:` measures the block; `m.usage` holds the result."""

    def __init__(self, interval: float = 0.05, config: EnergyConfig | None = None,
                 rapl: RaplCounter | None = None) -> None:
        config = config or EnergyConfig()
        self.usage = Usage(pue=config.pue, carbon_intensity=config.carbon_intensity)
        self._rapl = rapl
        self._interval = interval
        self._stop = threading.Event()
        self._proc = psutil.Process(os.getpid())

    def _rss(self) -> int:
        total = 0
        try:
            total = self._proc.memory_info().rss
            for child in self._proc.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    total += child.memory_info().rss
        except psutil.Error:
            pass
        return total

    def _cpu(self) -> float:
        return energy.process_cpu_seconds()

    def _sample(self) -> None:
        while not self._stop.wait(self._interval):
            self.usage.peak_rss_mb = max(self.usage.peak_rss_mb, self._rss() / 2**20)

    def __enter__(self) -> Meter:
        self._t0, self._c0 = time.monotonic(), self._cpu()
        self._e0 = self._rapl.read() if self._rapl is not None else None
        self.usage.peak_rss_mb = self._rss() / 2**20
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()
        self.usage.wall_s = time.monotonic() - self._t0
        self.usage.cpu_s = self._cpu() - self._c0
        if self._rapl is not None and self._e0 is not None:
            self.usage.rapl_j = self._rapl.joules_since(self._e0)
        self.usage.peak_rss_mb = max(self.usage.peak_rss_mb, self._rss() / 2**20)
