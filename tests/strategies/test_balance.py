"""The split of a fixed global batch over replicas by measured speed (strategies.balance)."""

from __future__ import annotations

import pytest

from baton.strategies.balance import Balancer, proportional_split


def test_proportional_split_sums_to_total_respects_floor_and_rounds_largest_remainder() -> None:
    assert proportional_split(64, [1, 1], 1) == [32, 32]
    assert proportional_split(64, [2, 1], 1) == [43, 21]
    assert proportional_split(10, [1, 1, 1], 1) == [4, 3, 3]  # the spare row to the first tie
    assert proportional_split(64, [1000, 1], 4) == [60, 4]  # the slow one keeps its floor
    assert proportional_split(8, [0, 0], 0) == [4, 4]  # no information: equal
    with pytest.raises(ValueError, match="cannot split 3 rows over 2 replicas of at least 2"):
        proportional_split(3, [1, 1], 2)


def _simulate(b: Balancer, per_row: list[float], fixed: list[float], chunks: int,
              steps: int = 10) -> list[list[int]]:
    """Feed `b` chunks of a replica model `seconds = per_row * rows + fixed` per step; the
    splits after each chunk."""
    splits = []
    for c in range(chunks):
        rows = [steps * s for s in b.sizes]
        secs = [steps * (a * s + f) for a, s, f in zip(per_row, b.sizes, fixed, strict=True)]
        b.observe((c + 1) * steps, secs, rows)
        splits.append(list(b.sizes))
    return splits


def test_balancer_moves_rows_to_the_fast_replica_and_keeps_the_global_batch() -> None:
    b = Balancer(global_batch=96, replicas=2, record_every=1000)
    assert b.bounds() == [0, 48, 96]
    assert not b.observe(10, [0.5, 0.5], [480, 480])  # warm-up chunk: ignored

    def chunk(step: int) -> bool:  # replica 1 takes twice as long per row: 960 rows/s vs 480
        rows = [10 * s for s in b.sizes]
        return b.observe(step, [rows[0] / 960, rows[1] / 480], rows)

    assert chunk(20)
    assert b.sizes == [64, 32]  # straight to the speed-proportional split
    moves = [chunk(30 + 10 * i) for i in range(4)]
    assert moves == [False] * 4 and b.sizes == [64, 32] and b.bounds() == [0, 64, 96]
    assert b.changes == 1 and b.rates == [960.0, 480.0] and not b.moving
    assert [h["event"] for h in b.history] == ["rebalanced"], b.history
    assert b.history[0]["batch"] == [64, 32] and b.history[0]["rows_per_sec"] == [960.0, 480.0]
    summary = b.summary()
    assert summary["final_batch"] == [64, 32] and summary["mode"] == "auto"


def test_balancer_lands_on_the_split_that_evens_the_step_times_from_below() -> None:
    """With a fixed cost per step, a rate measured on fewer rows reads low, so each move lands
    short of the balanced split and the next one goes on from there (never past it), until the
    predicted gain is under `settle`. A single 5 % threshold with half-way moves stopped at
    5,250 of 8,192 rows here, a step ~7 % longer than the balanced one."""
    per_row, fixed = [12e-6, 24e-6], [0.004, 0.008]  # replica 1 at half speed, all of it
    b = Balancer(global_batch=8192, replicas=2)
    splits = _simulate(b, per_row, fixed, chunks=12)
    # the balanced split: 12e-6 * s + 0.004 == 24e-6 * (8192 - s) + 0.008
    best = (24e-6 * 8192 + 0.004) / 36e-6
    fast = [s[0] for s in splits]
    assert fast == sorted(fast) and max(fast) <= best + 1, splits  # monotone, no overshoot
    step = max(a * s + f for a, s, f in zip(per_row, b.sizes, fixed, strict=True))
    assert step <= (12e-6 * best + 0.004) * 1.01, (b.sizes, best)  # within 1 % of the best
    assert splits[-1] == splits[-4] and not b.moving, splits  # and settled there
    assert sum(b.sizes) == 8192


def test_a_settled_split_moves_again_only_for_more_than_the_threshold() -> None:
    """Hysteresis: a settled split ignores a predicted gain under `threshold` (5 %) and answers
    a real change of speed, then settles again."""
    b = Balancer(global_batch=1000, replicas=2, warmup=0)
    _simulate(b, [1e-3, 2e-3], [0.0, 0.0], chunks=3)
    assert b.sizes == [667, 333] and not b.moving
    _simulate(b, [1e-3, 1.9e-3], [0.0, 0.0], chunks=4)  # ~3 % predicted gain: stays
    assert b.sizes == [667, 333] and b.changes == 1
    splits = _simulate(b, [1e-3, 1e-3], [0.0, 0.0], chunks=8)  # replica 1 back to full speed
    # back to within 1 % of even (the smoothed rates trail the change) and settled
    assert abs(splits[-1][0] - 500) <= 5 and splits[-1] == splits[-3] and not b.moving, splits
    assert b.changes >= 3


def test_equal_replicas_with_noise_keep_the_even_split() -> None:
    """Within the threshold (5 % predicted gain) the split stays, so timing noise on equal
    workers does not reshuffle the batches."""
    b = Balancer(global_batch=64, replicas=2, warmup=0)
    for i, (t0, t1) in enumerate([(1.0, 1.03), (1.02, 1.0), (1.0, 1.04)]):
        assert not b.observe(i, [t0, t1], [320, 320])
    assert b.sizes == [32, 32] and b.changes == 0


def test_balancer_refuses_a_batch_smaller_than_the_replicas() -> None:
    with pytest.raises(ValueError, match="batch_size=1, replicas=2"):
        Balancer(global_batch=1, replicas=2)


def test_chunks_start_at_one_step_and_double_to_the_configured_length() -> None:
    """The unmeasured warm-up chunk is one step and the first measured one two, so the split
    can move after three steps instead of after two full chunks (40 steps at 20 a chunk)."""
    b = Balancer(global_batch=96, replicas=2)
    caps = []
    for step in range(8):
        caps.append(b.chunk_cap(20))
        b.observe(step, [0.5, 0.5], [48, 48])
    assert caps == [1, 2, 4, 8, 16, 20, 20, 20]
    assert Balancer(global_batch=96, replicas=2).chunk_cap(1) == 1
