"""Energy and carbon: RAPL counters where the kernel lets us read them, else an estimate.

Why two methods: RAPL (`/sys/class/powercap/intel-rapl:*`, also exposed for AMD Zen) is a
measurement of the CPU packages and DRAM of the whole node, but since 2020 (CVE-2020-8694)
`energy_uj` is readable by root only on most distributions, and containers rarely mount it. The
fallback is the Green Algorithms model (Lannelongue, Grealey and Inouye, 2021, the calculator's
current constants): CPU time x the power of one busy core (12 W, its default for an unknown
CPU) plus memory held x 0.3725 W per GiB, both x the data centre's PUE. Every record names the
method it used, so a measured figure and an estimate are never mixed up.

Carbon is energy x the grid's carbon intensity: 475 gCO2e/kWh by default, CodeCarbon's world
average; set the local grid's figure in the spec's `energy: {carbon_intensity: ...}`.

No TensorFlow, Beam or psutil here: the serving process and `baton inspect` import it too.
"""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import Literal

from baton.errors import ConfigError

CARBON_INTENSITY = 475.0  # gCO2e/kWh, CodeCarbon's world average
WATTS_PER_CORE = 12.0  # Green Algorithms' per-core power for an unknown CPU model
WATTS_PER_GIB = 0.3725  # Green Algorithms' DRAM power per GiB
RAPL_ROOT = Path("/sys/class/powercap")
RAPL = "rapl"
ESTIMATE = "green-algorithms"
_J_PER_KWH = 3.6e6


@dataclasses.dataclass(frozen=True)
class EnergyConfig:
    """The spec's `energy:` mapping.

    `method`: `auto` (RAPL when readable, else the estimate), `rapl` (refuse to run without it),
    `estimate`; `carbon_intensity` in gCO2e/kWh; `pue`, the data centre's power usage
    effectiveness (1.0: a machine measured at the wall or a laptop; Green Algorithms' calculator
    uses 1.67 for an unknown data centre).
    """

    method: Literal["auto", "rapl", "estimate"] = "auto"
    carbon_intensity: float = CARBON_INTENSITY
    pue: float = 1.0

    def __post_init__(self) -> None:
        problems = [p for p in (
            _finite_at_least("carbon_intensity", self.carbon_intensity, 0.0, "gCO2e per kWh"),
            _finite_at_least("pue", self.pue, 1.0, "facility power / IT power"),
        ) if p is not None]
        if problems:
            raise problems[0] if len(problems) == 1 else EnergySettingsError(problems)


class EnergySettingsError(ConfigError):
    """Every bad `energy:` value at once, so one edit of the spec fixes them all. `errors` lists
    them as baton.configs.ConfigErrors does, and the spec
    loader reports each with its own line."""

    def __init__(self, errors: list[ConfigError]) -> None:
        self.errors = errors
        super().__init__("; ".join(str(e) for e in errors))


def _finite_at_least(name: str, value: float, low: float, unit: str) -> ConfigError | None:
    """`energy.<name>` must be a finite number >= `low`: YAML's `.inf` is a float that passes a
    bare `>=`, and it would make every stage's joules (pue) or gCO2e (carbon_intensity) inf,
    which run.json could only hold as the non-standard JSON `Infinity`."""
    if math.isfinite(value) and value >= low:
        return None
    why = "" if math.isfinite(value) else " (not a finite number)"
    return ConfigError(f"energy.{name}",
                       f"must be a finite number >= {low:g} ({unit}). Received: {value}{why}")


class RaplCounter:
    """The node's CPU-package and DRAM energy counters, summed, with wrap-around handled.

    Each zone's `energy_uj` counts up to `max_energy_range_uj` and wraps; `joules_since(start)`
    adds the range back once per wrap seen between two reads (reads are far more frequent than
    the minutes a counter takes to wrap).
    """

    def __init__(self, zones: list[Path]) -> None:
        self.zones = zones
        self._ranges = [_read_int(z / "max_energy_range_uj") or 0 for z in zones]

    @classmethod
    def open(cls, root: Path | None = None) -> RaplCounter | None:
        """The readable zones under `root` (packages and their `dram` subzones), or None."""
        root = root if root is not None else RAPL_ROOT
        if not root.is_dir():
            return None
        zones = []
        for z in sorted(root.glob("*-rapl:*")):
            name = (_read_text(z / "name") or "").strip()
            top = z.name.count(":") == 1
            if (top or name == "dram") and _read_int(z / "energy_uj") is not None:
                zones.append(z)
        return cls(zones) if zones else None

    def read(self) -> list[int]:
        return [_read_int(z / "energy_uj") or 0 for z in self.zones]

    def joules_since(self, start: list[int]) -> float:
        total = 0
        for before, now, span in zip(start, self.read(), self._ranges, strict=True):
            total += now - before if now >= before else now + span - before
        return total / 1e6


def open_counter(config: EnergyConfig, root: Path | None = None) -> RaplCounter | None:
    """The RAPL counter `config.method` asks for; ValueError when `rapl` is required and absent."""
    if config.method == "estimate":
        return None
    counter = RaplCounter.open(root)
    if counter is None and config.method == "rapl":
        where = root if root is not None else RAPL_ROOT
        raise ValueError(f"energy.method: rapl, but no readable RAPL counter under {where} "
                         "(energy_uj is root-only on most kernels since CVE-2020-8694). "
                         "Use method: auto or estimate")
    return counter


def estimate_joules(cpu_s: float, wall_s: float, memory_gib: float) -> float:
    """Green Algorithms, before PUE: busy core-seconds x 12 W + GiB held x seconds x 0.3725 W."""
    return cpu_s * WATTS_PER_CORE + wall_s * memory_gib * WATTS_PER_GIB


def co2e_grams(joules: float, carbon_intensity: float) -> float:
    return joules / _J_PER_KWH * carbon_intensity


def process_cpu_seconds() -> float:
    """CPU time of this process and its waited-for children."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class ProcessEnergy:
    """Energy since this object was made, for a long-running process (the model server):
    the RAPL delta when readable, else the estimate from this process's CPU time and peak
    memory over the elapsed time. Read at scrape time, so it costs nothing per request."""

    def __init__(self, root: Path | None = None) -> None:
        import time

        self._clock = time.monotonic
        self._t0, self._cpu0 = self._clock(), process_cpu_seconds()
        self.rapl = RaplCounter.open(root)
        self._e0 = self.rapl.read() if self.rapl is not None else None

    @property
    def method(self) -> str:
        return RAPL if self.rapl is not None else ESTIMATE

    def joules(self) -> float:
        if self.rapl is not None and self._e0 is not None:
            return self.rapl.joules_since(self._e0)
        import resource

        peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2**30  # KiB
        return estimate_joules(process_cpu_seconds() - self._cpu0, self._clock() - self._t0,
                               peak_gib)


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _read_int(path: Path) -> int | None:
    text = _read_text(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None
