"""The synchronous training driver: one-device, mirrored and multi-worker mirrored strategies.

Every task of a multi-worker job runs this same loop; the chief alone writes summaries and keeps
backups (`strategies.backup`). The global step is `optimizer.iterations`, and the data position is
derived from it (one seeded, endlessly repeated stream; a resumed task skips the batches already
consumed), so a job restarted from a backup sees exactly the batches an uninterrupted job would have
seen: with deterministic ops the final weights are bitwise equal.

The Python loop wakes up only between chunks of `steps_per_execution` steps (run in-graph by
`graphs.steps.make_train_chunk`); chunks are cut at backup steps, epoch ends and fault steps, and
under `balance: auto` start short so the split moves within a few steps (`Balancer.chunk_cap`).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from baton.errors import Preempted
from baton.graphs.executor import decide, executor_of
from baton.graphs.feature_spec import FeatureSpec
from baton.graphs.steps import (
    TOTALS,
    StepOptions,
    count_batches,
    make_eval_fn,
    make_train_chunk,
    totals_to_metrics,
    xla_compiled_functions,
    xla_failure,
)
from baton.strategies import faults
from baton.strategies.backup import Backup
from baton.strategies.balance import Balancer
from baton.strategies.eval_shards import sharded_eval
from baton.strategies.objectives import Objectives


@dataclasses.dataclass(frozen=True)
class TrainPlan:
    """How long and how fast: fixed up front so every task (and every retry) agrees."""

    epochs: int
    steps_per_epoch: int
    global_batch_size: int
    steps_per_execution: int = 20
    backup_every: int = 0  # steps between backups; 0: epoch ends only
    balance: bool = False  # per-replica batches follow measured speed (strategies.balance)
    # A topology probe (strategies.probe): stop after this many steps (0: train every epoch),
    # and time the steps after the first `measure_after` of this run into `info["window"]`
    # (wall seconds, this process's CPU seconds and peak memory; 0: no window).
    max_steps: int = 0
    measure_after: int = 0
    on_nonfinite: str = "fail"  # strategies.nonfinite_guard: fail | restore

    def __post_init__(self) -> None:
        for name in ("epochs", "steps_per_epoch", "global_batch_size", "steps_per_execution"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1. Received: {name}={getattr(self, name)}")
        for name in ("backup_every", "max_steps", "measure_after"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0. Received: {name}={getattr(self, name)}")

    @property
    def total_steps(self) -> int:
        full = self.epochs * self.steps_per_epoch
        return min(full, self.max_steps) if self.max_steps else full


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
    objectives: Objectives | None = None,
    take_rows: Any = None,
    finite_split: Callable[[str], Any] | None = None,
) -> TrainResult:
    """Train to `plan.total_steps`, resuming from `role.backup_dir` when it holds a backup.

    The loop's side work and the user's callbacks are one Keras CallbackList
    (strategies.callbacks). `model.stop_training` set by a callback ends training at the end of
    that chunk (or epoch); under multi-worker mirrored the workers agree on it through one
    all-reduce, so every worker stops at the same step. A non-finite loss stops training
    (strategies.nonfinite_guard; `finite_split(split)`: one pass over a split, where the guard
    looks for the cause).
    """
    import tensorflow as tf

    from baton.graphs import metric_records
    from baton.graphs.objectives import check_objectives
    from baton.strategies import callbacks as cbs
    from baton.strategies.nonfinite_guard import NonFiniteGuard

    objectives = objectives or Objectives()
    with strategy.scope():
        model, optimizer = build()
        optimizer.build(model.trainable_variables)
    eval_ds = eval_dataset() if eval_dataset is not None else None
    objectives, outputs = objectives.resolve(model, spec, eval_ds)
    metrics = objectives.metrics()
    check_objectives(model, spec, objectives.loss, objectives.loss_name, metrics)
    user_callbacks = objectives.callbacks()
    backup = None
    if role.backup_dir is not None:
        backup = Backup(
            role.backup_dir,
            role.is_chief,
            role.task_name,
            model=model,
            optimizer=optimizer,
            fingerprint=role.fingerprint,
            background=_one_process(strategy),
        )
    restored = (backup.restore() if backup else None) or {}
    history: list[dict[str, float]] = list(restored.get("history", []))
    epoch_totals = list(restored.get("epoch_totals", [0.0, 0.0, 0.0, 0.0]))
    step = int(optimizer.iterations.numpy())
    resumed_from = step
    if backup is not None:
        backup.planned_saves = planned_saves(plan, step)
    chunk = make_train_chunk(
        model, optimizer, spec, plan.global_batch_size, strategy, step_options, objectives.loss,
        balance=plan.balance, take_rows=take_rows, max_steps=plan.steps_per_execution,
    )
    balancer = (
        Balancer(plan.global_batch_size, strategy.num_replicas_in_sync,
                 record_every=max(1, plan.total_steps // 40))
        if plan.balance else None
    )
    executor = decide((step_options or StepOptions()).executor, strategy, model,
                      plan.global_batch_size // strategy.num_replicas_in_sync)
    evaluate = (
        make_eval_fn(model, spec, objectives.loss, metrics, executor)
        if eval_dataset is not None else None
    )
    guard = NonFiniteGuard(plan.on_nonfinite, model, objectives.loss_or_builtin(spec.label.task),
                           finite_split)
    my_fault = role.fault if role.fault and role.fault.task.name == role.task_name else None
    writer = (
        tf.summary.create_file_writer(str(role.logs_dir))
        if role.is_chief and role.logs_dir
        else None
    )
    spe, total = plan.steps_per_epoch, plan.total_steps
    start, start_step = time.perf_counter(), step
    task = spec.label.task
    if balancer is not None:  # the split's record over the whole run, not this attempt's
        balancer.history = list(restored.get("balance_history", []))
    state = cbs.LoopState(step, total, spe, plan.global_batch_size, history,
                          extra=lambda: {"epoch_totals": epoch_totals, **(
                              {"balance_history": balancer.history} if balancer else {})})
    backups = cbs.Backups(backup, state, plan.backup_every)
    chief = role.is_chief
    callbacks = cbs.loop_callbacks(
        model, state, backups, epochs=plan.epochs, steps=spe, writer=writer,
        on_progress=role.on_progress if chief else None,
        status_file=role.status_file if chief else None,
        user=user_callbacks, fault=my_fault,
    )
    stop_requested = _stop_agreement(strategy, model) if user_callbacks else (lambda: False)

    iterator = iter(
        strategy.distribute_datasets_from_function(
            lambda ctx, skip=step: train_dataset(skip, ctx)  # one stream per run; resume = skip
        )
    )
    # Under multi-worker mirrored each worker evaluates its shard and one all-reduce merges
    # the counts (strategies.eval_shards); elsewhere the task evaluates the whole split.
    shards = sharded_eval(strategy, metrics) if eval_ds is not None else None
    eval_batches = count_batches(eval_ds) if shards is not None else 0
    model.stop_training = False
    stopped = preempted = rolled_back = False
    window = _Window()
    # The first chunk carries one-off work (tracing the step, filling the input's cache); a
    # short run's examples/s is mostly that. `steady_examples_per_sec` starts after it.
    first: tuple[float, int] | None = None
    cbs.lend_optimizer(model, optimizer)  # for callbacks that read or set the learning rate
    callbacks.on_train_begin()
    try:
        while step < total and not stopped:
            epoch, in_epoch = divmod(step, spe)
            callbacks.on_epoch_begin(epoch)
            while in_epoch < spe and step < total:
                n = min(plan.steps_per_execution, spe - in_epoch, total - step)
                if plan.backup_every:
                    n = min(n, plan.backup_every - step % plan.backup_every)
                if balancer is not None:  # measure early, then at the configured pace
                    n = min(n, balancer.chunk_cap(plan.steps_per_execution))
                n = faults.clip_chunk(role.fault, step, n)
                flag = tf.constant(1.0 if role.stop.is_set() else 0.0)
                callbacks.on_train_batch_begin(in_epoch)
                if balancer is None:
                    totals = _run_chunk(chunk, iterator, tf.constant(n, tf.int32), flag)
                else:
                    bounds = tf.constant(balancer.bounds(), tf.int32)
                    out = _run_chunk(chunk, iterator, tf.constant(n, tf.int32), flag, bounds)
                    totals, r = out[: len(TOTALS)], balancer.replicas
                    balancer.observe(step + n, out[len(TOTALS):len(TOTALS) + r],
                                     out[len(TOTALS) + r:])
                step += n
                in_epoch += n
                state.step = step
                first = first or (time.perf_counter(), step)
                if plan.measure_after:
                    window.mark(step, step - start_step >= plan.measure_after)
                    if plan.max_steps and window.start is not None:
                        # a probe times `max_steps - measure_after` steps from the chunk
                        # boundary its window opened at; under balance the warm-up runs in
                        # chunks of 1, 2, 4, ... that end past `measure_after` (every worker
                        # runs the same chunks, so every worker ends at the same step)
                        total = min(plan.epochs * spe, window.start[3] + plan.max_steps
                                    - plan.measure_after)
                        state.total = total
                epoch_totals = [a + float(b) for a, b in zip(epoch_totals, totals, strict=True)]
                epoch_totals[3] = 0.0
                if guard.chunk(totals[0], epoch + 1, step - n, step):
                    guard.restore()
                    rolled_back = True
                    break
                if totals[3] > 0:  # some task got SIGTERM: everyone saves at this same step, then stops
                    if in_epoch < spe:
                        backups.save()
                        backups.flush()
                        raise Preempted(step=step)
                    # The chunk ended the epoch: its record (and the epoch-end backup holding
                    # it) first, below. A backup at the epoch's last step without its record
                    # resumed into the next epoch, and history.json lacked this one.
                    preempted = True
                    break
                callbacks.on_train_batch_end(in_epoch - 1, totals_to_metrics(totals, task))
                if stop_requested():
                    stopped = True
                    break
            if rolled_back:
                break
            record = {
                "epoch": epoch + 1,
                "step": step,
                **{f"train_{k}": v for k, v in totals_to_metrics(epoch_totals, task).items()},
            }
            if evaluate is not None:
                for m in metrics:
                    m.reset()
                part = (shards.part(eval_batches, balancer.bounds() if balancer is not None else None)
                        if shards is not None else None)
                totals = evaluate(eval_ds, part, eval_batches or None)
                if shards is not None:
                    totals = shards.merge(totals)
                ev = totals_to_metrics(totals.numpy(), task)
                ev.update({m.name: m.result() for m in metrics})
                record.update({f"eval_{k}": v for k, v in ev.items()})
            if guard.evaluated(record.get("eval_loss"), epoch + 1):
                guard.restore()
                rolled_back = True
                break
            history.append(record)
            epoch_totals = [0.0, 0.0, 0.0, 0.0]
            callbacks.on_epoch_end(epoch, cbs.epoch_logs(record))  # saves the backup
            if preempted:
                backups.flush()
                raise Preempted(step=step)
            stopped = stopped or stop_requested()
    except BaseException:
        if backup is not None:  # a background write in flight is a whole backup: let it land
            backup.close(quiet=True)
        raise
    callbacks.on_train_end(cbs.epoch_logs(history[-1]) if history else None)
    cbs.lend_optimizer(model, None)  # not into the export
    objectives.confirm(model, outputs, eval_ds)
    if balancer is not None:
        balancer.record(step, "end")
    seconds = time.perf_counter() - start
    done = step - start_step
    steady = ({"steady_examples_per_sec": round(
        (step - first[1]) * plan.global_batch_size / (start + seconds - first[0]), 1)}
              if first and step > first[1] else {})
    return TrainResult(
        model=model,
        history=history,
        steps=step,
        resumed_from=resumed_from,
        seconds=seconds,
        examples_per_sec=done * plan.global_batch_size / max(seconds, 1e-9),
        steps_per_sec=done / max(seconds, 1e-9),
        num_replicas=strategy.num_replicas_in_sync,
        info={"xla_compiled": xla_compiled_functions(chunk), "executor": executor_of(chunk),
              **steady,
              # where the chief's backups were written (strategies.snapshot), and why not in
              # the background when it was refused
              **({"backup_writes": "background" if backup.background else
                  "training thread" + (f" ({backup.refused})" if backup.refused else "")}
                 if backup is not None and role.is_chief else {}),
              **({"balance": {**balancer.summary(),
                              "input": "table" if take_rows is not None else "stream"}}
                 if balancer is not None else {}),
              **({"eval_sharded_over": shards.workers} if shards is not None and shards.active
                 else {}),
              **({"stopped_early_at_step": step} if (stopped or rolled_back) and step < total
                 else {}),
              "outputs": outputs.to_dict(), **objectives.info,
              "metrics": metric_records.records(metrics),
              **({"nonfinite": guard.info} if guard.info else {}),
              **({"window": window.as_dict()} if window.steps else {})},
    )


def _run_chunk(chunk: Any, *args: Any) -> Any:
    """One chunk call, its totals as numpy. XLA refusing to compile the step (at the first
    call) is a StageError naming the op and the setting, where TensorFlow's own message is
    dozens of lines that never mention `jit_compile`."""
    import tensorflow as tf

    from baton.errors import StageError

    try:
        return chunk(*args).numpy()
    except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError) as exc:
        why = xla_failure(exc)
        if why is None:
            raise
        raise StageError(f"train.config.jit_compile: true: {why}") from None


def _one_process(strategy: Any) -> bool:
    """Whether `strategy` runs in this process alone (one device, or mirrored over local
    devices): its backups are written in the background (strategies.snapshot). A multi-worker
    job's tasks save in step (a save may run collectives), so they write on the training
    thread, as the parameter-server driver does."""
    import tensorflow as tf

    multi = (tf.distribute.MultiWorkerMirroredStrategy,
             tf.distribute.experimental.ParameterServerStrategy)
    return not isinstance(strategy, multi)


def planned_saves(plan: TrainPlan, step: int) -> int:
    """Backups the loop makes from `step` on: one at every epoch end (a last, partial epoch
    included) and every `backup_every` steps inside an epoch (strategies.backup traces its
    write when that many saves pay for it)."""
    total, spe = plan.total_steps, plan.steps_per_epoch
    epoch_ends = max(-(-total // spe) - step // spe, 0)
    every = plan.backup_every
    inside = 0
    if every:
        first = step - step % every + every
        inside = sum(1 for s in range(first, total + 1, every) if s % spe)
    return epoch_ends + inside


class _Window:
    """The timed stretch of a probe: from the chunk boundary after the warm-up to the last
    chunk's end (each chunk's totals were fetched, so its steps had finished)."""

    def __init__(self) -> None:
        self.start: tuple[float, float, float, int] | None = None
        self.end: tuple[float, float, float, int] | None = None

    def mark(self, step: int, measuring: bool) -> None:
        if not measuring:
            return
        now = (time.perf_counter(), time.process_time(), time.time(), step)
        if self.start is None:
            self.start = now
        else:
            self.end = now

    @property
    def steps(self) -> int:
        return self.end[3] - self.start[3] if self.start and self.end else 0

    def as_dict(self) -> dict[str, Any]:
        import resource

        assert self.start is not None and self.end is not None
        return {
            "steps": self.steps,
            "seconds": self.end[0] - self.start[0],
            "cpu_s": self.end[1] - self.start[1],
            "started_at": self.start[2],
            "ended_at": self.end[2],
            # KiB on Linux: this process's peak, the memory the estimate holds for the window
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }


def _stop_agreement(strategy: Any, model: Any) -> Callable[[], bool]:
    """`model.stop_training` of this task, or of any worker under multi-worker mirrored.

    Every worker runs the same callbacks at the same points, so each calls this equally often;
    one scalar all-reduce makes them agree (a callback may decide differently on one worker).
    """
    import tensorflow as tf

    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return lambda: bool(getattr(model, "stop_training", False))

    @tf.function
    def any_worker(flag: Any) -> Any:
        per_replica = strategy.run(lambda f: tf.identity(f), args=(flag,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    def agree() -> bool:
        want = 1.0 if getattr(model, "stop_training", False) else 0.0
        stop = float(any_worker(tf.constant(want)).numpy()) > 0
        model.stop_training = stop
        return stop

    return agree
