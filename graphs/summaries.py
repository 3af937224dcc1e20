"""TensorBoard scalar summaries without the `tensorboard` package.

`tf.summary.scalar` lives in the tensorboard distribution, which is not installed here (and the
chief only needs to *write* events). `tf.summary.write` is core TensorFlow; tagging the tensor
with the scalars plugin's metadata makes TensorBoard show it exactly like `tf.summary.scalar`.
"""

from __future__ import annotations

from typing import Any

_METADATA: Any = None


def scalar(name: str, value: float, step: int | None = None) -> None:
    """Write one scalar to the default summary writer (a no-op without one)."""
    import tensorflow as tf
    from tensorflow.core.framework import summary_pb2

    global _METADATA
    if _METADATA is None:
        meta = summary_pb2.SummaryMetadata()
        meta.plugin_data.plugin_name = "scalars"
        _METADATA = meta.SerializeToString()
    tf.summary.write(name, tf.constant(float(value), tf.float32), step=step, metadata=_METADATA)
