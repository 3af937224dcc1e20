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


def test_a_multi_worker_strategy_without_tf_config_is_one_worker() -> None:
    """`--workers 1` under multi_worker_mirrored runs in process, with no TF_CONFIG: its
    resolver has no task type (a TypeError on `int(None)` once ended such a run)."""
    import tensorflow as tf
    from tensorflow.python.distribute.cluster_resolver import SimpleClusterResolver

    def strategy_with(resolver):  # noqa: ANN001, ANN202 - no collectives are started
        class Resolved(tf.distribute.MultiWorkerMirroredStrategy):
            def __init__(self) -> None:
                """No collectives start: the test asks only for the resolver."""

            cluster_resolver = property(lambda self: resolver)

        return Resolved()

    alone = SimpleClusterResolver(tf.train.ClusterSpec({}))
    assert worker_position(strategy_with(alone)) == (1, 0)
    two = tf.train.ClusterSpec({"chief": ["a:1"], "worker": ["b:1"]})
    assert worker_position(strategy_with(
        SimpleClusterResolver(two, task_type="worker", task_id=0))) == (2, 1)
    assert worker_position(strategy_with(
        SimpleClusterResolver(two, task_type="chief", task_id=0))) == (2, 0)


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


def test_each_worker_takes_its_run_equal_or_by_the_balancers_split() -> None:
    first = ShardedEval(strategy=None, workers=2, index=0, metrics=[])
    second = ShardedEval(strategy=None, workers=2, index=1, metrics=[])
    assert first.part(5) == (0, 2) and second.part(5) == (2, 5)  # disjoint, all 5 batches
    assert first.active
    # balance: auto gave worker:0 three quarters of the rows: it evaluates three quarters
    assert first.part(8, [0, 768, 1024]) == (0, 6) and second.part(8, [0, 768, 1024]) == (6, 8)
    # two replicas per worker: a worker's rows are its replicas' together
    assert second.part(10, [0, 100, 200, 300, 400]) == (5, 10)
    short = ShardedEval(strategy=None, workers=2, index=1, metrics=[])
    assert short.part(1) is None and not short.active  # fewer batches than workers: whole
    totals = np.array([1.0, 2.0, 3.0], np.float32)
    assert short.merge(totals) is totals  # every worker counted the whole split: no sum


def test_a_part_of_the_split_is_evaluated_and_the_rest_read_past() -> None:
    import tensorflow as tf

    from baton.graphs import models
    from baton.graphs.eval_step import make_eval_fn
    from baton.graphs.synthetic import synthetic_dataset, synthetic_spec

    spec = synthetic_spec(3, (), 2)
    model = models.build_model("mlp", spec, seed=1)
    data = synthetic_dataset(spec, 40, 8)  # 5 batches of 8
    evaluate = make_eval_fn(model, spec)
    whole = evaluate(data).numpy()
    head, tail = evaluate(data, (0, 2)).numpy(), evaluate(data, (2, 5)).numpy()
    assert head[2] == 16 and tail[2] == 24
    np.testing.assert_allclose(head + tail, whole, rtol=1e-5)
    again = evaluate(data).numpy()  # the persistent iterator is back at the split's start
    np.testing.assert_allclose(again, whole, rtol=1e-6)
    assert tf.is_tensor(evaluate(data, (3, 3))) and evaluate(data, (3, 3)).numpy()[2] == 0
