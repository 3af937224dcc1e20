"""Inputs with a default in the SignatureDef may be left out, as TF Serving allows (issue 35, 6).

TensorFlow's `saved_model::GetInputValues` (tensorflow/cc/saved_model/util.cc), which TF
Serving's Predict runs, fills an input a request leaves out from the signature's `defaults` and
refuses one that has none. Baton's export gives the raw columns a preprocessing_fn does not read
such a default; `baton serve` honours it on REST (rows and columns) and gRPC. A TFX client's
`examples` input is pointed to the examples-based signature.
"""

from __future__ import annotations

import grpc
import numpy as np
import pytest
import tensorflow as tf
from conftest import http
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from baton.serving.testing import install


def _model(path: str) -> None:
    """`a` required; `b` (a string column the model never reads) optional, default zero rows."""

    def serve(a, b=tf.zeros([0], tf.string)):  # noqa: B008 - the default is the signature's
        return {"y": a * 2.0}

    fn = tf.function(serve, input_signature=[tf.TensorSpec([None], tf.float32, name="a"),
                                             tf.TensorSpec([None], tf.string, name="b")])
    module = tf.Module()
    module.serve = fn
    tf.saved_model.save(module, path, signatures={"serving_default": fn})


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from baton.serving.config import ModelConfig
    from baton.serving.server import ModelServer, ServerOptions

    root = tmp_path_factory.mktemp("defaults")
    _model(str(root / "export"))
    base = str(root / "m")
    install(str(root / "export"), base, 1)
    s = ModelServer(ServerOptions(bind_free_ports=True, file_system_poll_wait_seconds=0),
                    [ModelConfig("m", base)]).start()
    yield s
    s.stop(grace=2)


def test_rest_rows_and_columns_may_leave_an_optional_input_out(server):
    path = "/v1/models/m:predict"
    status, body = http(server.rest_port, "POST", path, {"instances": [{"a": 1.0}, {"a": 2.0}]})
    assert status == 200 and body == {"predictions": [2.0, 4.0]}, body
    status, body = http(server.rest_port, "POST", path,
                        {"instances": [{"a": 1.0, "b": "x"}, {"a": 2.0, "b": "y"}]})
    assert status == 200 and body == {"predictions": [2.0, 4.0]}, body
    status, body = http(server.rest_port, "POST", path, {"inputs": {"a": [3.0]}})
    assert status == 200 and body == {"outputs": [6.0]}, body
    status, body = http(server.rest_port, "POST", path, {"inputs": {"b": ["x"]}})
    assert status == 400 and "Missing named input: a" in body["error"]


def test_grpc_may_leave_an_optional_input_out(server):
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as ch:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(ch)
        req = predict_pb2.PredictRequest()
        req.model_spec.name = "m"
        req.inputs["a"].CopyFrom(tf.make_tensor_proto(np.array([1.5], "float32")))
        resp = stub.Predict(req, timeout=30)
        assert tf.make_ndarray(resp.outputs["y"]).tolist() == [3.0]
        req = predict_pb2.PredictRequest()
        req.model_spec.name = "m"
        req.inputs["b"].CopyFrom(tf.make_tensor_proto(np.array([b"x"], object)))
        with pytest.raises(grpc.RpcError) as err:
            stub.Predict(req, timeout=30)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "Missing but required: {a}" in err.value.details()


def test_a_tfx_client_sending_examples_is_pointed_to_classify(server):
    body = {"instances": [{"examples": {"b64": "CgA="}}]}
    status, got = http(server.rest_port, "POST", "/v1/models/m:predict", body)
    assert status == 400
    assert "serialized tf.Examples (TFX's 'examples' input) go to a signature that parses them: " \
           "'classify' (or 'regress') under input 'inputs'" in got["error"]
