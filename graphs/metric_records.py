"""The Keras metrics a model was trained with, recorded so the release gate can compute them.

Training evaluates the spec's `metrics:` and the model's own `compile(metrics=...)` at every
epoch (history `eval_<name>`). The evaluate stage's gate takes a threshold on any of them by its
Keras name (`sparse_categorical_accuracy: 0.9`), as TFX's Evaluator takes the Keras metrics a
model was compiled with: each metric is recorded in train_info.json as Keras serializes it
(with the `from_logits` it was built with and how its targets are shaped), and evaluate
rebuilds it and runs it on the model's outputs over the raw eval split.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def records(metrics: Sequence[Any]) -> list[dict[str, Any]]:
    """`[{"name", "one_hot", "config"}]` of graphs.objectives.EvalMetric objects; `config` is
    None for a metric Keras cannot serialize (it is then reported, not recomputed)."""
    import keras

    out = []
    for m in metrics:
        try:
            config = keras.saving.serialize_keras_object(m.metric)
        except Exception:  # noqa: BLE001 - a user metric Keras cannot serialize
            config = None
        out.append({"name": m.name, "one_hot": bool(m.one_hot), "config": config})
    return out


def rebuild(recorded: Sequence[Mapping[str, Any]], task: str, num_classes: int,
            custom_objects: Mapping[str, Any] | None = None) -> list[Any]:
    """EvalMetric objects of the recorded metrics (those Keras can deserialize)."""
    import keras

    from baton.graphs.objectives import EvalMetric

    out = []
    for r in recorded:
        if r.get("config") is None:
            continue
        try:
            metric = keras.saving.deserialize_keras_object(
                r["config"], custom_objects=dict(custom_objects or {}))
        except Exception:  # noqa: BLE001 - its module is gone: not recomputed
            continue
        if isinstance(metric, keras.metrics.Metric):
            out.append(EvalMetric(metric, bool(r.get("one_hot")), task, num_classes))
    return out


def compute(metrics: Sequence[Any], labels: Any, outputs: Any,
            batch_size: int = 4096) -> dict[str, float]:
    """{name: value} of EvalMetric objects over all rows (numpy labels and model outputs)."""
    import numpy as np

    values = {}
    for m in metrics:
        m.reset()
        for start in range(0, len(labels), batch_size):
            m.update(np.asarray(labels[start:start + batch_size]),
                     np.asarray(outputs[start:start + batch_size]))
        values[m.name] = m.result()
    return values


def higher_is_better(metric: Any) -> bool | None:
    """Whether a higher value of an EvalMetric is better, as Keras records it (`_direction`,
    "up" or "down", what its EarlyStopping reads under mode="auto"); None when Keras records
    none (a user's function, averaged)."""
    direction = getattr(metric.metric, "_direction", None)
    return {"up": True, "down": False}.get(direction) if isinstance(direction, str) else None
