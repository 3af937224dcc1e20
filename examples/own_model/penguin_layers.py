"""A custom Keras layer, in a helper module the model module imports.

Baton follows the import: this file's bytes are part of the train stage's cache key, and
`baton k8s` ships it to the pods beside the model module.
"""

import keras
from keras import layers, ops


@keras.saving.register_keras_serializable(package="penguins")
class GatedDense(layers.Layer):
    """`relu(x W + b) * sigmoid(x V + c)`: a dense layer whose output a learned gate scales."""

    def __init__(self, units: int, **kwargs):
        super().__init__(**kwargs)
        self.units = units

    def build(self, input_shape):
        d = input_shape[-1]
        self.kernel = self.add_weight(shape=(d, self.units), initializer="glorot_uniform", name="kernel")
        self.bias = self.add_weight(shape=(self.units,), initializer="zeros", name="bias")
        self.gate = self.add_weight(shape=(d, self.units), initializer="glorot_uniform", name="gate")
        self.gate_bias = self.add_weight(shape=(self.units,), initializer="ones", name="gate_bias")

    def call(self, x):
        value = ops.relu(ops.matmul(x, self.kernel) + self.bias)
        return value * ops.sigmoid(ops.matmul(x, self.gate) + self.gate_bias)

    def get_config(self):
        return {**super().get_config(), "units": self.units}
