"""A model function that calls `model.compile(...)`: what the training loop takes from it.

Keras users (and TFX's `run_fn`) build and compile in one function. Baton's loop does not call
`fit`, so a compiled loss, optimizer or metrics were silently dropped before. Now they are read:

- `loss`: trains the model where the spec sets no `loss:` (the spec's wins otherwise, and the
  train info says so). A loss object that states `from_logits` must agree with what the model
  outputs (graphs.model_outputs); a string or a function is built to fit it.
- `optimizer`: the optimizer where the spec sets no `optimizer:` (it was created inside the
  strategy scope, as the model function is called there).
- `metrics`: computed on the eval split beside the spec's `metrics:` (history `eval_<name>`).
- what Baton cannot honour is refused, naming it: several losses, `loss_weights`,
  `weighted_metrics` (Baton has no sample weights). `run_eagerly`, `jit_compile` and
  `steps_per_execution` are the spec's settings (`jit_compile:`, `steps_per_execution:`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from baton.errors import StageError


@dataclasses.dataclass(frozen=True)
class Compiled:
    """What `compile()` was given (the objects as passed), or nothing."""

    loss: Any = None
    optimizer: Any = None
    metrics: tuple[Any, ...] = ()

    def describe(self) -> dict[str, Any]:
        """For train_info.json: what the model's compile() set, by name."""
        from baton.graphs.objectives import object_name

        return {
            "loss": self.loss if isinstance(self.loss, str) or self.loss is None
            else object_name(self.loss),
            "optimizer": None if self.optimizer is None else type(self.optimizer).__name__,
            "metrics": [m if isinstance(m, str) else object_name(m) for m in self.metrics],
        }


def read(model: Any, name: str) -> Compiled | None:
    """The model's compile() arguments, or None when it was not compiled. StageError for what
    Baton cannot honour. `name` names the model function in messages."""
    if not getattr(model, "compiled", False):
        return None
    config = getattr(getattr(model, "_compile_config", None), "config", None)
    raw: dict[str, Any] = dict(config) if isinstance(config, Mapping) else {
        "loss": getattr(model, "loss", None), "optimizer": getattr(model, "optimizer", None)}
    refused = [f"{key}={raw[key]!r}" for key in ("loss_weights", "weighted_metrics")
               if raw.get(key) is not None]
    loss = raw.get("loss")
    if isinstance(loss, Mapping | list | tuple):
        refused.append(f"loss={loss!r} (one loss per output)")
    if refused:
        raise StageError(
            f"model function {name} compiled the model with {', '.join(refused)}: Baton trains "
            "one output with one loss and no sample weights. Compile it with a single loss, or "
            "not at all (loss:, metrics:, optimizer: in the train stage's config)")
    metrics = raw.get("metrics") or ()
    if isinstance(metrics, Mapping):  # {output_name: [...]}: one output here
        metrics = [m for ms in metrics.values() for m in (ms if isinstance(ms, list | tuple)
                                                            else [ms])]
    return Compiled(loss=loss, optimizer=getattr(model, "optimizer", None) or raw.get("optimizer"),
                    metrics=tuple(metrics))


def check_from_logits(loss: Any, probabilities: bool, reason: str, name: str) -> None:
    """A compiled loss object that states `from_logits` must say what the model outputs."""
    get_config = getattr(loss, "get_config", None)
    if get_config is None or isinstance(loss, type):
        return
    stated = get_config().get("from_logits")
    if stated is None or bool(stated) != probabilities:
        return  # absent, or it agrees (from_logits=False with probabilities)
    from baton.graphs.objectives import object_name

    what = "probabilities" if probabilities else "logits"
    fix = ("drop from_logits=True, or remove the softmax at its end" if probabilities
           else "pass from_logits=True, or end the model in a softmax")
    raise StageError(
        f"model function {name} compiled the model with loss {object_name(loss)}"
        f"(from_logits={bool(stated)}), but the model outputs {what} ({reason}): {fix}. "
        f"Received: from_logits={bool(stated)}")
