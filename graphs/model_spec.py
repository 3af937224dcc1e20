"""What a model function is handed: `function(spec: baton.ModelSpec) -> keras.Model`.

The contract of an own model (TFX's `run_fn(fn_args)`, reduced to what a model needs): the
transformed features as `keras.Input`s of the right dtype and shape, the feature spec they
come from, the task and its number of classes, the label's name, and the stage's
`model_params:` mapping exactly as written in the spec; and what TFX hands `run_fn` besides
(`fn_args.custom_config`, `fn_args.hyperparameters`): the stage's `custom_config:` as written
and the run's hyperparameters (its learning rate, batch size, steps and `model_params`) as one
mapping, so `hparams.get("learning_rate")` reads the same in both. Baton calls the function
inside the strategy's scope on every task, so the variables it creates are mirrored or sharded
as the strategy decides; the model is called on the features dict and returns logits
`[B, num_classes]` (or probabilities: a softmax at its end, graphs/model_outputs.py; `[B]` or
`[B, 1]` for regression).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from baton.graphs.feature_spec import FeatureSpec, Task


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """Everything a model function needs to build a model for the transformed features.

    Attributes:
        inputs: feature name -> `keras.Input` of the transformed feature's kind: its dtype
            (float32, int64 or string) and shape (`[B]` for a scalar, `[B, *shape]` for a
            tensor, e.g. an image `[B, H, W, C]`), `ragged=True` for a ragged feature (e.g.
            token ids `[B, None]`), `sparse=True` for a sparse one.
        feature_spec: the transform's FeatureSpec (vocabulary sizes, images, raw features).
        task: "classification" or "regression".
        num_classes: classes of the label (1 for regression).
        label: the label's name.
        params: the stage's `model_params:` mapping, as written in the spec.
        custom_config: the stage's `custom_config:` mapping, as written (TFX's
            `fn_args.custom_config`).
        hyperparameters: the run's hyperparameters (TFX's `fn_args.hyperparameters`):
            `learning_rate`, `batch_size`, `epochs`, `steps`, `eval_steps`, `seed`, and every
            `model_params` entry.
    """

    inputs: Mapping[str, Any]
    feature_spec: FeatureSpec
    task: Task
    num_classes: int
    label: str
    params: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    custom_config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    hyperparameters: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_feature_spec(cls, spec: FeatureSpec, params: Mapping[str, Any] | None = None,
                          custom_config: Mapping[str, Any] | None = None,
                          hyperparameters: Mapping[str, Any] | None = None) -> ModelSpec:
        """A ModelSpec with fresh `keras.Input`s for `spec` (call it inside the strategy scope)."""
        import keras

        inputs = {f.name: model_input(keras, f) for f in spec.features}
        return cls(inputs=inputs, feature_spec=spec, task=spec.label.task,
                   num_classes=spec.label.num_classes, label=spec.label.name,
                   params=dict(params or {}), custom_config=dict(custom_config or {}),
                   hyperparameters=dict(hyperparameters or {}))


def model_input(keras: Any, feature: Any) -> Any:
    """The `keras.Input` of one transformed feature, of its kind (dense, ragged or sparse)."""
    encoding = getattr(feature, "encoding", "dense")
    return keras.Input(shape=tuple(feature.shape), dtype=feature.dtype, name=feature.name,
                       ragged=encoding == "ragged" or None, sparse=encoding == "sparse" or None)
