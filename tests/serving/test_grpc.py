"""gRPC API through the official tensorflow-serving-api client stubs."""

import fixture_models as fm
import grpc
import numpy as np
import pytest
import tensorflow as tf
from conftest import http
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_management_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)
from tensorflow_serving.config import model_server_config_pb2


@pytest.fixture(scope="module")
def channel(server):
    ch = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
    yield ch
    ch.close()


def penguin_request(version=None, label=None, n=1):
    req = predict_pb2.PredictRequest()
    req.model_spec.name = "penguins"
    if version:
        req.model_spec.version.value = version
    if label:
        req.model_spec.version_label = label
    for k, v in fm.PENGUIN.items():
        req.inputs[k].CopyFrom(tf.make_tensor_proto([v] * n))
    return req


def example(features):
    ex = tf.train.Example()
    for k, v in features.items():
        f = ex.features.feature[k]
        if isinstance(v, str):
            f.bytes_list.value.append(v.encode())
        else:
            f.float_list.value.append(v)
    return ex


def test_predict(channel):
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    resp = stub.Predict(penguin_request(n=3), timeout=30)
    assert resp.model_spec.name == "penguins" and resp.model_spec.version.value == 2
    probs = tf.make_ndarray(resp.outputs["probabilities"])
    assert probs.shape == (3, 3) and np.allclose(probs.sum(1), 1, atol=1e-5)
    assert tf.make_ndarray(resp.outputs["classes"]).tolist() == [b"Gentoo"] * 3
    r1 = stub.Predict(penguin_request(label="stable"), timeout=30)
    assert r1.model_spec.version.value == 1
    req = penguin_request(version=1)
    req.output_filter.append("class_ids")
    r = stub.Predict(req, timeout=30)
    assert list(r.outputs) == ["class_ids"] and tf.make_ndarray(r.outputs["class_ids"])[0] == 1


def test_classify_and_regress(channel):
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    req = classification_pb2.ClassificationRequest()
    req.model_spec.name = "penguins"
    req.model_spec.signature_name = "classify"
    req.input.example_list.examples.append(example(fm.PENGUIN))
    resp = stub.Classify(req, timeout=30)
    (c,) = resp.result.classifications
    assert [x.label for x in c.classes] == list(fm.CLASSES)
    assert max(c.classes, key=lambda x: x.score).label == "Gentoo"
    rreq = regression_pb2.RegressionRequest()
    rreq.model_spec.name = "regressor"
    ctx = {k: v for k, v in fm.PENGUIN.items() if k != "body_mass_g"}
    rreq.input.example_list_with_context.context.CopyFrom(example(ctx))
    rreq.input.example_list_with_context.examples.append(example({"body_mass_g": 4200.0}))
    rresp = stub.Regress(rreq, timeout=30)
    assert [round(r.value, 4) for r in rresp.result.regressions] == [4.2]


def test_metadata_and_status(channel):
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    req = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
    req.model_spec.name = "penguins"
    resp = stub.GetModelMetadata(req, timeout=30)
    sigs = get_model_metadata_pb2.SignatureDefMap()
    resp.metadata["signature_def"].Unpack(sigs)
    assert sigs.signature_def["classify"].method_name == "tensorflow/serving/classify"
    ms = model_service_pb2_grpc.ModelServiceStub(channel)
    sreq = get_model_status_pb2.GetModelStatusRequest()
    sreq.model_spec.name = "penguins"
    st = ms.GetModelStatus(sreq, timeout=30)
    assert {(s.version, s.state) for s in st.model_version_status} == {(1, 30), (2, 30)}


@pytest.mark.parametrize("mutate, code", [
    (lambda r: setattr(r.model_spec, "name", "nope"), grpc.StatusCode.NOT_FOUND),
    (lambda r: r.inputs.pop("island"), grpc.StatusCode.INVALID_ARGUMENT),
    (lambda r: r.inputs["island"].CopyFrom(tf.make_tensor_proto([1.0])),
     grpc.StatusCode.INVALID_ARGUMENT),
    (lambda r: setattr(r.model_spec, "version_label", "beta"), grpc.StatusCode.INVALID_ARGUMENT),
])
def test_grpc_errors(channel, mutate, code):
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    req = penguin_request()
    mutate(req)
    with pytest.raises(grpc.RpcError) as e:
        stub.Predict(req, timeout=30)
    assert e.value.code() == code


def test_reload_config_via_model_service(server, channel, tmp_path):
    cfgs = server.manager.configs()
    ms = model_service_pb2_grpc.ModelServiceStub(channel)
    req = model_management_pb2.ReloadConfigRequest()
    bad = req.config.model_config_list.config.add(name="penguins", base_path=cfgs[0].base_path)
    bad.model_version_policy.all.SetInParent()
    bad.version_labels["stable"] = 42
    # TF Serving returns the failure as the RPC's status (and in the response body)
    with pytest.raises(grpc.RpcError) as e:
        ms.HandleReloadConfigRequest(req, timeout=60)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "42" in e.value.details() and "penguins" in e.value.details()
    dup = model_management_pb2.ReloadConfigRequest()
    for _ in range(2):
        dup.config.model_config_list.config.add(name="penguins", base_path=cfgs[0].base_path)
    with pytest.raises(grpc.RpcError) as e:
        ms.HandleReloadConfigRequest(dup, timeout=60)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "duplicate model name" in e.value.details()
    good = model_server_config_pb2.ModelServerConfig()
    for c in cfgs:
        m = good.model_config_list.config.add(name=c.name, base_path=c.base_path)
        if c.policy.kind == "all":
            m.model_version_policy.all.SetInParent()
        for k, v in c.labels:
            m.version_labels[k] = v
    resp = ms.HandleReloadConfigRequest(
        model_management_pb2.ReloadConfigRequest(config=good), timeout=60)
    assert resp.status.error_code == 0, resp.status.error_message
    assert server.manager.resolve("penguins", label="stable").version == 1


def test_metrics_labels_like_tf_serving(server, channel):
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    stub.Predict(penguin_request(n=2), timeout=30)
    req = classification_pb2.ClassificationRequest()
    req.model_spec.name = "penguins"
    req.model_spec.signature_name = "classify"
    for _ in range(3):
        req.input.example_list.examples.append(example(fm.PENGUIN))
    stub.Classify(req, timeout=30)
    bad = penguin_request()
    bad.model_spec.name = "nope"
    with pytest.raises(grpc.RpcError):
        stub.Predict(bad, timeout=30)
    s, text = http(server.rest_port, "GET", "/monitoring/prometheus/metrics")
    assert s == 200
    p = ":tensorflow:serving:"
    assert f'{p}request_latency_count{{model_name="penguins",API="Predict",entrypoint="GRPC"}}' \
        in text
    assert f'{p}request_latency_count{{model_name="penguins",API="Classify",entrypoint="GRPC"}}' \
        in text
    assert f'{p}runtime_latency_count{{model_name="penguins",API="Classify",runtime="TF1"}}' \
        in text
    assert f'{p}request_count{{model_name="<unknown>",status="NOT_FOUND"}}' in text
    assert f'{p}request_example_counts_bucket{{model="penguins",le="4"}}' in text
    assert f'{p}request_example_count_total{{model="penguins"}}' in text
