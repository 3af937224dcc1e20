"""A training run's compiled steps, made in one call once the model exists: what a loop drives.

The drivers in strategies (trainer: one-device and mirrored strategies in lockstep; ps_trainer:
closures scheduled on parameter-server workers) decide when a chunk runs, where, and what its
totals mean for backups, callbacks and stopping. The TensorFlow they run is made here: the
training chunk (graphs.steps.make_train_chunk), the evaluation (make_eval_fn) on the executor
chosen for the per-replica batch (graphs.executor), the reading of both one's totals
(`metrics`), and how they were compiled for train_info (`info`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from baton.graphs.eval_step import make_eval_fn
from baton.graphs.executor import decide, executor_of
from baton.graphs.feature_spec import FeatureSpec
from baton.graphs.step_options import StepOptions, xla_compiled_functions
from baton.graphs.steps import make_train_chunk
from baton.graphs.totals import totals_to_metrics


@dataclasses.dataclass(frozen=True)
class TrainProgram:
    # (iterator, n_steps, stop_flag[, bounds]) -> totals (graphs.totals.TOTALS[, timings])
    chunk: Any
    evaluate: Any | None  # (dataset[, part, batches]) -> totals; None: no evaluation
    task: str  # the label's task: how totals read as metrics

    def metrics(self, totals: Any) -> dict[str, float]:
        """A chunk's or an evaluation's totals as metrics (loss, and accuracy for classes)."""
        return totals_to_metrics(totals, self.task)

    def info(self) -> dict[str, Any]:
        """train_info's record of how the chunk ran (after its first call): the functions XLA
        compiled and TensorFlow's executor."""
        return {"xla_compiled": xla_compiled_functions(self.chunk),
                "executor": executor_of(self.chunk)}


def compile_program(
    model: Any,
    optimizer: Any,
    spec: FeatureSpec,
    loss_fn: Any,
    metrics: Any,
    global_batch_size: int,
    strategy: Any,
    options: StepOptions | None = None,
    *,
    balance: bool = False,
    take_rows: Any = None,
    max_steps: int | None = None,
    evaluate: bool = True,
) -> TrainProgram:
    """The chunk and (with `evaluate`) the evaluation of `model` under `strategy`; arguments as
    graphs.steps.make_train_chunk's (`loss_fn` None: the built-in loss)."""
    chunk = make_train_chunk(
        model, optimizer, spec, global_batch_size, strategy, options, loss_fn,
        balance=balance, take_rows=take_rows, max_steps=max_steps,
    )
    executor = decide((options or StepOptions()).executor, strategy, model,
                      global_batch_size // strategy.num_replicas_in_sync)
    return TrainProgram(
        chunk=chunk,
        evaluate=make_eval_fn(model, spec, loss_fn, metrics, executor) if evaluate else None,
        task=str(spec.label.task),
    )
