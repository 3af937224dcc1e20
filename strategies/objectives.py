"""What a training job adds to the loop besides the model: its loss, eval metrics and callbacks.

`Objectives` is what both trainers (strategies/trainer.py, strategies/ps_trainer.py) take;
`for_job` makes it from a TrainJob's `loss:`, `metrics:` and `callbacks:` on each task. The loss
and metrics are settled once the model exists (`Objectives.resolve`): built for what it outputs
(logits or probabilities, graphs.model_outputs) and with what its own `compile()` set where the
spec sets nothing (graphs.compiled).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from baton.graphs.feature_spec import FeatureSpec


@dataclasses.dataclass
class Objectives:
    """What the spec adds to the loop (graphs.objectives, strategies.callbacks), made per task.

    `loss`: `(labels, logits) -> per-example loss` or None (the built-in); `metrics()`: eval
    metrics (graphs.objectives.EvalMetric), made outside the strategy scope; `callbacks()`: the
    user's Keras callbacks; `loss_name`: how errors name the loss. `for_model(model, outputs)`:
    when set, the loss and metrics are made once the model exists, for what it outputs
    (graphs.model_outputs.Outputs) and with what its compile() set (`for_job`);
    `info`: what that resolution adds to train_info.json; `model_name`: how errors name the
    model function.
    """

    loss: Callable[[Any, Any], Any] | None = None
    metrics: Callable[[], list[Any]] = list
    callbacks: Callable[[], list[Any]] = list
    loss_name: str = "the built-in loss"
    for_model: Callable[[Any, Any], Objectives] | None = None
    info: dict[str, Any] = dataclasses.field(default_factory=dict)
    model_name: str = "the model"

    def resolve(self, model: Any, spec: FeatureSpec, eval_ds: Any) -> tuple[Objectives, Any]:
        """(the objectives for `model`, its graphs.model_outputs.Outputs), decided on the
        first batch of `eval_ds` (None: from the model's structure alone)."""
        from baton.graphs import model_outputs

        outputs = model_outputs.decide(model, spec.label.task, spec.label.num_classes,
                                       model_outputs.sample(model, eval_ds), self.model_name)
        made = self.for_model(model, outputs) if self.for_model is not None else self
        return dataclasses.replace(made, callbacks=self.callbacks,
                                   model_name=self.model_name), outputs

    def confirm(self, model: Any, outputs: Any, eval_ds: Any) -> None:
        """After training: probabilities found from the rows still are (model_outputs.confirm)."""
        from baton.graphs import model_outputs

        if outputs.from_rows:
            model_outputs.confirm(model, outputs, model_outputs.sample(model, eval_ds),
                                  self.model_name)

    def loss_or_builtin(self, task: str) -> Callable[[Any, Any], Any]:
        """The per-example loss training uses (the built-in when `loss` is None)."""
        from baton.graphs.totals import loss_per_example

        return self.loss or (lambda labels, logits: loss_per_example(task, labels, logits))


def for_job(job: Any) -> Objectives:
    """A TrainJob's loss, eval metrics and callbacks for the trainers (made on each task).

    The loss and metrics are made once the model exists (`Objectives.for_model`): built for
    what it outputs (logits or probabilities, graphs.model_outputs), with what its `compile()`
    set where the spec sets nothing (graphs.compiled).
    """
    from baton.errors import StageError
    from baton.graphs import compiled as C
    from baton.graphs.model_fn import describe
    from baton.graphs.objectives import make_loss, make_metrics
    from baton.graphs.user_refs import RefError

    spec = job.spec()
    task, k = spec.label.task, spec.label.num_classes
    search_dir = job.code_dir or None

    def field(name: str, make: Any) -> Any:
        try:
            return make()
        except RefError as exc:
            raise StageError(f"train.config.{name}: {exc}") from None

    def callbacks() -> list[Any]:
        from baton.strategies.callbacks import make_user_callbacks

        return field("callbacks", lambda: make_user_callbacks(job.settings.callbacks, search_dir))

    def for_model(model: Any, outputs: Any) -> Objectives:
        logits = not outputs.probabilities
        compiled = C.read(model, describe(job.settings.model))
        loss_value: Any = job.settings.loss
        info: dict[str, Any] = {}
        if compiled is not None:
            info = {"compile": compiled.describe()}
            if not job.settings.loss and compiled.loss is not None:
                C.check_from_logits(compiled.loss, outputs.probabilities, outputs.reason,
                                    describe(job.settings.model))
                loss_value = compiled.loss
                info["compile"]["used"] = ["loss"]
            elif compiled.loss is not None:
                info["compile"]["replaced_by_spec"] = ["loss"]
            if compiled.optimizer is not None:
                key = "replaced_by_spec" if job.settings.optimizer else "used"
                info["compile"].setdefault(key, []).append("optimizer")
            if compiled.metrics:
                info["compile"].setdefault("used", []).append("metrics")
        metric_values = [*job.settings.metrics, *(compiled.metrics if compiled is not None else ())]
        return Objectives(
            loss=field("loss", lambda: make_loss(loss_value, task, k, search_dir, logits)),
            metrics=lambda: field("metrics", lambda: make_metrics(metric_values, task, k,
                                                                  search_dir, logits)),
            callbacks=callbacks,
            loss_name=job.settings.loss or (f"compile(loss={info['compile']['loss']!r})"
                                   if "used" in info.get("compile", {})
                                   and "loss" in info["compile"]["used"]
                                   else "the built-in loss"),
            info=info,
        )

    # as made for a model of logits with no compile(): what `for_model` refines
    return Objectives(
        loss=field("loss", lambda: make_loss(job.settings.loss, task, k, search_dir)),
        metrics=lambda: field("metrics", lambda: make_metrics(job.settings.metrics, task, k, search_dir)),
        callbacks=callbacks, loss_name=job.settings.loss or "the built-in loss", for_model=for_model,
        model_name=describe(job.settings.model))
