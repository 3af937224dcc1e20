"""How a synchronous step's gradients and totals cross replicas: one all-reduce per step.

Left to Keras and tf.distribute, a multi-worker-mirrored step of a model with embeddings made
nine collectives (measured with the profiler on bench_balance.py's MLP, two workers): Keras'
optimizer all-reduces the dense gradients in one pack, each embedding's sparse gradient
(`IndexedSlices`) is all-gathered in a conditional pair of gathers plus a gather of sizes, and
the step's totals (loss, correct, examples, the stop flag) went through a separate
`strategy.reduce`. Every collective is a round trip between processes that, on a busy node,
waits for the peer's gRPC threads to be scheduled; those trips, not the bytes, were most of
what a step spent outside its forward and backward pass.

So, under strategies that all-reduce in a replica context (mirrored and multi-worker
mirrored, more than one replica), the step does its own reduction:

- a sparse gradient of a table with no more rows than the global batch becomes dense (its
  dense form is no larger than the slices an all-gather moves: at least one row per example
  of the global batch), so it joins the dense pack; larger tables keep their sparse path;
- the gradients and the totals go in one `all_reduce` call (one pack per dtype), so one
  collective per step carries both;
- the optimizer is told not to all-reduce again (`skip_optimizer_allreduce`: Keras 3's TF
  optimizer sums gradients across replicas in `_all_reduce_sum_gradients`, replaced here on
  this optimizer instance only; the rest of Keras' update is untouched).

The update is the same sum of the same per-replica gradients; clipping (`clipnorm`) and a loss
scale optimizer's finite check now see the all-reduced gradient, as they would on one device,
instead of each replica's own part.

fp16 all-reduce: gradients are cast to float16 for the cross-replica sum and back to float32
afterwards, halving bytes on the wire at a small precision cost (the sum is over a few
workers); the totals stay float32 (a second pack).
"""

from __future__ import annotations

from typing import Any


def install_fp16_allreduce(optimizer: Any) -> None:
    """Make a Keras 3 optimizer all-reduce gradients in float16 (half the bytes on the wire).

    Used where the step leaves the all-reduce to the optimizer (`fuses_reduction` False).
    Keras 3's TF optimizer sums gradients across replicas in `_all_reduce_sum_gradients`; this
    replaces that one hook on this optimizer instance only, keeping the rest of Keras (variable
    updates via `extended.update`, iterations, learning-rate schedules) unchanged.
    """
    import tensorflow as tf

    def all_reduce_fp16(grads_and_vars: Any) -> Any:
        ctx = tf.distribute.get_replica_context()
        pairs = list(grads_and_vars)
        if not ctx or ctx.num_replicas_in_sync == 1:
            return pairs
        idx = [i for i, (g, _) in enumerate(pairs) if g is not None]
        if not idx:
            return pairs
        grads = [tf.cast(pairs[i][0], tf.float16) for i in idx]
        reduced = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        out = list(pairs)
        for i, g in zip(idx, reduced, strict=True):
            out[i] = (tf.cast(g, pairs[i][0].dtype), pairs[i][1])
        return out

    optimizer._all_reduce_sum_gradients = all_reduce_fp16


def fuses_reduction(strategy: Any, optimizer: Any) -> bool:
    """True when the step should reduce gradients and totals itself, in one collective.

    Mirrored and multi-worker mirrored strategies with more than one replica, and an optimizer
    with Keras 3's all-reduce hook. The parameter-server strategy (its updates are remote
    variable writes) and single-replica strategies keep the optimizer's own path.
    """
    import tensorflow as tf

    mirrored = (tf.distribute.MirroredStrategy, tf.distribute.MultiWorkerMirroredStrategy)
    return (
        isinstance(strategy, mirrored)
        and strategy.num_replicas_in_sync > 1
        and hasattr(optimizer, "_all_reduce_sum_gradients")
    )


def skip_optimizer_allreduce(optimizer: Any) -> None:
    """The optimizer (and a loss scale optimizer's inner one) applies gradients as given: the
    step has already all-reduced them."""

    def as_given(grads_and_vars: Any) -> Any:
        return list(grads_and_vars)

    for opt in (optimizer, getattr(optimizer, "inner_optimizer", None)):
        if opt is not None and hasattr(opt, "_all_reduce_sum_gradients"):
            opt._all_reduce_sum_gradients = as_given


def densify_small(grads: list[Any], variables: list[Any], max_rows: int) -> list[Any]:
    """Sparse gradients of tables with at most `max_rows` rows, as dense tensors."""
    import tensorflow as tf

    out = []
    for g, v in zip(grads, variables, strict=True):
        rows = v.shape[0] if len(v.shape) else None
        if isinstance(g, tf.IndexedSlices) and rows is not None and rows <= max_rows:
            g = tf.convert_to_tensor(g)
        out.append(g)
    return out


def all_reduce_step(grads: list[Any], totals: Any, fp16: bool = False) -> tuple[list[Any], Any]:
    """Sum `grads` (None kept in place) and the step's `totals` vector over the replicas.

    One `all_reduce` call per dtype (tf.distribute concatenates a call's dense tensors into
    one collective, so they must share a dtype): float32 gradients and the totals travel
    together; a sparse gradient left is all-gathered beside them. With `fp16` the gradients
    travel as float16 and come back in their own dtype.
    """
    import tensorflow as tf

    ctx = tf.distribute.get_replica_context()
    sent = [
        None if g is None else tf.cast(g, tf.float16) if fp16 and g.dtype.is_floating else g
        for g in grads
    ]
    sent.append(totals)
    groups: dict[Any, list[int]] = {}
    for i, g in enumerate(sent):
        if g is not None:
            groups.setdefault(g.dtype, []).append(i)
    reduced: list[Any] = [None] * len(sent)
    for idx in groups.values():
        for i, r in zip(idx, ctx.all_reduce(tf.distribute.ReduceOp.SUM, [sent[i] for i in idx]),
                        strict=True):
            reduced[i] = r
    out = [
        None if g is None else r if r.dtype == g.dtype else tf.cast(r, g.dtype)
        for g, r in zip(grads, reduced[:-1], strict=True)
    ]
    return out, reduced[-1]
