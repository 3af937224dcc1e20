"""Graph-mode train and eval steps, several steps per call.

Python overhead per step (dispatching a tf.function, reading a result) is what makes a custom loop
slower than it needs to be on small models. `make_train_chunk` runs `n` optimizer steps inside one
graph (a `tf.range` loop around `strategy.run`, the `steps_per_execution` idea), so the Python
side only wakes up every `n` steps: for progress, summaries, backups and fault checks.

The same chunk function serves every strategy. Under one-device, mirrored and multi-worker
mirrored strategies it is called directly; under the parameter-server strategy the coordinator
schedules it on workers (`ClusterCoordinator.schedule`). It returns the chunk's totals reduced over
replicas: `[loss_sum, correct, examples, stop_flag]`. `stop_flag` carries a preemption request
from any task to all tasks through the same all-reduce as the gradients, so every worker agrees
on the step at which to checkpoint and stop, without an extra collective.

Under mirrored and multi-worker mirrored strategies the step reduces its gradients and its totals
itself, in one collective per step (graphs.gradient_sync, which also has the fp16 all-reduce).

Beside it: how the step is compiled (graphs.step_options), what it counts (graphs.totals), the
evaluation (graphs.eval_step).
"""

from __future__ import annotations

from typing import Any

from baton.graphs.feature_spec import FeatureSpec
from baton.graphs.gradient_sync import (
    all_reduce_step,
    densify_small,
    fuses_reduction,
    install_fp16_allreduce,
    skip_optimizer_allreduce,
)
from baton.graphs.step_options import StepOptions, one_replica, resolve_jit_scope
from baton.graphs.totals import TOTALS, correct_count, loss_per_example


