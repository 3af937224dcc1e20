"""graphs.nonfinite over the ragged and sparse float features a preprocessing_fn may return
(issue 34): a NaN inside a row's tokens is found and named as in a dense feature."""

from __future__ import annotations

import numpy as np
import pytest


def _batches(feature):  # noqa: ANN001, ANN202
    import tensorflow as tf

    return [({"ok": tf.constant([1.0, 2.0, 3.0]), "f": feature}, tf.constant([0, 1, 0]))]


@pytest.mark.parametrize("kind", ["ragged", "sparse", "dense"])
def test_first_cause_names_a_composite_feature_holding_nan(kind: str) -> None:
    import tensorflow as tf

    from baton.graphs.nonfinite import bad_row_mask, first_cause

    dense = tf.constant([[1.0, 0.0], [2.0, np.inf], [0.0, np.nan]])
    feature = {"ragged": tf.RaggedTensor.from_tensor(dense, lengths=[1, 2, 2]),
               "sparse": tf.sparse.from_dense(dense), "dense": dense}[kind]
    assert bad_row_mask(tf, feature).numpy().tolist() == [False, True, True]
    msg = first_cause(_batches(feature), model=None, loss_fn=None, split="train")
    assert msg is not None and msg.startswith(
        "feature 'f' is +inf in 2 of the 3 train rows of batch 1 (first at train row 1)")


def test_ids_and_strings_of_any_encoding_are_not_read_as_numbers() -> None:
    import tensorflow as tf

    from baton.graphs.nonfinite import first_cause

    class Finite:
        weights: list = []

        def __call__(self, features, training=False):  # noqa: ANN001, ANN204, ARG002
            return np.zeros((3, 2), np.float32)

    for feature in (tf.ragged.constant([[1], [], [2, 3]], tf.int64),
                    tf.sparse.from_dense(tf.constant([["a"], [""], ["b"]]))):
        assert first_cause(_batches(feature), Finite(), lambda y, p: np.zeros(3), "eval") is None
