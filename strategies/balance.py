"""Per-replica batch sizes that follow each replica's measured speed, the global batch fixed.

A synchronous step waits for its slowest replica: with equal batches, a worker at half speed
holds every other worker to its pace. LB-BSP and Cannikin size each worker's batch to its speed
instead. Baton does the same under multi-worker mirrored (`train.config.balance: auto`):

- every worker reads the same global batch of the same seeded stream and trains on its slice
  `[bounds[i], bounds[i+1])` of it (`graphs.steps.make_train_chunk(balance=True)`), so the union
  of the slices is exactly the global batch whatever the split;
- the loss is averaged over the global batch (per-example losses divided by it, as always), so
  the all-reduced gradient is the global-batch mean for any split: the update is the one
  `balance: off` makes, up to the order of a float sum;
- each replica times its own forward and backward pass in-graph (`tf.timestamp` on either side
  of the gradient computation, before the all-reduce waits for the others) and the times travel
  with the step's totals through the same all-reduce, so every worker receives every replica's
  speed and computes the same new split here, with no extra collective and no coordinator.

The split is re-checked after every chunk of steps and moves straight to the speed-proportional
split. It starts moving only when that would cut the predicted step time (the slowest replica's
rows over its rate) by more than `threshold`, so noise on equal workers does not reshuffle the
batches; once moving, it keeps going while the gain exceeds `settle` (hysteresis), so it lands
on the balanced split instead of stopping wherever the next move first looks small (with one
threshold of 5 % and half-way moves it used to stop ~5-9 % short: 5,275 rows of 8,192 on the
fast worker where 5,505 evens the passes). This module is pure arithmetic (no TensorFlow).

Why the full jump does not overshoot: a replica's time per step is about `a_i * rows + c` (its
per-row cost and a fixed per-step cost). Its measured rate `rows / time` on fewer rows is then
lower than `1 / a_i`, so a split proportional to measured rates lands *short* of the one that
equalises the times, and each re-check moves monotonically closer; the split that equalises
the times is the fixed point (tests/strategies/test_balance.py simulates it).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

AUTO, OFF = "auto", "off"
BALANCE_MODES = (AUTO, OFF)


def proportional_split(total: int, weights: Sequence[float], floor: int) -> list[int]:
    """`total` rows in proportion to `weights`, each at least `floor`, summing to `total`.

    Replicas whose share falls below `floor` get `floor` and the rest is shared among the
    others in proportion; then largest-remainder rounding (ties to the lower index).
    """
    n = len(weights)
    if n < 1 or total < n * floor:
        raise ValueError(f"cannot split {total} rows over {n} replicas of at least {floor}")
    w = [max(float(x), 0.0) for x in weights]
    if sum(w) <= 0:
        w = [1.0] * n
    pinned: set[int] = set()
    while True:
        free = [i for i in range(n) if i not in pinned]
        weight = {i: w[i] for i in free}
        if sum(weight.values()) <= 0:
            weight = dict.fromkeys(free, 1.0)
        mass, rest = sum(weight.values()), total - floor * len(pinned)
        shares = [float(floor) if i in pinned else rest * weight[i] / mass for i in range(n)]
        low = {i for i in free if shares[i] < floor}
        if not low:
            break
        pinned |= low
    out = [math.floor(x) for x in shares]
    left = total - sum(out)
    order = sorted(range(n), key=lambda i: (-(shares[i] - math.floor(shares[i])), i))
    for i in order[:left]:
        out[i] += 1
    return out


@dataclasses.dataclass
class Balancer:
    """The current split and what was measured; identical on every worker given the same input.

    Attributes:
        global_batch: rows per step over all replicas (fixed).
        replicas: replicas in sync.
        min_share: no replica gets fewer rows than this fraction of an equal share (at least 1),
            so a slow replica keeps being measured instead of starving.
        threshold: relative step-time gain a move must promise for a settled split to move.
        settle: while moving (the last re-check moved the split), the smaller gain that still
            moves it; below it the split is settled again.
        smoothing: weight of the newest measure in each replica's rate (exponential average).
        damping: the fraction of the way to the speed-proportional split taken per move (1: all
            of it; see the module docstring for why that does not overshoot).
        warmup: observations ignored at the start (the first chunk's time holds one-off work).
        record_every: steps between the samples kept in `history` (changes are always kept).
    """

    global_batch: int
    replicas: int
    min_share: float = 0.125
    threshold: float = 0.05
    settle: float = 0.005
    smoothing: float = 0.5
    damping: float = 1.0
    warmup: int = 1
    record_every: int = 0
    sizes: list[int] = dataclasses.field(default_factory=list)
    rates: list[float] = dataclasses.field(default_factory=list)
    history: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    changes: int = 0
    moving: bool = False
    _seen: int = 0
    _last_record: int = -1

    def __post_init__(self) -> None:
        if self.replicas < 1 or self.global_batch < self.replicas:
            raise ValueError(
                f"balance needs a global batch of at least one row per replica. Received: "
                f"batch_size={self.global_batch}, replicas={self.replicas}"
            )
        if not self.sizes:
            self.sizes = proportional_split(self.global_batch, [1.0] * self.replicas, 0)
        self.rates = self.rates or [0.0] * self.replicas

    @property
    def floor(self) -> int:
        return max(1, int(self.global_batch / self.replicas * self.min_share))

    def bounds(self) -> list[int]:
        """Row offsets `[0, s0, s0+s1, ..., global_batch]`: replica i trains on [b[i], b[i+1])."""
        out = [0]
        for s in self.sizes:
            out.append(out[-1] + s)
        return out

    def chunk_cap(self, steps_per_execution: int) -> int:
        """Steps the next chunk may run: 1, 2, 4, ... up to `steps_per_execution`.

        The split can only move after a chunk has been measured, and the first chunk (one-off
        work: XLA compiling the pass) is not measured at all; at the configured chunk length
        (20 steps) a run spent its first 40 steps at the even split, a quarter of a 160-step
        run. Short chunks first measure after 1 + 2 steps and let the early moves land within
        a few steps; a chunk boundary costs the loop one wake-up (about a millisecond).
        """
        return max(1, min(steps_per_execution, 2 ** min(self._seen, 16)))

    def step_seconds(self, sizes: Sequence[int]) -> float:
        """Predicted compute time of one step with `sizes`: the slowest replica's."""
        return max(s / r for s, r in zip(sizes, self.rates, strict=True))

    def observe(self, step: int, seconds: Sequence[float], rows: Sequence[float]) -> bool:
        """Fold in one chunk's per-replica compute seconds and rows; True when the split moved."""
        self._seen += 1
        if self._seen <= self.warmup:
            return False
        for i, (t, n) in enumerate(zip(seconds, rows, strict=True)):
            if t > 0 and n > 0:
                rate = float(n) / float(t)
                old = self.rates[i]
                self.rates[i] = rate if old <= 0 else (
                    self.smoothing * rate + (1 - self.smoothing) * old)
        changed = False
        if all(r > 0 for r in self.rates):
            target = proportional_split(self.global_batch, self.rates, self.floor)
            part = [s + self.damping * (t - s) for s, t in zip(self.sizes, target, strict=True)]
            proposal = proportional_split(self.global_batch, part, self.floor)
            now, then = self.step_seconds(self.sizes), self.step_seconds(proposal)
            needed = self.settle if self.moving else self.threshold
            if proposal != self.sizes and then < now * (1 - needed):
                self.sizes = proposal
                self.changes += 1
                changed = True
            self.moving = changed
        due = self.record_every > 0 and (
            self._last_record < 0 or step - self._last_record >= self.record_every)
        if changed or due:
            self.record(step, "rebalanced" if changed else "sample")
        return changed

    def record(self, step: int, event: str) -> None:
        self._last_record = step
        self.history.append({
            "step": step,
            "event": event,
            "batch": list(self.sizes),
            "rows_per_sec": [round(r, 1) for r in self.rates],
        })

    def summary(self) -> dict[str, Any]:
        """What train_info.json records under `balance`."""
        return {
            "mode": AUTO,
            "global_batch": self.global_batch,
            "replicas": self.replicas,
            "final_batch": list(self.sizes),
            "rows_per_sec": [round(r, 1) for r in self.rates],
            "changes": self.changes,
            "history": self.history,
        }
