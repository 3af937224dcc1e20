"""graphs.nonfinite_guard: what stops a training run whose numbers are no longer numbers."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from baton.errors import StageError
from baton.graphs.nonfinite_guard import NonFiniteGuard


def _model() -> keras.Model:
    x = keras.Input((2,))
    return keras.Model(x, keras.layers.Dense(3)(keras.layers.Dense(4, activation="relu")(x)))


def test_nonfinite_weights_stop_training_though_the_losses_are_finite():
    """A fused MatMul+Relu turns a NaN feature into 0 on the way forward (a finite loss) and
    writes NaN into the kernel on the way back: the epoch-end check sees the weights."""
    model = _model()
    guard = NonFiniteGuard("fail", model, lambda y, p: p[:, 0], None)
    assert not guard.evaluated(1.05, 1)
    kernel = model.trainable_variables[0]
    kernel.assign(np.full(kernel.shape, np.nan, "float32"))
    with pytest.raises(StageError, match=r"the model's weights are not finite at the end of "
                                         r"epoch 2, while its losses were finite"):
        guard.evaluated(1.04, 2)


def test_restore_keeps_only_epochs_whose_weights_are_finite():
    model = _model()
    guard = NonFiniteGuard("restore", model, lambda y, p: p[:, 0], None)
    assert not guard.evaluated(1.0, 1)
    good = [w.copy() for w in model.get_weights()]
    kernel = model.trainable_variables[0]
    kernel.assign(np.full(kernel.shape, np.inf, "float32"))
    assert guard.evaluated(0.9, 2)  # tripped: not kept, epoch 1 put back
    guard.restore()
    assert guard.info["restored_epoch"] == 1 and guard.info["loss"] is None
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), good, strict=True))
