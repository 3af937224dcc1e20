"""TensorFlow Serving's names and numbers, for every serving module, without importing TensorFlow.

The server starts (and `baton --help` prints) without loading TensorFlow, so the SavedModel
signature constants of `tf.saved_model` are mirrored here once; tests/serving/test_conventions.py
checks each against TensorFlow's. Everything in serving takes them from this module.

The warmup file is TF Serving's convention too; graphs.signatures writes it under the same
path (serving may not import graphs; the same test pins the two together).
"""

from __future__ import annotations

import os

# tf.saved_model.*_METHOD_NAME: the method_name of a SignatureDef, which picks the API it serves.
PREDICT_METHOD_NAME = "tensorflow/serving/predict"
CLASSIFY_METHOD_NAME = "tensorflow/serving/classify"
REGRESS_METHOD_NAME = "tensorflow/serving/regress"

# tf.saved_model.SERVING: the tag of the meta graph a model server loads (--saved_model_tags).
SERVING = "serve"

# tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY: the signature a request without one gets.
DEFAULT_SERVING_SIGNATURE_DEF_KEY = "serving_default"

# tf.saved_model.CLASSIFY_* / REGRESS_*: the tensor keys the Classify and Regress APIs use.
CLASSIFY_INPUTS = "inputs"
CLASSIFY_OUTPUT_CLASSES = "classes"
CLASSIFY_OUTPUT_SCORES = "scores"
REGRESS_INPUTS = "inputs"
REGRESS_OUTPUTS = "outputs"

# Default ports (--port, --rest_api_port); the k8s manifests use them too. 8500 is
# tensorflow_model_server's --port default. Its --rest_api_port default is 0 (REST off,
# server.h's http_port); Baton's is 8501, deliberately: the port the tensorflow/serving
# image's entrypoint passes (--rest_api_port=8501), and Baton's docs, demo and manifests.
DEFAULT_GRPC_PORT = 8500
DEFAULT_REST_PORT = 8501
# MonitoringConfig's prometheus_config.path when it names none.
DEFAULT_PROMETHEUS_PATH = "/monitoring/prometheus/metrics"

# Warmup requests (TFRecord of PredictionLog) inside a SavedModel version directory.
ASSETS_EXTRA = "assets.extra"
WARMUP_FILE = os.path.join(ASSETS_EXTRA, "tf_serving_warmup_requests")

# The input name of TFX's examples-based `serving_default` (penguin_utils_base.py's
# `TensorSpec(shape=[None], dtype=tf.string, name='examples')`): a TFX client sends it.
TFX_EXAMPLES_INPUT = "examples"


def examples_hint(unknown) -> str:  # noqa: ANN001 - any collection of input names
    """For an error on unknown inputs: where a TFX client's serialized tf.Examples go (it
    names them `examples`, or sends bare `{"b64": ...}` instances to a one-input signature)."""
    if TFX_EXAMPLES_INPUT not in unknown and "b64" not in unknown:
        return ""
    return (f"; serialized tf.Examples (TFX's {TFX_EXAMPLES_INPUT!r} input) go to a signature "
            f"that parses them: 'classify' (or 'regress') under input {CLASSIFY_INPUTS!r}, "
            "e.g. {\"signature_name\": \"classify\", \"instances\": [{\"inputs\": {\"b64\": "
            "\"...\"}}]}, or "
            "the :classify / :regress API")
