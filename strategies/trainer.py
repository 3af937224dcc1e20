"""The synchronous training driver: one-device, mirrored and multi-worker mirrored strategies.

Every task of a multi-worker job runs this same loop; the chief alone writes summaries and keeps
backups (`strategies.backup`). The global step is `optimizer.iterations`, and the data position is
derived from it (one seeded, endlessly repeated stream; a resumed task skips the batches already
consumed), so a job restarted from a backup sees exactly the batches an uninterrupted job would have
seen: with deterministic ops the final weights are bitwise equal.

The Python loop wakes up only between chunks of `steps_per_execution` steps (run in-graph by
`graphs.steps.make_train_chunk`); chunks are cut at backup steps, epoch ends and fault steps.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from baton.errors import Preempted
from baton.graphs import summaries
from baton.graphs.feature_spec import FeatureSpec
from baton.graphs.steps import (
    StepOptions,
    make_eval_fn,
    make_train_chunk,
    totals_to_metrics,
    xla_compiled_functions,
)
from baton.strategies import faults
from baton.strategies.backup import Backup


@dataclasses.dataclass(frozen=True)
class TrainPlan:
    """How long and how fast: fixed up front so every task (and every retry) agrees."""

    epochs: int
    steps_per_epoch: int
    global_batch_size: int
    steps_per_execution: int = 20
    backup_every: int = 0  # steps between backups; 0: epoch ends only

    def __post_init__(self) -> None:
        for name in ("epochs", "steps_per_epoch", "global_batch_size", "steps_per_execution"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1. Received: {name}={getattr(self, name)}")
        if self.backup_every < 0:
            raise ValueError(
                f"backup_every must be >= 0. Received: backup_every={self.backup_every}"
            )

    @property
    def total_steps(self) -> int:
        return self.epochs * self.steps_per_epoch


@dataclasses.dataclass
class TaskRole:
    """What the edge decided about this process: who it is and what it may write."""

    is_chief: bool = True
    task_name: str = "worker:0"
    backup_dir: Path | None = None
    logs_dir: Path | None = None  # TensorBoard summaries (chief only)
    fault: faults.Fault | None = None  # fires only when it names this task
    stop: threading.Event = dataclasses.field(default_factory=threading.Event)  # SIGTERM seen
    on_progress: Callable[[int, int, dict[str, float]], None] | None = None
    status_file: Path | None = None  # chief writes {"step": n} here (launcher-side faults)
    fingerprint: str = ""  # identifies the job: a backup of another job is not resumed
    # Called once the strategy exists: TensorFlow's coordination service installs its own
    # SIGTERM notifier when a multi-worker strategy starts, so the edge re-installs its handler.
    after_strategy: Callable[[], None] | None = None


@dataclasses.dataclass
class TrainResult:
    model: Any
    history: list[dict[str, float]]
    steps: int
    resumed_from: int
    seconds: float
    examples_per_sec: float
    steps_per_sec: float
    num_replicas: int
    info: dict[str, Any] = dataclasses.field(default_factory=dict)  # extra train_info fields


DatasetFn = Callable[[int, Any], Any]  # (batches to skip, input_context) -> endless dataset


def train(
    strategy: Any,
    build: Callable[[], tuple[Any, Any]],
    spec: FeatureSpec,
    train_dataset: DatasetFn,
    eval_dataset: Callable[[], Any] | None,
    plan: TrainPlan,
    role: TaskRole,
    step_options: StepOptions | None = None,
) -> TrainResult:
    """Train to `plan.total_steps`, resuming from `role.backup_dir` when it holds a backup."""
    import tensorflow as tf

    with strategy.scope():
        model, optimizer = build()
        optimizer.build(model.trainable_variables)
    backup = None
    if role.backup_dir is not None:
        backup = Backup(
            role.backup_dir,
            role.is_chief,
            role.task_name,
            model=model,
            optimizer=optimizer,
            fingerprint=role.fingerprint,
        )
    state = (backup.restore() if backup else None) or {}
    history: list[dict[str, float]] = list(state.get("history", []))
    epoch_totals = list(state.get("epoch_totals", [0.0, 0.0, 0.0, 0.0]))
    step = int(optimizer.iterations.numpy())
    resumed_from = step
    chunk = make_train_chunk(model, optimizer, spec, plan.global_batch_size, strategy, step_options)
    evaluate = make_eval_fn(model, spec) if eval_dataset is not None else None
    my_fault = role.fault if role.fault and role.fault.task.name == role.task_name else None
    writer = (
        tf.summary.create_file_writer(str(role.logs_dir))
        if role.is_chief and role.logs_dir
        else None
    )
    spe, total = plan.steps_per_epoch, plan.total_steps
    start, start_step = time.perf_counter(), step
    last_t, last_step = start, step
    task = spec.label.task

    def save() -> None:
        if backup is not None:
            backup.save(step, {"history": history, "epoch_totals": epoch_totals})

    iterator = iter(
        strategy.distribute_datasets_from_function(
            lambda ctx, skip=step: train_dataset(skip, ctx)  # one stream per run; resume = skip
        )
    )
    eval_ds = eval_dataset() if eval_dataset is not None else None
    while step < total:
        epoch, in_epoch = divmod(step, spe)
        while in_epoch < spe:
            n = min(plan.steps_per_execution, spe - in_epoch)
            if plan.backup_every:
                n = min(n, plan.backup_every - step % plan.backup_every)
            n = faults.clip_chunk(role.fault, step, n)
            flag = tf.constant(1.0 if role.stop.is_set() else 0.0)
            totals = chunk(iterator, tf.constant(n, tf.int32), flag).numpy()
            step += n
            in_epoch += n
            epoch_totals = [a + float(b) for a, b in zip(epoch_totals, totals, strict=True)]
            epoch_totals[3] = 0.0
            if totals[3] > 0:  # some task got SIGTERM: everyone saves at this same step, then stops
                save()
                raise Preempted(step=step)
            now = time.perf_counter()
            rate = (step - last_step) / max(now - last_t, 1e-9)
            metrics = totals_to_metrics(totals, task)
            if writer is not None:
                with writer.as_default(step=step):
                    for k, v in metrics.items():
                        summaries.scalar(f"train/{k}", v)
                    summaries.scalar("perf/steps_per_sec", rate)
                    summaries.scalar("perf/examples_per_sec", rate * plan.global_batch_size)
            last_t, last_step = now, step
            if role.on_progress is not None and role.is_chief:
                role.on_progress(step, total, metrics)
            if role.status_file is not None and role.is_chief:
                _write_status(role.status_file, step)
            if plan.backup_every and step % plan.backup_every == 0 and in_epoch < spe:
                save()
            if my_fault is not None and step >= my_fault.step:
                fault, my_fault = my_fault, None  # once
                faults.fire(fault)
        record = {
            "epoch": epoch + 1,
            "step": step,
            **{f"train_{k}": v for k, v in totals_to_metrics(epoch_totals, task).items()},
        }
        if evaluate is not None:
            ev = totals_to_metrics(evaluate(eval_ds).numpy(), task)
            record.update({f"eval_{k}": v for k, v in ev.items()})
        history.append(record)
        epoch_totals = [0.0, 0.0, 0.0, 0.0]
        if writer is not None:
            with writer.as_default(step=step):
                for k, v in record.items():
                    if k not in ("epoch", "step"):
                        summaries.scalar(k.replace("_", "/", 1), v)
            writer.flush()
        save()
    seconds = time.perf_counter() - start
    done = step - start_step
    return TrainResult(
        model=model,
        history=history,
        steps=step,
        resumed_from=resumed_from,
        seconds=seconds,
        examples_per_sec=done * plan.global_batch_size / max(seconds, 1e-9),
        steps_per_sec=done / max(seconds, 1e-9),
        num_replicas=strategy.num_replicas_in_sync,
        info={"xla_compiled": xla_compiled_functions(chunk)},
    )


def _write_status(path: Path, step: int) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"step": step}))
    tmp.replace(path)
