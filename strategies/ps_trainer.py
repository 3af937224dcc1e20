"""The asynchronous driver: ParameterServerStrategy with a ClusterCoordinator on the chief.

The chief runs no training steps itself: it schedules chunks of `steps_per_execution` steps
(`graphs.steps.make_train_chunk`, the same function the synchronous driver uses) on whichever
worker is free, each worker reading its own shard through a per-worker dataset. Variables live on
the PS tasks, large ones sharded across them by the strategy's variable partitioner.

Fault tolerance comes from the coordinator: a closure whose worker dies is rescheduled on another
worker, and a restarted worker rejoins at the same address (the launcher restarts it); training
goes on without a restart. A dead PS makes `join` raise; the task exits with a retryable code and
the launcher restarts the group, which resumes from the chief's last checkpoint. Because closures
can run twice when a worker dies mid-closure, the step count may exceed the plan slightly in that
case: asynchronous training trades exactness for availability.
"""

from __future__ import annotations

import time
from typing import Any

from graphs import summaries
from graphs.steps import StepOptions, make_eval_fn, make_train_chunk, totals_to_metrics
from strategies import faults
from strategies.backup import Backup
from strategies.trainer import Preempted, TaskRole, TrainResult, _write_status


def train(strategy: Any, job: Any, role: TaskRole, num_ps: int = 1) -> TrainResult:
    """Coordinate the job from the chief; returns when `epochs * steps_per_epoch` steps are done."""
    import tensorflow as tf

    from strategies.job import build_fn, dataset_fns

    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    spec = job.spec()
    with strategy.scope():
        model, optimizer = build_fn(job, num_ps)()
        optimizer.build(model.trainable_variables)
    backup = (
        Backup(
            role.backup_dir,
            True,
            role.task_name,
            model=model,
            optimizer=optimizer,
            fingerprint=role.fingerprint,
        )
        if role.backup_dir is not None
        else None
    )
    state = (backup.restore() if backup else None) or {}
    history: list[dict[str, float]] = list(state.get("history", []))
    step = int(optimizer.iterations.numpy())
    resumed_from = step
    spe = job.steps_per_epoch()
    total = job.epochs * spe
    train_ds, eval_ds = dataset_fns(job)

    def per_worker_dataset() -> Any:
        return strategy.distribute_datasets_from_function(lambda ctx: train_ds(0, ctx))

    iterator = iter(coordinator.create_per_worker_dataset(per_worker_dataset))
    chunk = make_train_chunk(model, optimizer, spec, job.batch_size, strategy, StepOptions())
    evaluate = make_eval_fn(model, spec)
    my_fault = role.fault if role.fault and role.fault.task.name == role.task_name else None
    start, start_step = time.perf_counter(), step
    task = spec.label.task
    writer = tf.summary.create_file_writer(str(role.logs_dir)) if role.logs_dir else None
    eval_data = eval_ds()

    def save() -> None:
        if backup is not None:
            backup.save(step, {"history": history})

    while step < total:
        epoch_end = (step // spe + 1) * spe
        scheduled = step
        results = []
        while scheduled < epoch_end:
            n = min(job.steps_per_execution, epoch_end - scheduled)
            results.append(
                coordinator.schedule(
                    chunk, args=(iterator, tf.constant(n, tf.int32), tf.constant(0.0))
                )
            )
            scheduled += n
        epoch_totals = [0.0, 0.0, 0.0, 0.0]
        for i, rv in enumerate(results):
            totals = rv.fetch()  # blocks until this closure ran (maybe after a reschedule)
            epoch_totals = [a + float(b) for a, b in zip(epoch_totals, totals, strict=True)]
            done = step + (i + 1) * job.steps_per_execution
            done = min(done, epoch_end)
            if role.on_progress is not None:
                role.on_progress(done, total, totals_to_metrics(totals, task))
            if role.status_file is not None:
                _write_status(role.status_file, done)
            if my_fault is not None and done >= my_fault.step:
                fault, my_fault = my_fault, None  # once
                faults.fire(fault)
            if role.stop.is_set():
                coordinator.join()
                step = int(optimizer.iterations.numpy())
                save()
                raise Preempted(step)
        coordinator.join()
        step = max(int(optimizer.iterations.numpy()), epoch_end)
        record = {
            "epoch": step // spe,
            "step": step,
            **{f"train_{k}": v for k, v in totals_to_metrics(epoch_totals, task).items()},
        }
        record.update(
            {
                f"eval_{k}": v
                for k, v in totals_to_metrics(evaluate(eval_data).numpy(), task).items()
            }
        )
        history.append(record)
        if writer is not None:  # the coordinator is the chief: it alone writes summaries
            rate = (step - start_step) / max(time.perf_counter() - start, 1e-9)
            with writer.as_default(step=step):
                for k, v in record.items():
                    if k not in ("epoch", "step"):
                        summaries.scalar(k.replace("_", "/", 1), v)
                summaries.scalar("perf/steps_per_sec", rate)
                summaries.scalar("perf/examples_per_sec", rate * job.batch_size)
            writer.flush()
        save()
    seconds = time.perf_counter() - start
    done_steps = step - start_step
    return TrainResult(
        model=model,
        history=history,
        steps=step,
        resumed_from=resumed_from,
        seconds=seconds,
        examples_per_sec=done_steps * job.batch_size / max(seconds, 1e-9),
        steps_per_sec=done_steps / max(seconds, 1e-9),
        num_replicas=job_workers(strategy),
        info={
            "embedding_devices": {
                v.path: v.value.device for v in model.weights if "embedding" in v.path
            }
        },
    )


def job_workers(strategy: Any) -> int:
    """Workers in the cluster (the PS strategy's `num_replicas_in_sync` is 1 by design)."""
    try:
        return len(strategy.cluster_resolver.cluster_spec().as_dict().get("worker", []))
    except (AttributeError, ValueError):
        return 1
