"""The asynchronous driver: ParameterServerStrategy with a ClusterCoordinator on the chief.

The chief runs no training steps itself: it schedules chunks of `steps_per_execution` steps
(`graphs.steps.make_train_chunk`, the same function the synchronous driver uses) on whichever
worker is free, each worker reading its own shard through a per-worker dataset. Variables live on
the PS tasks, large ones sharded across them by the strategy's variable partitioner.

Fault tolerance comes from the coordinator: a closure whose worker dies is rescheduled on another
worker, and a restarted worker rejoins at the same address (the launcher restarts it); training
goes on without a restart. A dead PS makes `join` raise; the task exits with a retryable code and
the launcher restarts the group, which resumes from the chief's last checkpoint. The step count
is the coordinator's (closures scheduled and completed, saved in the checkpoint's state), so it
always follows the plan; because a closure can run twice when a worker dies mid-closure, more
updates than planned may be applied in that case (`optimizer_iterations` in train_info):
asynchronous training trades exactness for availability.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from typing import Any

from baton.errors import Preempted
from baton.graphs.program import compile_program
from baton.strategies.loop import DatasetFn, LoopCore, TaskRole, TrainResult
from baton.strategies.objectives import Objectives

# XLA compiles a function only if every variable it reads lives on the device that runs it; here
# the variables live on the PS tasks and the steps run on the workers ("Trying to access resource
# ... located in device /job:ps/..."). Feeding the values in instead would copy every embedding
# table to the worker at each step, the traffic row sharding on the PS exists to avoid.
PS_JIT_REFUSED = (
    "jit_compile is not supported with strategy parameter_server (XLA cannot read variables "
    "that live on the PS tasks); use multi_worker_mirrored, or set jit_compile: false. "
    "Received: jit_compile=True"
)


def train(
    strategy: Any,
    job: Any,
    role: TaskRole,
    build: Callable[[], tuple[Any, Any]],
    train_ds: DatasetFn,
    eval_ds: Callable[[], Any],
    objectives: Objectives | None = None,
    finite_split: Callable[[str], Any] | None = None,
) -> TrainResult:
    """Coordinate the job from the chief; returns when `epochs * steps_per_epoch` steps are done.

    Like the synchronous `trainer.train`, it is handed the model builder (called inside the
    strategy scope), the dataset functions (`task.build_fn`, `TrainingData.dataset_fns`) and the spec's
    loss, metrics and callbacks. Callbacks run on the coordinator, at every fetched closure and
    every epoch end; `model.stop_training` stops the scheduling, and training ends once the
    closures in flight have run. A non-finite loss stops the scheduling
    (graphs.nonfinite_guard), as in the synchronous loop.
    """
    import tensorflow as tf

    from baton.strategies import callbacks as cbs

    if job.settings.jit_compile:
        raise ValueError(PS_JIT_REFUSED)
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    spec = job.spec()
    # the coordinator alone writes the backup, on the training thread (a save may run
    # collectives on the PS tasks)
    core = LoopCore(strategy, build, spec, eval_ds, role, objectives, job.settings.on_nonfinite,
                    finite_split, writes_backup=True)
    program = compile_program(core.model, core.optimizer, spec, core.objectives.loss,
                              core.metrics, job.settings.batch_size, strategy)
    chunk, evaluate = program.chunk, program.evaluate
    model, optimizer = core.model, core.optimizer
    # The step is the coordinator's count of steps in closures that completed, kept in the
    # backup's state: `optimizer.iterations` is no count to resume from here, because Keras
    # increments it with a read-modify-write (`assign(iterations + 1)`) that concurrent workers
    # race on (it trails the steps run), and a closure re-run after a worker death adds to it.
    step = int(core.restored.get("step", optimizer.iterations.numpy()))
    resumed_from = step
    spe = job.steps_per_epoch()
    total = job.total_steps()

    # Each worker resumes roughly where it was: the closures ran on whichever worker was free,
    # so per-worker positions are not recorded; `step / workers` batches is their mean.
    skip = step // max(job_workers(strategy), 1)
    iterator = per_worker_iterator(coordinator, strategy, train_ds, skip=skip)
    guard = core.guard
    start = time.perf_counter()
    writer = tf.summary.create_file_writer(str(role.logs_dir)) if role.logs_dir else None
    state = cbs.LoopState(step, total, spe, job.settings.batch_size, core.history,
                          extra=lambda: {"step": state.step, "epoch_totals": core.epoch_totals})
    backups = cbs.Backups(core.backup, state)
    # the coordinator is the chief: it alone writes summaries, per epoch
    callbacks = cbs.loop_callbacks(
        model, state, backups, epochs=job.planned_epochs(), steps=spe, writer=writer,
        per_chunk_summaries=False, on_progress=role.on_progress,
        status_file=role.status_file, user=core.objectives.callbacks(), fault=role.my_fault,
    )

    # Closures in flight at once: enough to keep every worker busy, few enough that a SIGTERM
    # waits only for these (not for a whole epoch's worth) before the checkpoint.
    window = 2 * max(job_workers(strategy), 1)
    stopped = preempted = rolled_back = False
    core.begin(callbacks)
    while step < total and not stopped:
        epoch_end = min((step // spe + 1) * spe, total)
        scheduled = step
        pending: collections.deque[Any] = collections.deque()
        callbacks.on_epoch_begin(step // spe)
        i = -1
        while scheduled < epoch_end or pending:
            while scheduled < epoch_end and len(pending) < window and not stopped:
                n = min(job.settings.steps_per_execution, epoch_end - scheduled)
                pending.append(
                    coordinator.schedule(
                        chunk, args=(iterator, tf.constant(n, tf.int32), tf.constant(0.0))
                    )
                )
                scheduled += n
            if not pending:
                break
            i += 1
            totals = pending.popleft().fetch()  # blocks until it ran (maybe after a reschedule)
            core.add(totals)
            done = step + (i + 1) * job.settings.steps_per_execution
            state.step = min(done, epoch_end)
            first = max(step, state.step - job.settings.steps_per_execution)  # inside this epoch
            if not rolled_back and guard.chunk(totals[0], step // spe + 1, first, state.step):
                rolled_back = stopped = True  # the closures in flight finish, then training ends
            if role.stop.is_set():
                coordinator.join()  # every scheduled closure has run once it returns
                while pending:  # their chunks ran (join): their totals belong to the epoch
                    core.add(pending.popleft().fetch())
                step = state.step = scheduled
                if step < epoch_end:
                    backups.save()
                    raise Preempted(step=step)
                # The epoch is complete: its record and the epoch-end backup holding it first
                # (below); a backup at its last step without the record lost it from history.
                preempted = True
                break
            callbacks.on_train_batch_end((state.step - 1) % spe, program.metrics(totals))
            stopped = stopped or bool(getattr(model, "stop_training", False))
        coordinator.join()
        step = state.step = scheduled if stopped else epoch_end
        if rolled_back:  # every closure has run (join): the kept weights go back last
            guard.restore()
            break
        record = core.close_epoch(-(-step // spe), step,
                                  lambda: evaluate(core.eval_data).numpy())  # type: ignore[misc]
        if record is None:
            rolled_back = True
            break
        core.keep_epoch(record, callbacks)  # saves the backup
        if preempted:
            raise Preempted(step=step)
        stopped = stopped or bool(getattr(model, "stop_training", False))
    core.end(callbacks)
    return core.result(
        step=step, resumed_from=resumed_from, seconds=time.perf_counter() - start,
        batch_size=job.settings.batch_size, num_replicas=job_workers(strategy),
        stopped_early=(stopped or rolled_back) and step < total,
        info={
            "optimizer_iterations": int(optimizer.iterations.numpy()),
            "xla_compiled": program.info()["xla_compiled"],
            "embedding_devices": {
                v.path: v.value.device for v in model.weights if "embedding" in v.path
            },
        },
    )


def per_worker_iterator(coordinator: Any, strategy: Any, train_ds: Any, skip: int = 0) -> Any:
    """One input pipeline per worker, each reading its own shard: `train_ds(skip, ctx_i)`.

    `ClusterCoordinator.create_per_worker_dataset` traces the dataset function once, on the
    chief, and runs that same graph on every worker; ParameterServerStrategy's InputContext says
    `num_input_pipelines=1`. Nothing in the graph can tell one worker from another, so every
    worker used to read the same rows in the same order. Instead, each worker `i` of `n` gets a
    dataset function of its own, built here with `InputContext(n, i)`, so `make_dataset` shards
    files (or rows, with fewer files than workers) exactly as under multi-worker mirrored: worker
    `i` reads shard `i`, in an order seeded by the job seed. The resource is registered per worker
    like TensorFlow's own per-worker datasets, so a restarted worker rebuilds its own shard.

    This uses the coordinator's per-worker resource internals (`_cluster.workers`,
    `Worker.create_resource`, `PerWorkerDistributedIterator`), pinned by the TensorFlow version;
    `tests/strategies/test_ps_input.py` fails if they change.
    """
    import tensorflow as tf
    from tensorflow.python.distribute import input_lib
    from tensorflow.python.distribute.coordinator import values as coordinator_values

    workers = list(coordinator._cluster.workers)  # noqa: SLF001
    n = len(workers)
    iterators = []
    for i, worker in enumerate(workers):

        def dataset_fn(ctx: Any, i: int = i) -> Any:
            shard = tf.distribute.InputContext(
                num_input_pipelines=n,
                input_pipeline_id=i,
                num_replicas_in_sync=ctx.num_replicas_in_sync,
            )
            return train_ds(skip, shard)

        def per_worker_dataset(fn: Any = dataset_fn) -> Any:
            return strategy.distribute_datasets_from_function(fn)

        # Traces `per_worker_dataset` into a concrete function, refusing variable creation.
        dataset = coordinator_values.PerWorkerDatasetFromDatasetFunction(
            per_worker_dataset, coordinator
        )
        concrete = dataset._dataset_fn  # noqa: SLF001
        remote = worker.create_resource(lambda fn=concrete: iter(fn()))
        # As in PerWorkerDatasetFromDatasetFunction.__iter__: functions taking the iterator
        # are traced against this spec.
        remote._type_spec = input_lib.get_iterator_spec_from_dataset(  # noqa: SLF001
            strategy, concrete.structured_outputs
        )
        iterators.append(remote)
    return coordinator_values.PerWorkerDistributedIterator(tuple(iterators))


def job_workers(strategy: Any) -> int:
    """Workers in the cluster (the PS strategy's `num_replicas_in_sync` is 1 by design).

    ParameterServerStrategy keeps its resolver in `_cluster_resolver`; its public
    `cluster_resolver` property is None (which made this always 1 before).
    """
    resolver: Any = strategy.cluster_resolver or getattr(strategy, "_cluster_resolver", None)
    try:
        return max(len(resolver.cluster_spec().as_dict().get("worker", [])), 1)
    except (AttributeError, ValueError):
        return 1
