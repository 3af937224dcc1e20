"""Evaluation split over the workers of a multi-worker mirrored job, as Keras' `evaluate` does.

Every worker used to evaluate the whole eval split at each epoch end, and the next step's
collective then waited for the slowest worker's whole evaluation: at 2 workers that is twice
the work a shard each costs, and with one worker slowed (the straggler `balance: auto` is for)
the full evaluation at its pace was a fixed cost per epoch that no split of the training rows
could shorten (Baton's CNN: ~11 s an epoch on a half-speed core for 16,384 eval rows).

Here worker `i` of `n` evaluates every n-th batch of the split (`Dataset.shard` on batches,
as Keras' auto-sharding by data does), and one all-reduce then sums what each worker counted:
the loss/correct/example totals and every eval metric's state variables. Keras declares how a
metric's variables combine across replicas (`variable.aggregation`); its metrics' variables
(Mean's total and count, AUC's and Precision's confusion counts, MeanIoU's matrix, ...) are
all "sum", so the merged state is the state one worker would have reached on the whole split,
up to the order of float sums. A metric with any other aggregation keeps the old behaviour:
every worker evaluates the whole split.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


def worker_position(strategy: Any) -> tuple[int, int]:
    """(workers, this worker's index) of a multi-worker mirrored strategy; (1, 0) otherwise.

    The index is the one MultiWorkerMirroredStrategy's input sharding uses: the chief first,
    then the workers in order.
    """
    import tensorflow as tf

    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return 1, 0
    resolver = strategy.cluster_resolver
    spec = resolver.cluster_spec().as_dict()
    chiefs = len(spec.get("chief", []))
    workers = chiefs + len(spec.get("worker", []))
    if resolver.task_type == "chief":
        return workers, 0
    return workers, chiefs + int(resolver.task_id)


def shardable(metrics: Sequence[Any]) -> bool:
    """Whether every metric's state merges by summing (see the module docstring).

    A metric that creates its variables on its first update (F1Score, R2Score) has none to
    judge beforehand, and a worker whose shard held no batch would then hold fewer variables
    than the others: such a metric is evaluated whole on every worker too.
    """
    return all(m.metric.variables and all(getattr(v, "aggregation", None) == "sum"
                                          for v in m.metric.variables) for m in metrics)


@dataclass
class ShardedEval:
    """Shards an eval dataset for this worker and merges the workers' counts after a pass.

    Made by `sharded_eval`, which returns None where there is nothing to shard (one worker) or
    a metric does not merge by summing.
    """

    strategy: Any
    workers: int
    index: int
    metrics: Sequence[Any]
    active: bool = True
    _merge: Any = None

    def shard(self, dataset: Any, batches: int) -> Any:
        """This worker's batches of the eval split (`batches` of them in all): every
        `workers`-th, from its index. A split of fewer batches than workers is left whole
        (every worker evaluates all of it and `merge` sums nothing)."""
        self.active = batches >= self.workers
        return dataset.shard(self.workers, self.index) if self.active else dataset

    def merge(self, totals: Any) -> Any:
        """The totals summed over the workers; the metrics' variables set to their sums."""
        import tensorflow as tf

        if not self.active:
            return totals
        variables = [v for m in self.metrics for v in m.metric.variables]
        if self._merge is None:
            self._merge = self._make_merge(tf)
        flat = tf.concat([tf.reshape(tf.cast(totals, tf.float32), [-1])]
                         + [tf.reshape(tf.cast(v.value, tf.float32), [-1]) for v in variables], 0)
        summed = self._merge(flat)
        n = int(tf.size(totals))
        offset = n
        for v in variables:
            size = int(tf.size(v.value))
            part = tf.reshape(summed[offset:offset + size], v.shape)
            v.assign(tf.cast(part, v.dtype))
            offset += size
        return summed[:n]

    def _make_merge(self, tf: Any) -> Any:
        strategy = self.strategy
        local = max(1, strategy.num_replicas_in_sync // self.workers)

        def mine(values: Any) -> Any:  # one replica per worker contributes its counts
            rid = tf.distribute.get_replica_context().replica_id_in_sync_group
            return tf.where(tf.equal(rid % local, 0), values, tf.zeros_like(values))

        @tf.function
        def merge(values: Any) -> Any:
            per_replica = strategy.run(mine, args=(values,))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

        return merge


def sharded_eval(strategy: Any, metrics: Sequence[Any]) -> ShardedEval | None:
    """A ShardedEval for a multi-worker mirrored job whose metrics merge; else None."""
    workers, index = worker_position(strategy)
    if workers < 2 or not shardable(metrics):
        return None
    return ShardedEval(strategy, workers, index, metrics)
