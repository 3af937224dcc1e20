"""The shape of a training run: strategy, workers, ps tasks, elastic floor, `workers: auto`.

Which flag, config field or spec section a topology comes from is the pipeline's business
(pipeline.training.topology resolves and checks it); what a resolved topology means for the
processes, the tasks and the job is here, where the runs that follow it live
(strategies.run, strategies.auto_workers).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from baton.strategies.factory import MULTI_WORKER_MIRRORED, PARAMETER_SERVER
from baton.strategies.settings import TrainSettings


@dataclasses.dataclass(frozen=True)
class AutoWorkers:
    """`workers: auto` as resolved: where it came from and the probe's settings."""

    source: str  # e.g. "--workers auto", "config.workers=auto", "cluster.workers=auto"
    max_workers: int
    objective: str
    probe_steps: int


@dataclasses.dataclass(frozen=True)
class Topology:
    strategy: str
    workers: int
    ps: int
    min_workers: int | None = None  # elastic when below `workers` (multi-worker mirrored only)
    auto: AutoWorkers | None = None  # workers: auto, not probed yet (`run` picks the topology)

    @property
    def elastic(self) -> bool:
        return self.min_workers is not None and self.min_workers < self.workers

    @property
    def multi_process(self) -> bool:
        return self.strategy == PARAMETER_SERVER or (
            self.strategy == MULTI_WORKER_MIRRORED and self.workers > 1
        )


def balance_mode(config: TrainSettings, topo: Topology) -> str:
    """The resolved `balance`: as written, else `auto` for multi-worker mirrored with at least
    two workers (issue 14's default), else off.

    Why `auto` by default there: a synchronous step waits for its slowest worker, and nothing
    tells a job in advance that one of its nodes will be slow. Measured (bench/training/
    bench_balance.py, docs/training.md): with a worker at half speed it wins 1.46x on an image
    model and 1.20x on the small MLP, and runs at 0.98x at equal speeds (the MLP), where a settled
    split moves only for a predicted gain above 5 %. The price is bitwise reproducibility:
    the split follows timing, so the update is `off`'s up to the order of a float sum; a run
    that must resume bitwise sets `balance: off`. `mirrored` (one process, its replicas
    usually equal GPUs) keeps `off` unless asked.
    """
    if config.balance:
        return config.balance
    return "auto" if topo.strategy == MULTI_WORKER_MIRRORED and topo.workers >= 2 else "off"


def placed(job: Any, topo: Topology) -> Any:
    """The job (strategies.job.TrainJob) as `topo` runs it: its strategy, the balance that
    strategy gets, and whether it may shrink (elastic)."""
    return dataclasses.replace(job, strategy=topo.strategy, balance=balance_mode(job.settings, topo),
                               elastic=topo.elastic)


def task_names(topo: Topology) -> list[str]:
    if not topo.multi_process:
        return ["worker:0"]
    if topo.strategy == PARAMETER_SERVER:
        return ["chief:0"] + [f"worker:{i}" for i in range(topo.workers)] + [
            f"ps:{i}" for i in range(topo.ps)
        ]
    return [f"worker:{i}" for i in range(topo.workers)]
