"""An embedding table split into row shards, each its own variable: model parallelism on PS.

Under the parameter-server strategy every variable lives on one PS task, assigned round-robin.
A large embedding table split into `num_shards` variables therefore spreads over the PS tasks:
each holds a slice of the rows, lookups gather on the PS that owns the rows
(`tf.nn.embedding_lookup` with a list of tables, "div" partitioning), and only the looked-up rows
travel to the worker.

Why not TensorFlow's variable partitioner (`MinSizePartitioner`)? It produces a ShardedVariable,
which Keras 3 optimizers cannot update (`distribution.extended.update` refuses it: "ShardedVariable
doesn't support being used as a reference"). Separate Keras variables are updated normally.

The exported `model.keras` never contains this layer: `merge_into` rebuilds a plain `Embedding`
with the shards concatenated, so evaluation and serving need no custom objects.
"""

from __future__ import annotations

from typing import Any

import keras


def shard_rows(input_dim: int, num_shards: int) -> list[int]:
    """Rows per shard under "div" partitioning: the first `input_dim % n` shards get one extra."""
    base, extra = divmod(input_dim, num_shards)
    return [base + (1 if i < extra else 0) for i in range(num_shards)]


@keras.saving.register_keras_serializable(package="baton")
class ShardedEmbedding(keras.layers.Layer):
    """`Embedding(input_dim, output_dim)` stored as `num_shards` row-sharded variables."""

    def __init__(self, input_dim: int, output_dim: int, num_shards: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if num_shards < 1 or num_shards > input_dim:
            raise ValueError(
                f"num_shards must be in [1, input_dim={input_dim}]. "
                f"Received: num_shards={num_shards}"
            )
        self.input_dim, self.output_dim, self.num_shards = input_dim, output_dim, num_shards

    def build(self, input_shape: Any) -> None:
        self.shards = [
            self.add_weight(shape=(rows, self.output_dim), initializer="uniform", name=f"shard_{i}")
            for i, rows in enumerate(shard_rows(self.input_dim, self.num_shards))
        ]

    def call(self, ids: Any) -> Any:
        import tensorflow as tf

        tables = [s.value for s in self.shards]
        return tf.nn.embedding_lookup(tables, tf.cast(ids, tf.int64))

    def compute_output_shape(self, input_shape: Any) -> tuple:
        return (*input_shape, self.output_dim)

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "input_dim": self.input_dim,
            "output_dim": self.output_dim,
            "num_shards": self.num_shards,
        }


def merge_into(trained: Any, clean: Any) -> None:
    """Copy weights layer by layer from `trained` into `clean` (same builder, no sharding)."""
    import numpy as np

    for layer in clean.layers:
        if not layer.weights:
            continue
        src = trained.get_layer(layer.name)
        if isinstance(src, ShardedEmbedding):
            layer.set_weights([np.concatenate([np.asarray(s.numpy()) for s in src.shards], axis=0)])
        else:
            layer.set_weights([np.asarray(w.numpy()) for w in src.weights])
