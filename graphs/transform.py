"""What both ends of the transform share: the label's encoding and `analysis.json`.

The transform itself is a preprocessing_fn on baton.tft, whether the user wrote it or it is
the built-in column kinds (graphs.column_kinds); graphs.tft.module exports it as the transform
SavedModel. The label is Baton's to encode in every case: `transform_label` maps raw labels to
int64 class ids (-1 for an unknown class, a row the apply pass drops) or float32 regression
targets. `analysis.json` beside the SavedModel records the label's classes and, for the
built-in kinds, each column's constants (what an edge device applies beside the TFLite model).
"""

from __future__ import annotations

ANALYSIS_FILE = "analysis.json"


def apply_label(tf, task, table, raw_label):  # noqa: ANN001, ANN201
    """Class ids (int64, -1 for an unknown class) or float32 targets: graphs.tft.module's
    `transform_label`."""
    if task == "classification":
        return table.lookup(raw_label)
    return tf.cast(raw_label, tf.float32)


def vocabulary_table(tf, vocabulary):  # noqa: ANN001, ANN201
    keys = tf.constant(list(vocabulary), tf.string)
    values = tf.range(len(vocabulary), dtype=tf.int64)
    return tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, values), -1)
