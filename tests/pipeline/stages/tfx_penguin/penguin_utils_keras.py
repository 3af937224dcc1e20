# ruff: noqa
# Copyright 2021 Google LLC. All Rights Reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     https://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
#
# Ported test material: TFX's tfx/examples/penguin/penguin_utils_keras.py (tensorflow/tfx, commit
# 21e5af7f9543e108328c1a83b9132acda4875d93), moved into Baton with exactly the changes
# docs/own-model.md ("A TFX penguin pipeline, moved") lists; each is marked `# Baton:`.
"""Supplement for penguin_utils_base.py with specifics for Keras models.

This module file will be used in the Transform, Tuner and generic Trainer
components.
"""

import absl
import tensorflow as tf
from tensorflow import keras

import penguin_utils_base as base  # Baton: was `from tfx.examples.penguin import ...`

# Baton: kerastuner, tensorflow_transform and the TFX imports went with tuner_fn and run_fn.


# TFX Transform will call this function.
preprocessing_fn = base.preprocessing_fn


# Baton: _get_hyperparameters went: the hyperparameters are the train stage's settings
# (`learning_rate:`, and `num_layers` in `model_params:`), handed to the model function as
# spec.hyperparameters, a mapping whose .get() reads as HyperParameters.get() does.


def _make_keras_model(hparams) -> tf.keras.Model:  # Baton: kerastuner's type hint went
  """Creates a DNN Keras model for classifying penguin data.

  Args:
    hparams: Holds HyperParameters for tuning.

  Returns:
    A Keras Model.
  """
  # The model below is built with Functional API, please refer to
  # https://www.tensorflow.org/guide/keras/overview for all API options.
  inputs = [
      keras.layers.Input(shape=(1,), name=base.transformed_name(f))
      for f in base.FEATURE_KEYS
  ]
  d = keras.layers.concatenate(inputs)
  for _ in range(int(hparams.get('num_layers'))):
    d = keras.layers.Dense(8, activation='relu')(d)
  outputs = keras.layers.Dense(3, activation='softmax')(d)

  model = keras.Model(inputs=inputs, outputs=outputs)
  model.compile(
      optimizer=keras.optimizers.Adam(hparams.get('learning_rate')),
      loss='sparse_categorical_crossentropy',
      metrics=[keras.metrics.SparseCategoricalAccuracy()])

  model.summary(print_fn=absl.logging.info)
  return model


# Baton: the model function the train stage names (`model: penguin_utils_keras:build`), in
# place of run_fn (the train stage reads the data, fits, and the export stage saves with the
# signatures) and tuner_fn (Baton has no tuner).
def build(spec):
  return _make_keras_model(spec.hyperparameters)
