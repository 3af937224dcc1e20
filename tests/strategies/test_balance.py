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


def test_balancer_moves_rows_to_the_fast_replica_and_keeps_the_global_batch() -> None:
    b = Balancer(global_batch=96, replicas=2, record_every=1000)
    assert b.bounds() == [0, 48, 96]
    assert not b.observe(10, [0.5, 0.5], [480, 480])  # warm-up chunk: ignored

    def chunk(step: int) -> bool:  # replica 1 takes twice as long per row: 960 rows/s vs 480
        rows = [10 * s for s in b.sizes]
        return b.observe(step, [rows[0] / 960, rows[1] / 480], rows)

    assert chunk(20)
    assert b.sizes == [56, 40]  # halfway to the speed-proportional [64, 32]
    moves = [chunk(30 + 10 * i) for i in range(6)]
    # it holds once the next move would gain less than the 5 % threshold (2.8 % here)
    assert b.sizes == [62, 34] and sum(b.sizes) == 96 and b.bounds() == [0, 62, 96]
    assert moves == [True, True, False, False, False, False], moves
    assert b.changes == 3 and b.rates == [960.0, 480.0]
    events = [h["event"] for h in b.history]
    assert events == ["rebalanced"] * 3, b.history
    assert b.history[1]["batch"] == [60, 36] and b.history[1]["rows_per_sec"] == [960.0, 480.0]
    summary = b.summary()
    assert summary["final_batch"] == [62, 34] and summary["mode"] == "auto"


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
