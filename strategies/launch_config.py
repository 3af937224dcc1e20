"""What a local cluster launch is asked for (`LaunchConfig`: the topology, restarts, faults,
elasticity, placement) and what it reports (`LaunchResult`), for strategies.launcher."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from baton.strategies.cluster import ClusterSpec, ClusterSpecError
from baton.strategies.factory import MULTI_WORKER_MIRRORED, PARAMETER_SERVER
from baton.strategies.faults import Fault
from baton.strategies.slowdown import Slowdown


@dataclasses.dataclass(frozen=True)
class LaunchConfig:
    workers: int
    strategy: str = MULTI_WORKER_MIRRORED  # a factory.STRATEGIES name
    ps: int = 0
    max_restarts: int = 3
    fault: Fault | None = None
    state_dir: Path = Path(".launcher")
    grace_seconds: float = 5.0
    preempt_grace_seconds: float = 60.0  # SIGTERM: how long the tasks get to save and exit
    worker_restart_delay: float = 1.0
    extra_env: dict[str, str] = dataclasses.field(default_factory=dict)
    slowdown: Slowdown | None = None  # a straggler rehearsed from outside (strategies.slowdown)
    # Elastic multi-worker mirrored (strategies/elastic.py): continue while this many workers
    # remain (None: all `workers` are needed); a lost node's replacement is available this many
    # seconds after the loss (None: never).
    min_workers: int | None = None
    replacement_after_s: float | None = None
    global_batch_size: int = 0  # examples/s of each segment in the result (0: steps/s only)
    # Pin each task to its own share of this machine's cores (strategies.inventory.core_sets),
    # as the nodes the tasks stand for would have; off, or fewer cores than tasks: all share.
    pin_cores: bool = True

    def __post_init__(self) -> None:
        if self.min_workers is None:
            return
        if self.parameter_server:
            raise ClusterSpecError(
                "min_workers needs strategy multi_worker_mirrored (parameter-server workers are "
                f"restarted alone). Received: min_workers={self.min_workers}, "
                f"strategy={self.strategy}"
            )
        if not 1 <= self.min_workers <= self.workers:
            raise ClusterSpecError(
                f"min_workers must be between 1 and workers={self.workers}. "
                f"Received: min_workers={self.min_workers}"
            )

    @property
    def parameter_server(self) -> bool:
        return self.strategy == PARAMETER_SERVER

    @property
    def elastic(self) -> bool:
        return self.min_workers is not None and self.min_workers < self.workers

    def cluster(self, workers: int | None = None) -> ClusterSpec:
        """The cluster at full size, or (multi-worker mirrored) with `workers` workers."""
        if self.parameter_server:
            return ClusterSpec.local(workers=self.workers, ps=self.ps, chief=True)
        return ClusterSpec.local(workers=self.workers if workers is None else workers)


@dataclasses.dataclass
class LaunchResult:
    ok: bool
    error: str = ""
    preempted: bool = False  # SIGTERM seen: the training tasks were asked to save and stop
    restarts: int = 0
    worker_restarts: int = 0
    events: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    # strategies.elastic: resize events (step, workers before/after, reason, resumed_from) and
    # one segment per attempt (workers, resumed_from, last step, steps/s and examples/s)
    elastic: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    segments: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    placement: dict[str, list[int]] = dataclasses.field(default_factory=dict)  # task -> cores
    slowdown: dict[str, Any] = dataclasses.field(default_factory=dict)  # how it was applied

    def summary(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "placement": self.placement,
            "slowdown": self.slowdown,
            "restarts": self.restarts,
            "worker_restarts": self.worker_restarts,
            "events": self.events[-20:],
            "seconds": round(self.seconds, 2),
            "elastic": self.elastic,
            "segments": self.segments,
        }
