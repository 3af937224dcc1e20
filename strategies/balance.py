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

A replica's step is more than its pass: from the moment the previous all-reduce returns until
its next pass starts it applies the update, takes its next rows and slices them (`post`, also
timed in-graph and carried with the totals). On a slow node that part is slow too (measured:
~6 ms of a 65 ms step at full speed, twice that on a worker at half speed), and a split that
equalises the passes alone leaves the fast replica waiting for it at every all-reduce. So the
split equalises `rows / rate + post` (`balanced_split`): the fast replica takes enough extra
rows to cover the slow one's extra fixed work. Waiting in the all-reduce is counted in neither.

The split is re-checked after every chunk of steps; it moves only when the predicted step time
(the slowest replica's rows over its rate plus its post) drops by more than `threshold`, so
noise on equal workers does not reshuffle the batches. This module is pure arithmetic (no
TensorFlow).
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


def balanced_split(total: int, rates: Sequence[float], fixed: Sequence[float],
                   floor: int) -> list[int]:
    """`total` rows so that every replica's `rows / rate + fixed` is the same, each at least
    `floor`, summing to `total`.

    With a common step time T, replica i takes `rate_i * (T - fixed_i)` rows; T follows from
    the total. A replica whose share falls below `floor` is pinned there and T is solved again
    for the others. Without fixed costs this is `proportional_split(total, rates, floor)`.
    """
    n = len(rates)
    if n < 1 or total < n * floor:
        raise ValueError(f"cannot split {total} rows over {n} replicas of at least {floor}")
    if any(r <= 0 for r in rates):
        return proportional_split(total, rates, floor)
    pinned: set[int] = set()
    while True:
        free = [i for i in range(n) if i not in pinned]
        rest = total - floor * len(pinned)
        t = (rest + sum(rates[i] * fixed[i] for i in free)) / sum(rates[i] for i in free)
        shares = [float(floor) if i in pinned else rates[i] * (t - fixed[i]) for i in range(n)]
        low = {i for i in free if shares[i] < floor}
        if not low or len(low) == len(free):
            break
        pinned |= low
    return proportional_split(total, [max(x, 0.0) for x in shares], floor)


@dataclasses.dataclass
class Balancer:
    """The current split and what was measured; identical on every worker given the same input.

    Attributes:
        global_batch: rows per step over all replicas (fixed).
        replicas: replicas in sync.
        min_share: no replica gets fewer rows than this fraction of an equal share (at least 1),
            so a slow replica keeps being measured instead of starving.
        threshold: relative step-time gain below which the split is left alone.
        smoothing: weight of the newest measure in each replica's rate (exponential average).
        damping: the fraction of the way to the speed-proportional split taken per move.
        warmup: observations ignored at the start (the first chunk's time holds one-off work).
        record_every: steps between the samples kept in `history` (changes are always kept).
    """

    global_batch: int
    replicas: int
    min_share: float = 0.125
    threshold: float = 0.05
    smoothing: float = 0.5
    damping: float = 0.5
    warmup: int = 1
    record_every: int = 0
    sizes: list[int] = dataclasses.field(default_factory=list)
    rates: list[float] = dataclasses.field(default_factory=list)
    post: list[float] = dataclasses.field(default_factory=list)  # seconds per step, smoothed
    history: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    changes: int = 0
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
        self.post = self.post or [0.0] * self.replicas

    @property
    def floor(self) -> int:
        return max(1, int(self.global_batch / self.replicas * self.min_share))

    def bounds(self) -> list[int]:
        """Row offsets `[0, s0, s0+s1, ..., global_batch]`: replica i trains on [b[i], b[i+1])."""
        out = [0]
        for s in self.sizes:
            out.append(out[-1] + s)
        return out

    def step_seconds(self, sizes: Sequence[int]) -> float:
        """Predicted time of one step with `sizes`: the slowest replica's pass and post."""
        return max(s / r + p for s, r, p in zip(sizes, self.rates, self.post, strict=True))

    def observe(self, step: int, seconds: Sequence[float], rows: Sequence[float],
                post: Sequence[float] = (), post_steps: int = 0) -> bool:
        """Fold in one chunk's per-replica pass seconds and rows, and (`post_steps` > 0) its
        per-replica post seconds summed over that many steps; True when the split moved."""
        self._seen += 1
        if self._seen <= self.warmup:
            return False
        for i, (t, n) in enumerate(zip(seconds, rows, strict=True)):
            if t > 0 and n > 0:
                self.rates[i] = self._smooth(self.rates[i], float(n) / float(t))
        if post_steps > 0 and len(post) == self.replicas and min(post) >= 0:
            self.post = [self._smooth(old, float(p) / post_steps)
                         for old, p in zip(self.post, post, strict=True)]
        changed = False
        if all(r > 0 for r in self.rates):
            target = balanced_split(self.global_batch, self.rates, self.post, self.floor)
            # Halfway there: a replica's rate measured on few rows carries its fixed per-step
            # cost, so a full jump overshoots and the split would swing chunk to chunk.
            halfway = [s + self.damping * (t - s) for s, t in zip(self.sizes, target, strict=True)]
            proposal = proportional_split(self.global_batch, halfway, self.floor)
            now, then = self.step_seconds(self.sizes), self.step_seconds(proposal)
            if proposal != self.sizes and then < now * (1 - self.threshold):
                self.sizes = proposal
                self.changes += 1
                changed = True
        due = self.record_every > 0 and (
            self._last_record < 0 or step - self._last_record >= self.record_every)
        if changed or due:
            self.record(step, "rebalanced" if changed else "sample")
        return changed

    def _smooth(self, old: float, new: float) -> float:
        return new if old <= 0 else self.smoothing * new + (1 - self.smoothing) * old

    def record(self, step: int, event: str) -> None:
        self._last_record = step
        self.history.append({
            "step": step,
            "event": event,
            "batch": list(self.sizes),
            "rows_per_sec": [round(r, 1) for r in self.rates],
            "post_ms": [round(p * 1000, 2) for p in self.post],
        })

    def summary(self) -> dict[str, Any]:
        """What train_info.json records under `balance`."""
        return {
            "mode": AUTO,
            "global_batch": self.global_batch,
            "replicas": self.replicas,
            "final_batch": list(self.sizes),
            "rows_per_sec": [round(r, 1) for r in self.rates],
            "post_ms": [round(p * 1000, 2) for p in self.post],
            "changes": self.changes,
            "history": self.history,
        }
