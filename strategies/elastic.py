"""Elastic size for the local multi-worker mirrored cluster: who is still there, and what happened.

`cluster: {workers: N, min_workers: M}` (or `--min-workers M`) lets a synchronous job continue
with fewer workers when one is gone for good, like Ray Train's `ScalingConfig(num_workers=(M, N))`,
Horovod elastic or TorchElastic's `--nnodes=M:N`:

- a worker is *lost* when its node is gone (`--inject-failure worker:1@step:40:lost`) or when its
  restarts are exhausted: it failed once more after the group's budget of `max_restarts`
  restarts was spent (`GroupRestart` returns `Action.LOSE` for it instead of failing the job);
- the launcher then restarts the group with the workers left, as long as at least `min_workers`
  remain, from the chief's last backup, with a fresh TF_CONFIG (a smaller cluster, new ports) and
  a fresh restart budget. The global batch is kept (each replica's share grows), the data position
  follows the global step, so no step is lost or repeated: the steps after the backup are
  recomputed and the step counter ends at exactly the planned steps;
- the chief stays `worker:0`: the survivors are renumbered `worker:0..k-1` in their old order, so
  if worker:0's node is the one lost, the old worker:1 becomes the chief (the backup is written by
  the chief into the shared backup directory and is restorable by any task);
- when capacity comes back (`LaunchConfig.replacement_after_s` seconds after a loss, the local
  stand-in for a new node joining) the replacement is admitted at the next backup boundary: the
  launcher asks the running group to save and stop (the preemption path: SIGTERM, a backup at the
  next step boundary, exit 143) and starts it again with the full size from that backup. Horovod
  elastic likewise admits new hosts at its next `state.commit()`.

Each emulated node keeps its share of this machine's cores (`BATON_TASKS_ON_NODE` stays the full
cluster's size), so a lost node's cores are gone too and the examples/s after a loss are what
the remaining nodes can do. `Membership` is pure bookkeeping (no process is touched here); the
launcher carries it out and reports `events()` and `segments()` in its LaunchResult and the train
stage in train_info.json.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, NamedTuple

from baton.errors import BatonError


class Status(NamedTuple):
    """What the chief's status file says (strategies.callbacks.StatusFile): its step, the step
    it resumed from, its clock at the write, and its clock and step at the first chunk end."""

    step: int
    resumed_from: int | None = None
    time: float | None = None
    first_chunk: tuple[float, int] | None = None


@dataclasses.dataclass
class Segment:
    """One attempt of the group: how many workers, from which step, how fast."""

    attempt: int
    workers: int
    resumed_from: int | None = None  # the step the chief restored (its status file says)
    last_step: int | None = None
    points: list[tuple[float, int]] = dataclasses.field(default_factory=list)  # (time, step)
    ended: str = ""

    def seen(self, step: int, resumed_from: int | None, now: float | None = None,
             first_chunk: tuple[float, int] | None = None) -> None:
        """The chief reported `step` (and the step it resumed from) at `now`, and, when it
        says so, the clock and step of its first chunk end (`first_chunk`).

        `now` and `first_chunk` are the chief's clock where its status file has it (so a
        group shorter than two of the launcher's polls is still timed from its first chunk
        end); a point of another clock is never mixed in: without `now`, the launcher's own.
        """
        if resumed_from is not None and self.resumed_from is None:
            self.resumed_from = resumed_from
        if first_chunk is not None and not any(p[1] == first_chunk[1] for p in self.points):
            self.points.append(first_chunk)
            self.points.sort(key=lambda p: p[1])
        if self.last_step == step:
            return
        self.last_step = step
        if not any(p[1] == step for p in self.points):
            self.points.append((time.monotonic() if now is None else now, step))

    def rate(self, global_batch_size: int = 0) -> dict[str, float | None]:
        """Steps/s (and examples/s) between the first chunk end and the last report.

        The first report (training begins, after the restore) and the first chunk (tracing)
        are left out, so the figure is the steady speed of this group size.
        """
        start = self.resumed_from if self.resumed_from is not None else -1
        pts = [p for p in self.points if p[1] > start]
        if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
            return {"steps_per_sec": None, "examples_per_sec": None}
        sps = (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])
        return {
            "steps_per_sec": round(sps, 2),
            "examples_per_sec": round(sps * global_batch_size, 1) if global_batch_size else None,
        }

    def as_dict(self, global_batch_size: int = 0) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "workers": self.workers,
            "resumed_from": self.resumed_from,
            "last_step": self.last_step,
            **self.rate(global_batch_size),
            "ended": self.ended,
        }


class ElasticError(BatonError):
    """Not enough workers left (the launcher turns it into a failed launch)."""


class Membership:
    """The worker nodes of an elastic multi-worker mirrored job and their history.

    Args:
        workers: the full size N (nodes 0..N-1 at the start).
        min_workers: the job continues while at least this many remain (default N: not elastic).
        replacement_after_s: a lost node's replacement is available this many seconds after the
            loss (None: never).
    """

    def __init__(
        self, workers: int, min_workers: int | None = None,
        replacement_after_s: float | None = None,
    ) -> None:
        self.size = workers
        self.min_workers = workers if min_workers is None else min_workers
        if not 1 <= self.min_workers <= workers:
            raise ValueError(
                f"min_workers must be between 1 and workers={workers}. "
                f"Received: min_workers={min_workers}"
            )
        self.replacement_after_s = replacement_after_s
        self.nodes: list[int] = list(range(workers))  # node ids; task index = position
        self._next_id = workers
        self._pending: list[float] = []  # when each lost node's replacement becomes available
        self._events: list[dict[str, Any]] = []
        self._segments: list[Segment] = []

    @property
    def elastic(self) -> bool:
        return self.min_workers < self.size

    @property
    def workers(self) -> int:
        return len(self.nodes)

    def node_of(self, task_name: str) -> int:
        """The node behind `worker:i` of the current numbering."""
        return self.nodes[int(task_name.rpartition(":")[2])]

    # ------------------------------------------------------------------ changes
    def lose(self, task_name: str, reason: str, step: int | None, now: float | None = None) -> None:
        """`task_name`'s node is gone for good; raises ElasticError below `min_workers`."""
        node = self.node_of(task_name)
        before = self.workers
        if before - 1 < self.min_workers:
            raise ElasticError(
                f"{task_name} lost ({reason}): {before - 1} worker(s) would be left, fewer than "
                f"min_workers={self.min_workers}"
            )
        self.nodes.remove(node)
        if self.replacement_after_s is not None:
            self._pending.append((time.monotonic() if now is None else now)
                                 + self.replacement_after_s)
        self._events.append({
            "_next": len(self._segments), "kind": "lost", "step": step, "task": task_name, "node": node, "reason": reason,
            "workers_before": before, "workers_after": self.workers,
            "renumbered": {f"worker:{self.nodes.index(n)}": f"node {n}" for n in self.nodes},
        })

    def replacements_ready(self, now: float | None = None) -> int:
        """How many replacement nodes are available now (never more than the missing ones)."""
        now = time.monotonic() if now is None else now
        return min(sum(1 for t in self._pending if t <= now), self.size - self.workers)

    def admit(self, step: int | None, now: float | None = None) -> int:
        """Add the available replacements (at the end of the numbering); returns how many."""
        n = self.replacements_ready(now)
        if not n:
            return 0
        now = time.monotonic() if now is None else now
        before = self.workers
        ready = sorted(t for t in self._pending if t <= now)[:n]
        for t in ready:
            self._pending.remove(t)
            self.nodes.append(self._next_id)
            self._next_id += 1
        self._events.append({
            "_next": len(self._segments), "kind": "admitted", "step": step, "reason": f"{n} replacement node(s) available",
            "workers_before": before, "workers_after": self.workers,
        })
        return n

    # ------------------------------------------------------------------ record
    def begin(self, attempt: int) -> Segment:
        seg = Segment(attempt, self.workers)
        self._segments.append(seg)
        return seg

    def events(self) -> list[dict[str, Any]]:
        """Resize events, each with the step the next group resumed from (its backup) and the
        steps between that backup and the step reached (recomputed, not lost or repeated)."""
        out = []
        for ev in self._events:
            ev = dict(ev)
            nxt = ev.pop("_next")
            after = self._segments[nxt].resumed_from if nxt < len(self._segments) else None
            step = ev["step"]
            ev["resumed_from"] = after
            ev["steps_recomputed"] = None if after is None or step is None else max(0, step - after)
            out.append(ev)
        return out

    def segments(self, global_batch_size: int = 0) -> list[dict[str, Any]]:
        return [s.as_dict(global_batch_size) for s in self._segments]


def describe_segments(segments: list[dict[str, Any]]) -> str:
    """`"2:5120>1:2980"`: workers and examples/s of each segment, for the run's summary table
    (segments with no measured rate, e.g. ended before a second chunk, show `?`)."""
    parts = []
    for seg in segments:
        rate = seg.get("examples_per_sec")
        parts.append(f"{seg['workers']}:{'?' if rate is None else round(rate)}")
    return ">".join(parts)
