"""A user's model module for the cluster tests: copied beside the job as `tiny_model.py`.

It imports its custom layer from a helper module (`tiny_layers.py`, also copied), as a user's
code would; the task processes import both from the job's `code_dir`, never from a pickle.
"""

import json
import os

import keras
from keras import layers, ops
from tiny_layers import Scale


def build(spec):
    parts = [layers.Flatten(name=f"{f.name}_col")(spec.inputs[f.name])
             for f in spec.feature_spec.numeric]
    parts += [layers.Embedding(f.vocab_size, 4, name=f"{f.name}_embedding")(spec.inputs[f.name])
              for f in spec.feature_spec.categorical]
    x = layers.Concatenate(name="features")(parts)
    x = layers.Dense(spec.params.get("units", 16), activation="relu", name="hidden")(x)
    x = Scale(name="scale")(x)
    return keras.Model(spec.inputs, layers.Dense(spec.num_classes, name="logits")(x))


def hinge_loss(y_true, y_pred):
    """A per-example multi-class hinge on logits (a custom loss)."""
    k = ops.shape(y_pred)[-1]
    onehot = ops.one_hot(ops.cast(y_true, "int32"), k)
    true_logit = ops.sum(y_pred * onehot, axis=-1)
    others = ops.max(y_pred - 1e9 * onehot, axis=-1)
    return ops.relu(1.0 + others - true_logit)


class _Noop(keras.callbacks.Callback):
    pass


def stop_on_worker_1():
    """EarlyStopping on worker 1 only: worker 0 must stop at the same step all the same."""
    task = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task", {})
    if task.get("type") == "worker" and task.get("index") == 1:
        return keras.callbacks.EarlyStopping(monitor="val_loss", patience=0, min_delta=100.0)
    return _Noop()


class _PoisonAt(keras.callbacks.Callback):
    """Every weight NaN when epoch `epoch` (0-based) begins: a diverged training."""

    def __init__(self, epoch):
        super().__init__()
        self.epoch = epoch

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == self.epoch:
            import numpy as np

            self.model.set_weights([np.full_like(w, np.nan) for w in self.model.get_weights()])


def poison_second_epoch():
    return _PoisonAt(1)
