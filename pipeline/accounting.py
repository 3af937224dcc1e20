"""Compute accounting for a stage: wall time, CPU seconds, peak memory, an energy estimate.

Peak memory is sampled (process plus children) by a background thread, because `ru_maxrss` only
ever grows over a process's life and so cannot attribute a peak to one stage of many.

Energy uses the Green Algorithms model (Lannelongue et al., 2021): CPU seconds times the power of
one busy core, plus memory held times the power per GiB of DRAM. The constants are defaults for a
typical server core; they make runs comparable, not a wattmeter reading.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
from types import TracebackType

import psutil

WATTS_PER_CORE = 12.0
WATTS_PER_GIB = 0.3725
_GIB = 1024**3


@dataclasses.dataclass
class Usage:
    wall_s: float = 0.0
    cpu_s: float = 0.0
    peak_rss_mb: float = 0.0

    @property
    def energy_j(self) -> float:
        return self.cpu_s * WATTS_PER_CORE + self.wall_s * (self.peak_rss_mb * 2**20 / _GIB) * WATTS_PER_GIB

    def as_dict(self) -> dict[str, float]:
        return {
            "wall_s": round(self.wall_s, 3), "cpu_s": round(self.cpu_s, 3),
            "peak_rss_mb": round(self.peak_rss_mb, 1), "energy_j": round(self.energy_j, 1),
        }


class Meter:
    """`with Meter() as m:` measures the block; `m.usage` holds the result."""

    def __init__(self, interval: float = 0.05) -> None:
        self.usage = Usage()
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
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def _sample(self) -> None:
        while not self._stop.wait(self._interval):
            self.usage.peak_rss_mb = max(self.usage.peak_rss_mb, self._rss() / 2**20)

    def __enter__(self) -> Meter:
        self._t0, self._c0 = time.monotonic(), self._cpu()
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
        self.usage.peak_rss_mb = max(self.usage.peak_rss_mb, self._rss() / 2**20)
