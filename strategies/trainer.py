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
import time
from collections.abc import Callable
from typing import Any

from baton.errors import Preempted
from baton.graphs.eval_step import count_batches
from baton.graphs.feature_spec import FeatureSpec
from baton.graphs.program import compile_program
from baton.graphs.step_options import StepOptions, xla_failure
from baton.graphs.totals import TOTALS
from baton.strategies import faults
from baton.strategies.balance import Balancer
from baton.strategies.eval_shards import sharded_eval
from baton.strategies.loop import DatasetFn, LoopCore, TaskRole, TrainResult
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
    on_nonfinite: str = "fail"  # graphs.nonfinite_guard: fail | restore

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
    (graphs.nonfinite_guard; `finite_split(split)`: one pass over a split, where the guard
    looks for the cause).
    """
    import tensorflow as tf

    from baton.strategies import callbacks as cbs

    core = LoopCore(strategy, build, spec, eval_dataset, role, objectives, plan.on_nonfinite,
                    finite_split, writes_backup=role.is_chief, background=_one_process(strategy))
    program = compile_program(
        core.model, core.optimizer, spec, core.objectives.loss, core.metrics,
        plan.global_batch_size, strategy, step_options, balance=plan.balance,
        take_rows=take_rows, max_steps=plan.steps_per_execution,
        evaluate=eval_dataset is not None,
    )
    chunk, evaluate = program.chunk, program.evaluate
    eval_ds = core.eval_data
    model, optimizer, backup, restored = core.model, core.optimizer, core.backup, core.restored
    step = int(optimizer.iterations.numpy())
    if backup is not None:
        backup.planned_saves = planned_saves(plan, step)
    balancer = (
        Balancer(plan.global_batch_size, strategy.num_replicas_in_sync,
                 record_every=max(1, plan.total_steps // 40))
        if plan.balance else None
    )
    writer = (
        tf.summary.create_file_writer(str(role.logs_dir))
        if role.is_chief and role.logs_dir
        else None
    )
    spe, total = plan.steps_per_epoch, plan.total_steps
    start, start_step = time.perf_counter(), step
    history = core.history
    if balancer is not None:  # the split's record over the whole run, not this attempt's
        balancer.history = list(restored.get("balance_history", []))
    state = cbs.LoopState(step, total, spe, plan.global_batch_size, history,
                          extra=lambda: {"epoch_totals": core.epoch_totals, **(
                              {"balance_history": balancer.history} if balancer else {})})
    backups = cbs.Backups(backup, state, plan.backup_every)
    chief = role.is_chief
    user_callbacks = core.objectives.callbacks()
    callbacks = cbs.loop_callbacks(
        model, state, backups, epochs=plan.epochs, steps=spe, writer=writer,
        on_progress=role.on_progress if chief else None,
        status_file=role.status_file if chief else None,
        user=user_callbacks, fault=role.my_fault,
    )
    stop_requested = _stop_agreement(strategy, model) if user_callbacks else (lambda: False)

    iterator = iter(
        strategy.distribute_datasets_from_function(
            lambda ctx, skip=step: train_dataset(skip, ctx)  # one stream per run; resume = skip
        )
    )
    # Under multi-worker mirrored each worker evaluates its shard and one all-reduce merges
    # the counts (strategies.eval_shards); elsewhere the task evaluates the whole split.
    shards = sharded_eval(strategy, core.metrics) if eval_ds is not None else None
    eval_batches = count_batches(eval_ds) if shards is not None else 0

    def eval_totals() -> Any:  # the whole split's totals, whoever evaluated which part
        part = (shards.part(eval_batches, balancer.bounds() if balancer is not None else None)
                if shards is not None else None)
        assert evaluate is not None
        totals = evaluate(eval_ds, part, eval_batches or None)
        return (shards.merge(totals) if shards is not None else totals).numpy()

    stopped = preempted = rolled_back = False
    window = _Window()
    # The first chunk carries one-off work (tracing the step, filling the input's cache); a
    # short run's examples/s is mostly that. `steady_examples_per_sec` starts after it.
    first: tuple[float, int] | None = None
    core.begin(callbacks)
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
                core.add(totals)
                if core.guard.chunk(totals[0], epoch + 1, step - n, step):
                    core.guard.restore()
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
                callbacks.on_train_batch_end(in_epoch - 1, program.metrics(totals))
                if stop_requested():
                    stopped = True
                    break
            if rolled_back:
                break
            record = core.close_epoch(epoch + 1, step,
                                      eval_totals if evaluate is not None else None)
            if record is None:
                rolled_back = True
                break
            core.keep_epoch(record, callbacks)  # saves the backup
            if preempted:
                backups.flush()
                raise Preempted(step=step)
            stopped = stopped or stop_requested()
    except BaseException:
        if backup is not None:  # a background write in flight is a whole backup: let it land
            backup.close(quiet=True)
        raise
    core.end(callbacks)
    if balancer is not None:
        balancer.record(step, "end")
    seconds = time.perf_counter() - start
    steady = ({"steady_examples_per_sec": round(
        (step - first[1]) * plan.global_batch_size / (start + seconds - first[0]), 1)}
              if first and step > first[1] else {})
    return core.result(
        step=step, resumed_from=start_step, seconds=seconds,
        batch_size=plan.global_batch_size, num_replicas=strategy.num_replicas_in_sync,
        stopped_early=(stopped or rolled_back) and step < total,
        info={**program.info(),
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
