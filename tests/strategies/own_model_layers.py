"""The custom layer of the cluster tests' user model (copied as `tiny_layers.py`)."""

import keras
from keras import layers


@keras.saving.register_keras_serializable(package="tiny")
class Scale(layers.Layer):
    """x * w, one learned weight per unit (a custom layer with its own variables)."""

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1],), initializer="ones", name="w")

    def call(self, x):
        return x * self.w
