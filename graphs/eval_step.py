"""The evaluation: one graph over a whole (finite) eval split, or over part of it.

It runs outside `strategy.run`: every task can evaluate its own copy (or its part, under
strategies.eval_shards) without a collective. Its totals are graphs.totals' first three.
"""

from __future__ import annotations

from typing import Any

from baton.graphs.feature_spec import FeatureSpec
from baton.graphs.totals import correct_count, loss_per_example


def make_eval_fn(model: Any, spec: FeatureSpec, loss_fn: Any = None, metrics: Any = (),
                 executor: str | None = None) -> Any:
    """A `tf.function(dataset) -> [loss_sum, correct, examples]` over a whole (finite) dataset.

    It runs outside `strategy.run` on purpose: every task can evaluate its own copy without a
    collective, and the chief alone records the result. `loss_fn` as in `make_train_chunk`;
    `metrics` (graphs.objectives.EvalMetric) are updated on every batch: reset them before a
    call and read them after. `executor`: graphs.executor.decide's choice (None: TensorFlow's
    default executor); the trainer passes the train chunk's.
    """
    import tensorflow as tf

    from baton.graphs.executor import on_executor

    task = spec.label.task
    per_example = loss_fn or (lambda labels, logits: loss_per_example(task, labels, logits))

    @tf.autograph.experimental.do_not_convert  # straight-line, as in make_train_chunk
    def eval_batch(features: Any, labels: Any) -> Any:
        logits = model(features, training=False)
        per_ex = per_example(labels, logits)
        for metric in metrics:
            metric.update(labels, logits)
        return tf.stack(
            [
                tf.reduce_sum(per_ex),
                correct_count(task, labels, logits),
                tf.cast(tf.shape(per_ex)[0], tf.float32),
            ]
        )

    @tf.function
    def over(iterator: Any, batches: Any) -> Any:  # the next `batches` batches
        totals = tf.zeros([3], tf.float32)
        for _ in tf.range(batches):
            features, labels = next(iterator)
            totals += eval_batch(features, labels)
        return totals

    @tf.function
    def over_part(iterator: Any, batches: Any, lo: Any, hi: Any) -> Any:
        """The next `batches` batches, evaluating only those numbered [lo, hi) (one worker's
        part of a split shared out by strategies.eval_shards); the others are read past."""
        totals = tf.zeros([3], tf.float32)
        for k in tf.range(batches):
            features, labels = next(iterator)
            if k >= lo and k < hi:
                totals += eval_batch(features, labels)
        return totals

    over = on_executor(over, executor)
    over_part = on_executor(over_part, executor)
    kept: dict[str, Any] = {}

    def evaluate(dataset: Any, part: tuple[int, int] | None = None,
                 batches: int | None = None) -> Any:
        # The iterator is made eagerly and looped over in-graph (as Keras' evaluate hands its
        # iterator to the test function): a dataset iterated inside the tf.function took ~5x
        # as long here (4,096 examples of a small model: 63 ms against 13 ms), per eval.
        # Every evaluation of one dataset reads its batch count (counted once, on the input
        # pipeline alone) from one iterator over `dataset.repeat()`: the same batches in the
        # same order, from a pipeline started once that prefetches the next pass while
        # training runs. A fresh iterator per epoch restarted the pipeline each time, and a
        # loop until the iterator ends pays a conditional per batch: 6.5 ms per eval of the
        # own-model bench at batch 256, 3.5 ms this way.
        # `part`: evaluate only the batches numbered [lo, hi) of the pass. `batches`: the
        # dataset's batch count where the caller has counted it already (a pass saved).
        if kept.get("dataset") is not dataset:
            n = count_batches(dataset) if batches is None else batches
            kept.update(dataset=dataset, batches=tf.constant(n, tf.int32),
                        iterator=iter(dataset.repeat()))
        if part is not None:
            return over_part(kept["iterator"], kept["batches"],
                             tf.constant(part[0], tf.int32), tf.constant(part[1], tf.int32))
        return over(kept["iterator"], kept["batches"])

    return evaluate


def count_batches(dataset: Any) -> int:
    """Elements in a finite `dataset`: its cardinality when tf.data knows it, else counted."""
    import tensorflow as tf

    n = int(dataset.cardinality())
    if n == tf.data.INFINITE_CARDINALITY:
        raise ValueError(f"the eval dataset must be finite. Received: {dataset.element_spec}")
    if n >= 0:
        return n
    return int(dataset.reduce(tf.constant(0, tf.int64), lambda count, _: count + 1))
