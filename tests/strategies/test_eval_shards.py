"""strategies.eval_shards: which evaluations are split over the workers, and how a split is cut.
(The merge itself runs on a real 2-worker cluster in test_own_model_clusters.py, whose recorded
eval figures must equal the whole split's.)"""

from __future__ import annotations

import keras
import numpy as np

from baton.graphs.objectives import EvalMetric
from baton.strategies.eval_shards import ShardedEval, shardable, sharded_eval, worker_position


def _metric(m) -> EvalMetric:  # noqa: ANN001
    return EvalMetric(m, one_hot=False, task="classification", num_classes=3)


def test_one_process_strategies_evaluate_the_whole_split() -> None:
    import tensorflow as tf

    strategy = tf.distribute.get_strategy()
    assert worker_position(strategy) == (1, 0)
    assert sharded_eval(strategy, []) is None


def test_metrics_whose_state_sums_are_shardable_the_others_are_not() -> None:
    assert shardable([_metric(keras.metrics.AUC()), _metric(keras.metrics.Mean())])
    assert shardable([])
    # F1Score makes its variables on its first update: nothing to judge, so evaluated whole
    assert not shardable([_metric(keras.metrics.F1Score())])

    class Odd(keras.metrics.Metric):
        def __init__(self) -> None:
            super().__init__(name="odd")
            self.last = self.add_variable((), initializer="zeros", aggregation="mean")

        def update_state(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
            self.last.assign(1.0)

        def result(self):  # noqa: ANN201
            return self.last

    assert not shardable([_metric(Odd())])


def test_each_worker_takes_every_nth_batch_and_a_short_split_stays_whole() -> None:
    import tensorflow as tf

    ds = tf.data.Dataset.range(5)
    second = ShardedEval(strategy=None, workers=2, index=1, metrics=[])
    assert [int(x) for x in second.shard(ds, 5)] == [1, 3]
    assert second.active
    first = ShardedEval(strategy=None, workers=2, index=0, metrics=[])
    assert [int(x) for x in first.shard(ds, 5)] == [0, 2, 4]
    short = ShardedEval(strategy=None, workers=2, index=1, metrics=[])
    assert [int(x) for x in short.shard(ds.take(1), 1)] == [0]
    assert not short.active
    totals = np.array([1.0, 2.0, 3.0], np.float32)
    assert short.merge(totals) is totals  # every worker counted the whole split: no sum
