"""The training loop's skeleton: what every driver does around its steps, written once.

Both drivers (strategies/trainer.py: one-device, mirrored and multi-worker mirrored in lockstep;
strategies/ps_trainer.py: a ClusterCoordinator scheduling on parameter-server workers) build the
model in the strategy scope, resolve and check the spec's objectives, resume from a backup,
drive one Keras CallbackList, close each epoch with its record (the epoch's training totals and
an evaluation), watch for a non-finite loss, and report a `TrainResult`. `LoopCore` holds that
part; a driver plugs in only what its strategy decides:

- how the steps of an epoch run (chunks in lockstep, or closures scheduled on free workers) and
  when it may stop (an all-reduced `stop_training`, or the coordinator's own flag);
- where the resume step comes from (`optimizer.iterations`, or the coordinator's count kept in
  the backup's state) and whether backups may be written in the background;
- how the evaluation's totals are computed (split over the workers, or on the coordinator).

A third loop (the federated client's local epochs, pipeline/federated/local.py) can take the
same core once it moves: it needs the objectives, the epoch records and the guard, not the
backups or a strategy's steps.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from baton.graphs.totals import totals_to_metrics
from baton.strategies import faults
from baton.strategies.backup import Backup
from baton.strategies.objectives import Objectives

DatasetFn = Callable[[int, Any], Any]  # (batches to skip, input_context) -> endless dataset


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

    @property
    def my_fault(self) -> faults.Fault | None:
        """The fault to fire in this process: only one that names this task."""
        return self.fault if self.fault and self.fault.task.name == self.task_name else None


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


ZERO_TOTALS = (0.0, 0.0, 0.0, 0.0)  # graphs.totals.TOTALS: loss sum, correct, examples, stops


class LoopCore:
    """The model, its objectives and backup, and the epoch's bookkeeping of one training run.

    Args:
        strategy: the tf.distribute strategy; `build()` runs in its scope and returns
            (model, optimizer).
        spec: the feature spec (graphs.feature_spec.FeatureSpec).
        eval_dataset: makes the evaluation dataset (after the model), or None (a probe times
            training only).
        role: this process's role (backups, the chief's side effects, the fault to fire).
        objectives: the spec's loss, metrics and callbacks (strategies.objectives).
        on_nonfinite: `fail` or `restore` (graphs.nonfinite_guard).
        finite_split: one pass over a split, where the guard looks for a non-finite feature.
        writes_backup: whether this process writes the backup (the chief, the coordinator).
        background: whether backups may be written off the training thread.
    """

    def __init__(
        self,
        strategy: Any,
        build: Callable[[], tuple[Any, Any]],
        spec: Any,
        eval_dataset: Callable[[], Any] | None,
        role: TaskRole,
        objectives: Objectives | None,
        on_nonfinite: str,
        finite_split: Callable[[str], Any] | None,
        *,
        writes_backup: bool,
        background: bool = False,
    ) -> None:
        from baton.graphs.nonfinite_guard import NonFiniteGuard
        from baton.graphs.objectives import check_objectives

        self.spec, self.role = spec, role
        with strategy.scope():
            self.model, self.optimizer = build()
            self.optimizer.build(self.model.trainable_variables)
        self.eval_data = eval_dataset() if eval_dataset is not None else None
        self.objectives, self.outputs = (objectives or Objectives()).resolve(
            self.model, spec, self.eval_data)
        self.metrics = self.objectives.metrics()
        check_objectives(self.model, spec, self.objectives.loss, self.objectives.loss_name,
                         self.metrics)
        self.backup = (
            Backup(role.backup_dir, writes_backup, role.task_name, model=self.model,
                   optimizer=self.optimizer, fingerprint=role.fingerprint, background=background)
            if role.backup_dir is not None else None
        )
        self.restored: dict[str, Any] = (self.backup.restore() if self.backup else None) or {}
        self.history: list[dict[str, float]] = list(self.restored.get("history", []))
        # The epoch's training totals so far travel with a backup: a resume in the middle of an
        # epoch goes on adding to them, so the epoch's train_* metrics cover all of its steps.
        self.epoch_totals = list(self.restored.get("epoch_totals", ZERO_TOTALS))
        self.guard = NonFiniteGuard(on_nonfinite, self.model,
                                    self.objectives.loss_or_builtin(spec.label.task),
                                    finite_split)

    @property
    def task(self) -> str:
        return str(self.spec.label.task)

    def add(self, totals: Any) -> None:
        """A chunk's totals into the epoch's (its stop count is the chunk's own, not summed)."""
        self.epoch_totals = [a + float(b) for a, b in zip(self.epoch_totals, totals, strict=True)]
        self.epoch_totals[3] = 0.0

    def begin(self, callbacks: Any) -> None:
        self.model.stop_training = False
        from baton.strategies import callbacks as cbs

        cbs.lend_optimizer(self.model, self.optimizer)  # for callbacks that read or set the LR
        callbacks.on_train_begin()

    def close_epoch(self, epoch: int, step: int,
                    evaluate: Callable[[], Any] | None) -> dict[str, Any] | None:
        """The record of epoch `epoch` (1-based) ending at `step`: its training totals and, with
        `evaluate` (which returns the evaluation's totals), the eval metrics. None when the
        guard found a non-finite eval loss and restored the last finite epoch's weights."""
        record: dict[str, Any] = {
            "epoch": epoch,
            "step": step,
            **{f"train_{k}": v for k, v in totals_to_metrics(self.epoch_totals, self.task).items()},
        }
        if evaluate is not None:
            for m in self.metrics:
                m.reset()
            ev = totals_to_metrics(evaluate(), self.task)
            ev.update({m.name: m.result() for m in self.metrics})
            record.update({f"eval_{k}": v for k, v in ev.items()})
        if self.guard.evaluated(record.get("eval_loss"), epoch):
            self.guard.restore()
            return None
        return record

    def keep_epoch(self, record: dict[str, Any], callbacks: Any) -> None:
        """The epoch's record into the history, then the epoch-end callbacks (the backup)."""
        from baton.strategies import callbacks as cbs

        self.history.append(record)
        self.epoch_totals = list(ZERO_TOTALS)  # before the epoch-end backup: the next epoch's
        callbacks.on_epoch_end(record["epoch"] - 1, cbs.epoch_logs(record))

    def end(self, callbacks: Any) -> None:
        from baton.strategies import callbacks as cbs

        callbacks.on_train_end(cbs.epoch_logs(self.history[-1]) if self.history else None)
        cbs.lend_optimizer(self.model, None)  # not into the export
        self.objectives.confirm(self.model, self.outputs, self.eval_data)

    def result(self, *, step: int, resumed_from: int, seconds: float, batch_size: int,
               num_replicas: int, stopped_early: bool, info: dict[str, Any]) -> TrainResult:
        """The run's result; `info` holds the driver's own fields, first in train_info."""
        from baton.graphs import metric_records

        done = step - resumed_from
        return TrainResult(
            model=self.model,
            history=self.history,
            steps=step,
            resumed_from=resumed_from,
            seconds=seconds,
            examples_per_sec=done * batch_size / max(seconds, 1e-9),
            steps_per_sec=done / max(seconds, 1e-9),
            num_replicas=num_replicas,
            info={
                **info,
                **({"stopped_early_at_step": step} if stopped_early else {}),
                "outputs": self.outputs.to_dict(), **self.objectives.info,
                "metrics": metric_records.records(self.metrics),
                **({"nonfinite": self.guard.info} if self.guard.info else {}),
            },
        )
