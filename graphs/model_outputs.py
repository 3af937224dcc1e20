"""What a classifier's output is: logits, or probabilities already (a softmax at its end).

Baton's contract is logits (graphs/model_spec.py), but a model written for Keras' `fit` often
ends in `Dense(K, activation="softmax")` (TFX's penguin model does). Trained as logits, such a
model learns to win the argmax while its served "probabilities" are a softmax of probabilities,
squeezed towards uniform: TFX's penguin model, trained that way, reached accuracy 0.98 and
served a top probability of 0.576. So the output is read before the first step, from the model
and from what it answers on real rows:

- its last operation is a softmax (a `softmax` activation, a `Softmax` layer, `keras.ops.softmax`):
  probabilities;
- its last operation is a sigmoid on more than one class: per-class scores that do not share one
  distribution; refused, naming the fix (softmax, or no activation);
- its last operation is a layer with a kernel and no activation (`Dense(K)`): logits, whatever
  its rows sum to before training;
- otherwise, rows of its output on the eval batch that are non-negative and sum to 1 within the
  output dtype's precision (a subclassed model, a softmax inside a custom layer or a nested
  model): probabilities, confirmed on the same batch once trained (`confirm`);
- anything else: logits.

Probabilities are then used as such everywhere: the loss and metrics without `from_logits`, the
evaluation and the served `probabilities` without another softmax (`to_probabilities`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from baton.errors import StageError

Kind = Literal["logits", "probabilities"]
LOGITS: Kind = "logits"
PROBABILITIES: Kind = "probabilities"
# |sum - 1| below which a row counts as a distribution: float32 softmax rows of up to a few
# thousand classes sum to 1 within ~1e-6; a logit row sums to 1 within 1e-4 by chance only
SUM_TOLERANCE = 1e-4


@dataclasses.dataclass(frozen=True)
class Outputs:
    """The decision: `kind`, and how it was reached (train_info.json and the stage's log)."""

    kind: Kind = LOGITS
    reason: str = "the model's output is not a probability distribution"
    from_rows: bool = False  # decided from the rows on a batch, not from the model's structure

    @property
    def probabilities(self) -> bool:
        return self.kind == PROBABILITIES

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "reason": self.reason}


def last_activation(model: Any) -> tuple[str, str] | None:
    """(activation, layer name) of the operation that makes a functional or Sequential model's
    output, when it is a softmax or a sigmoid, or ("linear", name) when it is a layer with a
    kernel and no activation (`Dense(K)`: logits); None otherwise (or for a subclassed model)."""
    try:
        outputs = model.outputs
    except (AttributeError, ValueError):
        return None
    if not outputs or len(outputs) != 1:
        return None
    history = getattr(outputs[0], "_keras_history", None)
    op = getattr(history, "operation", None)
    if op is None:
        return None
    name = str(getattr(op, "name", type(op).__name__))
    kind = type(op).__name__.lower()
    if kind in ("softmax", "sigmoid"):
        return kind, name
    activation = getattr(getattr(op, "activation", None), "__name__", "")
    if activation in ("softmax", "sigmoid"):
        return activation, name
    if activation == "linear" and getattr(op, "kernel", None) is not None:
        return "linear", name  # not an Activation("linear"), a mixed-precision cast: no evidence
    return None


def rows_are_distributions(values: Any) -> bool:
    """Every row non-negative and summing to 1 (within SUM_TOLERANCE, or the precision of a
    half-precision output: a float16 softmax of 3 classes sums to 1 within ~1e-3): a softmax's
    output."""
    import numpy as np

    raw = np.asarray(values)
    v = raw.astype("float64")
    if v.ndim != 2 or v.shape[0] == 0 or v.shape[1] < 2 or not np.isfinite(v).all():
        return False
    tolerance = max(SUM_TOLERANCE, 2 * v.shape[1] * _eps(raw.dtype))
    return bool((v >= 0).all() and (np.abs(v.sum(axis=1) - 1.0) <= tolerance).all())


