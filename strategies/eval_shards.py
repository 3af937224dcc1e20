"""Evaluation split over the workers of a multi-worker mirrored job, as Keras' `evaluate` does.

Every worker used to evaluate the whole eval split at each epoch end, and the next step's
collective then waited for the slowest worker's whole evaluation: at 2 workers that is twice
the work a shard each costs, and with one worker slowed (the straggler `balance: auto` is for)
the full evaluation at its pace was a fixed cost per epoch that no split of the training rows
could shorten (Baton's CNN: ~11 s an epoch on a half-speed core for 16,384 eval rows).

Here each worker evaluates its own run of the split's batches and one all-reduce then sums what
each worker counted (Keras' `evaluate` shards the same way under a multi-worker strategy):
the loss/correct/example totals and every eval metric's state variables. Keras declares how a
metric's variables combine across replicas (`variable.aggregation`); its metrics' variables
(Mean's total and count, AUC's and Precision's confusion counts, MeanIoU's matrix, ...) are
all "sum", so the merged state is the state one worker would have reached on the whole split,
up to the order of float sums. A metric with any other aggregation keeps the old behaviour:
every worker evaluates the whole split.

The runs are equal, or under `balance: auto` in proportion to the training split the workers
last agreed on (strategies.balance: measured speed), so a slowed worker evaluates less and the
evaluation ends on every worker at about the same time. Every worker reads the whole split and
evaluates only its run: a tf.data shard or skip reads the rows it drops as well, and one
persistent iterator keeps the pipeline from restarting each epoch.
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
    if resolver.task_type is None:  # no TF_CONFIG: one local worker (`--workers 1`)
        return 1, 0
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
    """This worker's run of the eval split, and the merge of the workers' counts after a pass.

    Made by `sharded_eval`, which returns None where there is nothing to shard (one worker) or
    a metric does not merge by summing.
    """

    strategy: Any
    workers: int
    index: int
    metrics: Sequence[Any]
    active: bool = True
    _merge: Any = None

    def part(self, batches: int, bounds: Sequence[int] | None = None) -> tuple[int, int] | None:
        """This worker's run `[lo, hi)` of the split's `batches` batches, or None: the whole split.

        `bounds`: the balancer's row bounds per replica (`[0, b1, ..., global_batch]`); the
        runs are then in proportion to each worker's rows. None: equal runs. A split of fewer
        batches than workers is evaluated whole by every worker (and `merge` sums nothing).
        """
        self.active = batches >= self.workers
        if not self.active:
            return None
        if not bounds:
            return batches * self.index // self.workers, batches * (self.index + 1) // self.workers
        local = (len(bounds) - 1) // self.workers  # replicas per worker
        total = bounds[-1]
        lo, hi = bounds[self.index * local], bounds[(self.index + 1) * local]
        return batches * lo // total, batches * hi // total

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
