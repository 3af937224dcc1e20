"""A TFX penguin-style Keras model, moved into Baton (docs/own-model.md walks through it).

`build(spec)` is the model function `train.config.model: penguin_model:build` names: Baton
calls it inside the strategy scope on every task, with a `baton.ModelSpec`, and trains what it
returns with its own loop (every strategy, backups, fault tolerance, release, TFJob).
"""

import keras
from keras import layers, ops
from penguin_layers import GatedDense

import baton


def build(spec: baton.ModelSpec) -> keras.Model:
    """Numerics as columns, categoricals embedded, gated dense layers, logits per species."""
    units = spec.params.get("units", [32, 16])
    embed = spec.params.get("embedding_dim", 4)
    parts = []
    for f in spec.feature_spec.numeric:  # [B] (or [B, D]) -> [B, 1] (or [B, D])
        parts.append(layers.Flatten(name=f"{f.name}_col")(spec.inputs[f.name]))
    for f in spec.feature_spec.categorical:
        parts.append(layers.Embedding(f.vocab_size, embed, name=f"{f.name}_embedding")(
            spec.inputs[f.name]))
    x = layers.Concatenate(name="features")(parts)
    for i, u in enumerate(units):
        x = GatedDense(u, name=f"gated_{i}")(x)
    logits = layers.Dense(spec.num_classes, name="logits")(x)
    return keras.Model(spec.inputs, logits, name="penguin_gated")


def smoothed_crossentropy(y_true, y_pred, smoothing: float = 0.1):
    """Label-smoothed softmax cross-entropy per example: class ids [B], logits [B, K] -> [B]."""
    k = ops.shape(y_pred)[-1]
    target = ops.one_hot(ops.cast(y_true, "int32"), k) * (1.0 - smoothing) + smoothing / k
    return keras.losses.categorical_crossentropy(target, y_pred, from_logits=True)


def optimizer() -> keras.optimizers.Optimizer:
    """Adam with a decaying learning rate (a schedule, which a plain identifier cannot say)."""
    schedule = keras.optimizers.schedules.ExponentialDecay(0.02, decay_steps=100, decay_rate=0.8)
    return keras.optimizers.Adam(schedule)