def _eps(dtype: Any) -> float:
    """The machine epsilon of a float dtype (bfloat16's too, which numpy knows through
    ml_dtypes only)."""
    import numpy as np

    try:
        return float(np.finfo(dtype).eps)
    except (TypeError, ValueError):
        import ml_dtypes

        return float(ml_dtypes.finfo(dtype).eps)


def sample(model: Any, dataset: Any) -> Any:
    """The model's output (numpy) on the first batch of `dataset` of `(features, labels)`, or
    None without a dataset (or an empty one)."""
    import numpy as np

    if dataset is None:
        return None
    for features, _ in dataset.take(1):
        return np.asarray(model(features, training=False))
    return None


def decide(model: Any, task: str, num_classes: int, sample: Any = None,
           name: str = "the model") -> Outputs:
    """Logits or probabilities for a classifier (regression: always its values, `logits`).

    `sample`: the model's output on the eval batch (numpy), or None when there is none (a
    topology probe trains without evaluation). `name` names the model function in errors.
    Raises StageError for a sigmoid over several classes.
    """
    if task == "regression":
        return Outputs(LOGITS, "regression: the output is the prediction")
    found = last_activation(model)
    if found is not None:
        activation, layer = found
        if activation == "softmax":
            return Outputs(PROBABILITIES, f"the last layer {layer!r} applies a softmax")
        if activation == "linear":
            return Outputs(LOGITS, f"the last layer {layer!r} has no activation")
        if num_classes > 1:
            raise StageError(
                f"model function {name} returned a model whose last layer {layer!r} applies a "
                f"sigmoid to {num_classes} classes: its scores are not one distribution over "
                f"the classes of a single-label task. End it in Dense({num_classes}, "
                "activation='softmax') (probabilities) or in Dense("
                f"{num_classes}) with no activation (logits). Received: activation='sigmoid'")
    if sample is not None and rows_are_distributions(sample):
        return Outputs(PROBABILITIES, "its rows on the eval batch are non-negative and sum to 1",
                       from_rows=True)
    return Outputs(LOGITS, "the model's output is not a probability distribution")


def confirm(model: Any, outputs: Outputs, sample: Any, name: str = "the model") -> None:
    """After training: probabilities found from the rows (`decide`) must still be rows that
    sum to 1 on the same batch (`sample`: the trained model's output, None to skip). A model
    whose rows summed to 1 only by its initial weights was trained with from_logits=False on
    logits, and its outputs would be served as probabilities: StageError, with the fix."""
    import numpy as np

    if not outputs.from_rows or not outputs.probabilities or sample is None:
        return
    if rows_are_distributions(sample):
        return
    v = np.asarray(sample, dtype="float64")
    sums = np.round(v.sum(axis=1)[:4], 4).tolist()
    raise StageError(
        f"model function {name} was taken to output probabilities (its rows on the eval batch "
        "summed to 1 before training), but after training they do not (row sums "
        f"{sums}, smallest value {float(v.min()):.4g}): it outputs logits. End it in a softmax "
        "(a Softmax layer or activation='softmax') to output probabilities, or in a layer whose "
        "rows do not sum to 1 at initialisation to output logits")


def to_probabilities(outputs: Any, kind: str) -> Any:
    """Class probabilities (numpy) from a classifier's outputs of `kind`."""
    import numpy as np

    if kind == PROBABILITIES:
        return np.asarray(outputs, dtype="float32")
    z = outputs - outputs.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def probabilities_op(outputs: Any, kind: str) -> Any:
    """`to_probabilities` inside a TensorFlow graph (the serving signatures)."""
    import tensorflow as tf

    outputs = tf.cast(outputs, tf.float32)
    return outputs if kind == PROBABILITIES else tf.nn.softmax(outputs, axis=-1)