def make_train_chunk(
    model: Any,
    optimizer: Any,
    spec: FeatureSpec,
    global_batch_size: int,
    strategy: Any = None,
    options: StepOptions | None = None,
    loss_fn: Any = None,
    balance: bool = False,
    take_rows: Any = None,
    max_steps: int | None = None,
) -> Any:
    """A `tf.function(iterator, n_steps, stop_flag) -> totals[4]` running `n_steps` steps in-graph.

    Args:
        model: a Keras 3 model created in `strategy.scope()`.
        optimizer: a Keras 3 optimizer, built on `model.trainable_variables` in the same scope.
        spec: the feature spec (for the task: classification or regression).
        global_batch_size: examples per step over all replicas; the loss is averaged over it so
            that summing gradients over replicas gives the mean gradient.
        strategy: a tf.distribute strategy (default: the current one).
        options: XLA and fp16 all-reduce switches.
        loss_fn: `(labels, logits) -> per-example loss [B]` (graphs.objectives.make_loss);
            None: `loss_per_example`, softmax cross-entropy or squared error.
        balance: uneven per-replica batches (strategies.balance). The chunk is then
            `(iterator, n_steps, stop_flag, bounds) -> totals[4 + 2R]`: every replica receives
            the whole global batch and trains on rows `[bounds[r], bounds[r+1])` of it, and the
            totals end with each replica's summed forward-backward seconds (R values) and rows
            (R values), reduced with the rest so every task sees every replica's speed.
        take_rows: with `balance`, `(element, lo, hi) -> (features, labels)` giving a replica's
            rows of one iterator element (graphs.row_table: the element is a global batch of
            row indices and only the replica's rows are gathered). None: the element is the
            global batch itself and the rows are sliced out of it.
        max_steps: the most steps a call runs (the plan's `steps_per_execution`). Under XLA's
            `chunk` scope a shorter chunk's batches are padded to it, so that every call runs
            the one compiled program; None compiles once per chunk length.
    """
    import tensorflow as tf

    from baton.graphs.executor import decide, on_executor

    options = options or StepOptions()
    strategy = strategy or tf.distribute.get_strategy()
    task = spec.label.task
    # One collective per step carries the gradients and the totals (graphs.gradient_sync)
    # where the strategy all-reduces in a replica context; elsewhere the optimizer reduces.
    fused = fuses_reduction(strategy, optimizer)
    if fused:
        skip_optimizer_allreduce(optimizer)
    elif options.fp16_allreduce:
        install_fp16_allreduce(optimizer)
    scales_loss = hasattr(optimizer, "scale_loss") and "LossScale" in type(optimizer).__name__

    replicas = strategy.num_replicas_in_sync
    scope = resolve_jit_scope(options, strategy, model, global_batch_size // replicas)
    if balance and scope in ("chunk", "step"):
        scope = "gradients"  # the timestamps around the gradients need the host clock
    if scope == "chunk" and not one_replica(strategy):
        raise ValueError(
            "jit_scope 'chunk' compiles one replica's steps and needs the one-device or the "
            f"default strategy. Received: jit_scope='chunk' under {type(strategy).__name__} "
            f"with {strategy.num_replicas_in_sync} replicas"
        )
    executor = decide(options.executor, strategy, model, global_batch_size // replicas)
    per_example = loss_fn or (lambda labels, logits: loss_per_example(task, labels, logits))

    def forward_backward(features: Any, labels: Any) -> Any:
        with tf.GradientTape() as tape:
            logits = model(features, training=True)
            per_ex = per_example(labels, logits)
            loss = tf.nn.compute_average_loss(per_ex, global_batch_size=global_batch_size)
            if model.losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
            scaled = optimizer.scale_loss(loss) if scales_loss else loss
        sources, spans = _gradient_sources(model.trainable_variables)
        grads = _regroup(tape.gradient(scaled, sources), spans)
        n = tf.cast(tf.shape(per_ex)[0], tf.float32)
        return grads, tf.stack([tf.reduce_sum(per_ex), correct_count(task, labels, logits), n])

    if scope == "gradients":
        forward_backward = tf.function(forward_backward, jit_compile=True)

    def sync(grads: list[Any], totals: Any) -> tuple[list[Any], Any]:
        """Fused: the gradients and the totals summed over replicas, in one collective.
        Otherwise as they are (the optimizer and `collect` reduce them)."""
        if not fused:
            return grads, totals
        grads = densify_small(grads, model.trainable_variables, global_batch_size)
        return all_reduce_step(grads, totals, options.fp16_allreduce)

    def collect(per_replica: Any) -> Any:
        if fused:  # every replica holds the same sums
            return strategy.experimental_local_results(per_replica)[0]
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    def replica_step(batch: Any, stop_flag: Any) -> Any:
        features, labels = batch
        grads, stats = forward_backward(features, labels)
        grads, totals = sync(grads, tf.concat([stats, tf.reshape(stop_flag, [1])], axis=0))
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return totals

    def slice_rows(batch: Any, lo: Any, hi: Any) -> Any:
        from baton.graphs.feature_spec import slice_rows as rows

        features, labels = batch
        return {k: rows(v, lo, hi) for k, v in features.items()}, labels[lo:hi]

    take_rows = take_rows or slice_rows

    def balanced_step(batch: Any, stop_flag: Any, bounds: Any) -> Any:
        rid = tf.distribute.get_replica_context().replica_id_in_sync_group
        lo, hi = bounds[rid], bounds[rid + 1]
        # The clock starts once this step may compute: its element is here and the previous
        # update (which waits for every replica's gradients) has landed in the variables,
        # read here in the order the forward pass reads them; so waiting for slower
        # replicas is never counted as this replica's work. Taking this replica's rows
        # (a slice, or a gather of its rows) is counted: it grows with the rows. The clock is
        # read before any of that runs and after all of it, before the gradients go to the
        # all-reduce (control edges both ways: the executor would otherwise read it whenever
        # a thread is free).
        weights = [tf.convert_to_tensor(v.value) for v in model.trainable_variables]
        began = _host_clock([*tf.nest.flatten(batch), *weights])
        with tf.control_dependencies([began]):
            features, labels = take_rows(batch, lo, hi)
            features = {k: tf.identity(v) for k, v in features.items()}
            labels = tf.identity(labels)
        grads, stats = forward_backward(features, labels)
        ended = _host_clock([g for g in grads if g is not None] + [stats])
        with tf.control_dependencies([ended]):
            grads = [None if g is None else tf.identity(g) for g in grads]
        took = tf.cast(ended - began, tf.float32)
        mine = tf.one_hot(rid, replicas, dtype=tf.float32)
        grads, totals = sync(grads, tf.concat(
            [stats, tf.reshape(stop_flag, [1]), mine * took, mine * stats[2]], 0))
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return totals

    # Not converted by AutoGraph, as Keras 3's own `one_step_on_data`: the step is straight-line
    # code, and converting the model's and optimizer's Python took most of the first call.
    replica_step = tf.autograph.experimental.do_not_convert(replica_step)
    step = tf.function(replica_step, jit_compile=True) if scope == "step" else replica_step
    if scope == "chunk":
        return on_executor(_xla_chunk(strategy, replica_step, collect, max_steps), executor)

    @tf.function
    def train_chunk(iterator: Any, n_steps: Any, stop_flag: Any) -> Any:
        totals = tf.zeros([len(TOTALS)], tf.float32)
        for _ in tf.range(n_steps):
            totals += collect(strategy.run(step, args=(next(iterator), stop_flag)))
        return totals

    if not balance:
        return on_executor(train_chunk, executor)
    uneven = tf.autograph.experimental.do_not_convert(balanced_step)

    @tf.function
    def balanced_chunk(iterator: Any, n_steps: Any, stop_flag: Any, bounds: Any) -> Any:
        totals = tf.zeros([len(TOTALS) + 2 * replicas], tf.float32)
        for _ in tf.range(n_steps):
            totals += collect(strategy.run(uneven, args=(next(iterator), stop_flag, bounds)))
        return totals

    return on_executor(balanced_chunk, executor)


def _xla_chunk(strategy: Any, replica_step: Any, collect: Any,
               max_steps: int | None = None) -> Any:
    """The chunk with every step inside one XLA program (`jit_scope: chunk`, one replica).

    Per-step XLA (`step`) leaves the loop in TensorFlow's executor: every step enters and leaves
    an XLA cluster, and on a small model that crossing costs about what XLA's fusion saves (the
    own-model example, batch 256: 7.8-9.0 ms a 20-step chunk against 8.0-9.3 ms without XLA).
    Here the chunk first reads its `n_steps` batches from the iterator into TensorArrays and
    hands them, stacked, to one XLA function whose loop runs the steps: XLA fuses the forward,
    backward and update across the whole step and the loop never returns to the executor.

    The stack is padded to `max_steps` batches (zeros past `n_steps`, never read) and the loop
    runs `n_steps` of them, so every chunk of a run (an epoch's tail, a chunk cut short by
    `backup_every`, a resumed run's first) runs the one program compiled at the first call;
    without `max_steps` each new chunk length compiles once more (~1 s on 2 cores). The
    batches are held at once: `max_steps` x the per-replica batch, two or three times over
    while they are stacked and handed to XLA (20 x 256 rows of the own-model example are
    ~0.2 MB; 20 x 256 images of 64x64x3, ~250 MB).
    """
    import tensorflow as tf

    @tf.function(jit_compile=True, autograph=False)
    def replica_steps(batches: Any, n_steps: Any, stop_flag: Any) -> Any:
        # A while loop on `n_steps`, not `tf.range(n_steps)`: XLA needs a range's bounds at
        # compile time, which would make every chunk length a program of its own again.
        def step(i: Any, totals: Any) -> tuple[Any, Any]:
            batch = tf.nest.map_structure(lambda t: t[i], batches)
            return i + 1, totals + collect(strategy.run(replica_step, args=(batch, stop_flag)))

        return tf.while_loop(lambda i, _: i < n_steps, step,
                             (tf.constant(0), tf.zeros([len(TOTALS)], tf.float32)))[1]

    def padded(stacked: Any, n_steps: Any) -> Any:
        if max_steps is None:
            return stacked
        # a longer chunk than promised is not padded (it compiles a program of its own)
        pad = [[0, tf.maximum(max_steps - n_steps, 0)]] + [[0, 0]] * (stacked.shape.rank - 1)
        return tf.pad(stacked, pad)

    @tf.function
    def train_chunk(iterator: Any, n_steps: Any, stop_flag: Any) -> Any:
        arrays = tf.nest.map_structure(
            lambda s: tf.TensorArray(s.dtype, size=n_steps, element_shape=s.shape),
            iterator.element_spec)
        for i in tf.range(n_steps):
            arrays = tf.nest.map_structure(lambda a, t, i=i: a.write(i, t), arrays,
                                           next(iterator))
        batches = tf.nest.map_structure(lambda a: padded(a.stack(), n_steps), arrays)
        return replica_steps(batches, n_steps, stop_flag)

    return train_chunk


def _host_clock(after: list[Any]) -> Any:
    """This process's monotonic clock (seconds, float64), read once `after` are computed.

    `tf.timestamp` would do, but TensorFlow refuses it under op determinism (which Baton turns
    on by default), so the clock is read through a py_function: it runs in this task's own
    process, costs microseconds, and does not change any value the step computes.
    """
    import time

    import tensorflow as tf

    with tf.control_dependencies(after):
        return tf.py_function(lambda: time.perf_counter(), [], tf.float64)


def _gradient_sources(variables: list[Any]) -> tuple[list[Any], list[int]]:
    """Tape sources for Keras variables; a variable sharded over PS tasks contributes its shards.

    Under the parameter-server strategy a partitioner turns a large variable (an embedding table)
    into a ShardedVariable, which Keras 3 wraps but `GradientTape` cannot differentiate against
    directly. Differentiating against the shards and concatenating the shard gradients gives
    the gradient of the whole variable, which the optimizer then applies shard by shard.
    """
    sources: list[Any] = []
    spans: list[int] = []
    for v in variables:
        inner: Any = getattr(v, "_value", None)
        if inner is not None and type(inner).__name__ == "ShardedVariable":
            spans.append(len(inner.variables))
            sources.extend(inner.variables)
        else:
            spans.append(0)
            sources.append(v)
    return sources, spans


def _regroup(grads: list[Any], spans: list[int]) -> list[Any]:
    import tensorflow as tf

    out, i = [], 0
    for n in spans:
        if n == 0:
            out.append(grads[i])
            i += 1
        else:
            out.append(tf.concat([tf.convert_to_tensor(g) for g in grads[i : i + n]], axis=0))
            i += n
    return out
