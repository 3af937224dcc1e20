"""A non-finite training or eval loss stops training: a model trained on NaN never ships.

Before, a NaN loss went on for every epoch; the model was written, blessed on a NaN loss and
pushed. Both trainers (strategies/trainer.py, strategies/ps_trainer.py) hand the guard each
chunk's training loss and each epoch's eval loss. On the first that is not finite, the job's
`on_nonfinite` policy decides:

- `fail` (the default): a one-line StageError naming the loss, the epoch and steps, and the
  first non-finite feature, weight, output or per-row loss found in the split
  (graphs.nonfinite.first_cause), with the fix;
- `restore`: the weights of the last epoch whose training and eval losses were all finite are
  put back (kept in memory at each such epoch end), training ends there and the train info
  says so; with no such epoch, it fails as above.

The weights are checked too, at every epoch end (one reduction per variable, where it lives):
TensorFlow's default executor runs `Dense(activation="relu")` as one fused oneDNN kernel whose
ReLU turns a NaN feature into 0 on the way forward, so every loss stays finite, while the
backward pass writes NaN into the first kernel; the model then predicts one class for every
row. Multi-worker, parameter-server and large one-device runs (graphs.executor) train that way.

Every worker of a multi-worker job sees the same all-reduced totals and holds the same weights,
so all of them stop at the same step. The guard reads losses and weights only (no strategy):
it is graph-side, beside the search for the cause (graphs.nonfinite).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from baton.errors import StageError


class NonFiniteGuard:
    """Watches the losses of one training run (see the module docstring)."""

    def __init__(self, policy: str, model: Any, loss_fn: Callable[[Any, Any], Any],
                 finite_split: Callable[[str], Any] | None) -> None:
        if policy not in ("fail", "restore"):
            raise ValueError(f"on_nonfinite must be 'fail' or 'restore'. Received: {policy!r}")
        self.policy, self.model, self.loss_fn = policy, model, loss_fn
        self.finite_split = finite_split
        self.kept: list[Any] | None = None
        self.kept_epoch = 0
        self.info: dict[str, Any] = {}

    def chunk(self, loss_sum: float, epoch: int, first_step: int, last_step: int) -> bool:
        """After a chunk: True when training must end here and `restore` be called; raises
        under `fail` (and under `restore` with nothing kept)."""
        if math.isfinite(float(loss_sum)):
            return False
        return self._tripped("training", f"the training loss is not finite in epoch {epoch} "
                             f"(steps {first_step + 1}-{last_step})", epoch, "train")

    def evaluated(self, eval_loss: float | None, epoch: int) -> bool:
        """After an epoch's evaluation: True when training must end and `restore` be called;
        the epoch's weights are kept (under `restore`) when its losses and weights were all
        finite."""
        from baton.graphs.nonfinite import weights_finite

        if eval_loss is not None and not math.isfinite(float(eval_loss)):
            return self._tripped("eval", f"the eval loss is not finite in epoch {epoch} (its "
                                 "evaluation)", epoch, "eval")
        if not weights_finite(self.model):
            return self._tripped(None, f"the model's weights are not finite at the end of epoch "
                                 f"{epoch}, while its losses were finite (a fused kernel, "
                                 "oneDNN's MatMul+Relu, turns NaN into numbers on the way "
                                 "forward, not on the way back)", epoch, "train")
        if self.policy == "restore":
            self.kept, self.kept_epoch = self.model.get_weights(), epoch
        return False

    def restore(self) -> None:
        """Put back the kept weights (after `chunk` or `evaluated` returned True; the parameter
        server driver calls it once the closures in flight have run)."""
        assert self.kept is not None
        self.model.set_weights(self.kept)

    def _tripped(self, which: str | None, what: str, epoch: int, split: str) -> bool:
        """`which` loss was not finite (None: the weights), `what` says so in a sentence."""
        from baton.graphs.nonfinite import first_cause

        cause = None
        if self.finite_split is not None:
            cause = first_cause(self.finite_split(split), self.model, self.loss_fn, split)
        cause = cause or (f"no non-finite feature, weight, output or per-row loss was found in a "
                          f"pass over the {split} split")
        self.info = {"loss": which, "what": what, "epoch": epoch, "cause": cause,
                     "policy": self.policy}
        if self.policy == "restore" and self.kept is not None:
            self.info["restored_epoch"] = self.kept_epoch
            return True
        hint = ("; no epoch ended with finite losses to restore" if self.policy == "restore"
                else "; on_nonfinite: restore keeps the last epoch whose losses were finite")
        raise StageError(f"{what}: {cause}{hint}")
