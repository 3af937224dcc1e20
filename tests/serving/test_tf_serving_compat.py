"""TF Serving's behaviour where its server's code (not its REST guide) is the contract.

Issue 15's ten points, each against TF Serving's own kind of test model
(upstream_models.py) on an in-process server: the version directory kept as found, no
shape checks before TensorFlow, typed value fields in Predict responses, Classify/Regress
not gated by method_name, MultiInference, REST `"results"`, metadata with empty fields,
the gRPC flags (Unix socket, channel arguments), TF Serving's config parse message, and
the profiler service's refusals. The same cases through a `baton serve` subprocess
with upstream's own flags are in test_upstream_model_server.py.
"""

import os
import socket
import struct
import tempfile

import grpc
import numpy as np
import pytest
import tensorflow as tf
from conftest import http
from tensorflow.core.framework import tensor_pb2, types_pb2
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    inference_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)

from baton.serving.config import ConfigError, ModelConfig, VersionPolicy, load_model_config_file
from baton.serving.manager import version_dirs
from baton.serving.server import ModelServer, ServerOptions
from baton.serving.tensor_proto import from_ndarray, to_ndarray

CLASSIFY = "tensorflow/serving/classify"
REGRESS = "tensorflow/serving/regress"


def start(upstream, **options):
    models = [ModelConfig("default", upstream["half_plus_two"]),
              ModelConfig("tf2", upstream["half_plus_two_tf2"]),
              ModelConfig("two", upstream["half_plus_two_2_versions"], VersionPolicy("all")),
              ModelConfig("counter", upstream["counter"]),
              ModelConfig("bad", upstream["bad_half_plus_two"]),
              ModelConfig("dense", upstream["keras_distrat"])]
    opts = ServerOptions(bind_free_ports=True, file_system_poll_wait_seconds=0, **options)
    return ModelServer(opts, models).start()


@pytest.fixture(scope="module")
def server(upstream):
    s = start(upstream)
    yield s
    s.stop(grace=2)


@pytest.fixture(scope="module")
def stub(server):
    ch = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
    yield prediction_service_pb2_grpc.PredictionServiceStub(ch)
    ch.close()


def predict_request(model="default", x=(2.0,), shape=(1,), signature="serving_default"):
    req = predict_pb2.PredictRequest()
    req.model_spec.name = model
    req.model_spec.signature_name = signature
    req.inputs["x"].dtype = types_pb2.DT_FLOAT
    req.inputs["x"].float_val.extend(x)
    for d in shape:
        req.inputs["x"].tensor_shape.dim.add().size = d
    return req


def example_input(inp, *xs):
    for x in xs:
        inp.example_list.examples.add().features.feature["x"].float_list.value.append(x)


# 1. The version directory is kept as found -------------------------------------------

def test_zero_padded_version_directories_load_from_the_directory_found(server, upstream):
    assert version_dirs(upstream["half_plus_two_2_versions"]) == {123: "00000123",
                                                                  124: "00000124"}
    s = server.manager.resolve("default")
    assert s.version == 123 and s.export_dir.endswith(os.sep + "00000123")
    st = {(r.version, r.state) for r in server.manager.status("two")}
    assert st == {(123, "AVAILABLE"), (124, "AVAILABLE")}


def test_two_names_for_one_version_take_the_shortest(tmp_path):
    for name in ("0007", "7", "00007", "x1"):
        (tmp_path / name).mkdir()
    assert version_dirs(str(tmp_path)) == {7: "7"}


# 2. Inputs are checked by name; TensorFlow checks shapes ------------------------------

def test_predict_shape_one_into_a_minus_one_by_one_signature(stub):
    resp = stub.Predict(predict_request(), timeout=30)  # x: [1] where the graph has [-1, 1]
    assert list(resp.outputs["y"].float_val) == [3.0]
    batch = stub.Predict(predict_request(x=(2.0, 3.0), shape=(2, 1)), timeout=30)
    assert tf.make_ndarray(batch.outputs["y"]).tolist() == [[3.0], [3.5]]


def test_rest_instances_of_scalars_into_a_minus_one_by_one_signature(server):
    s, body = http(server.rest_port, "POST", "/v1/models/default:predict",
                   {"instances": [1.0, 2.0, 5.0]})
    assert (s, body) == (200, {"predictions": [2.5, 3.0, 4.5]})


def test_shapes_are_tensorflows_to_accept_or_refuse(server, stub):
    # the TF2 model's predict signature says [1]; its restored function computes [2, 1]
    resp = stub.Predict(predict_request("tf2", x=(1.0, 2.0), shape=(2, 1)), timeout=30)
    assert tf.make_ndarray(resp.outputs["y"]).tolist() == [[2.5], [3.0]]
    # a Dense kernel of [1, 1] cannot take rows of 3: TensorFlow's error, as a 400
    with pytest.raises(grpc.RpcError) as e:
        stub.Predict(predict_request("dense", x=(1.0,) * 6, shape=(2, 3)), timeout=30)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    s, body = http(server.rest_port, "POST", "/v1/models/dense:predict",
                   {"instances": [[1.0, 2.0, 3.0]]})
    assert s == 400 and "error" in body
    s, body = http(server.rest_port, "POST", "/v1/models/dense:predict",
                   {"instances": [[1.0], [2.0]]})
    assert (s, body) == (200, {"predictions": [[1.0], [2.0]]})


def test_unknown_or_missing_inputs_are_refused_by_name_as_predict_util(stub):
    req = predict_request()
    req.inputs["z"].CopyFrom(tf.make_tensor_proto([1.0]))
    with pytest.raises(grpc.RpcError) as e:
        stub.Predict(req, timeout=30)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details() == ("input size does not match signature: 2!=1 len({x,z}) != "
                                 "len({x}). Sent extra: {z}. Missing but required: {}.")


def test_predict_signature_and_output_filter_errors_as_predict_util(stub):
    with pytest.raises(grpc.RpcError) as e:
        stub.Predict(predict_request(signature="nope"), timeout=30)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert e.value.details() == 'Serving signature key "nope" not found.'
    req = predict_request()
    req.output_filter.extend(["y", "y"])
    with pytest.raises(grpc.RpcError) as e:
        stub.Predict(req, timeout=30)
    assert e.value.details() == "duplicate output tensor alias: y"


# 3. Predict responses fill the typed value fields -------------------------------------

def test_predict_response_values_are_in_float_val(stub):
    resp = stub.Predict(predict_request(x=(2.0, 4.0), shape=(2, 1)), timeout=30)
    y = resp.outputs["y"]
    assert y.dtype == types_pb2.DT_FLOAT and list(y.float_val) == [3.0, 4.0]
    assert y.tensor_content == b"" and [d.size for d in y.tensor_shape.dim] == [2, 1]


def test_serialization_as_tensor_content_flag(upstream):
    s = start(upstream, enable_serialization_as_tensor_content=True)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.grpc_port}") as ch:
            resp = prediction_service_pb2_grpc.PredictionServiceStub(ch).Predict(
                predict_request(), timeout=30)
        y = resp.outputs["y"]
        assert list(y.float_val) == [] and np.frombuffer(y.tensor_content, "<f4").tolist() == [3]
    finally:
        s.stop(grace=1)


@pytest.mark.parametrize("arr", [
    np.array([[3.0], [3.5]], np.float32), np.arange(6, dtype=np.float64).reshape(2, 3),
    np.array([1, -2], np.int64), np.array([1, 2], np.int32), np.array([True, False]),
    np.array([1.5, 2], np.float16), np.array([7], np.uint8), np.array(np.float32(12.0)),
    np.array([b"a", b"b"], dtype=object), np.zeros((0, 2), np.float32),
    np.array([2 ** 63], np.uint64)])
def test_typed_fields_round_trip_through_tf_make_ndarray(arr):
    proto = tensor_pb2.TensorProto()
    from_ndarray(arr, proto)
    assert proto.tensor_content == b""
    for back in (tf.make_ndarray(proto), to_ndarray(proto)):
        assert back.dtype == arr.dtype and back.shape == arr.shape
        np.testing.assert_array_equal(back, arr)


# 4. Classify/Regress do not check method names unless told to -------------------------

def test_tf2_classify_and_regress_on_predict_method_signatures(stub):
    req = classification_pb2.ClassificationRequest()
    req.model_spec.name, req.model_spec.signature_name = "tf2", "classify_x_to_y"
    example_input(req.input, 2.0)
    resp = stub.Classify(req, timeout=30)
    assert [c.score for c in resp.result.classifications[0].classes] == [3.0]
    rreq = regression_pb2.RegressionRequest()
    rreq.model_spec.name, rreq.model_spec.signature_name = "tf2", "regress_x_to_y2"
    example_input(rreq.input, 2.0, 4.0)
    assert [r.value for r in stub.Regress(rreq, timeout=30).result.regressions] == [4.0, 5.0]


def test_method_name_check_flag_refuses_them(upstream):
    s = start(upstream, enable_signature_method_name_check=True)
    try:
        req = classification_pb2.ClassificationRequest()
        req.model_spec.name, req.model_spec.signature_name = "tf2", "classify_x_to_y"
        example_input(req.input, 2.0)
        with (grpc.insecure_channel(f"127.0.0.1:{s.grpc_port}") as ch,
              pytest.raises(grpc.RpcError) as e):
            prediction_service_pb2_grpc.PredictionServiceStub(ch).Classify(req, timeout=30)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert e.value.details() == ("Expected classification signature method_name to be "
                                     f"{CLASSIFY}. Was: tensorflow/serving/predict")
        st, body = http(s.rest_port, "POST", "/v1/models/default:classify",  # TF1: classify
                        {"signature_name": "classify_x_to_y", "examples": [{"x": 2.0}]})
        assert (st, body) == (200, {"results": [[["", 3.0]]]})
    finally:
        s.stop(grace=1)


def test_without_the_check_the_signature_structure_is_checked(stub):
    req = regression_pb2.RegressionRequest()
    req.model_spec.name = "default"  # serving_default: input `x`, not `inputs`
    example_input(req.input, 2.0)
    with pytest.raises(grpc.RpcError) as e:
        stub.Regress(req, timeout=30)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details().startswith("No regression inputs found in SignatureDef")
    req.model_spec.signature_name = "nope"
    with pytest.raises(grpc.RpcError) as e:
        stub.Regress(req, timeout=30)
    assert e.value.details() == "No signature was found with the name: nope"


# 5. MultiInference ---------------------------------------------------------------------

def multi(model, *tasks):
    req = inference_pb2.MultiInferenceRequest()
    for name, method in tasks:
        t = req.tasks.add()
        t.model_spec.name, t.model_spec.signature_name, t.method_name = model, name, method
    example_input(req.input, 2.0, 4.0)
    return req


@pytest.mark.parametrize("model", ["default", "tf2"])
def test_multi_inference(stub, model):
    resp = stub.MultiInference(multi(model, ("regress_x_to_y2", REGRESS),
                                     ("classify_x_to_y", CLASSIFY)), timeout=30)
    assert [r.value for r in resp.results[0].regression_result.regressions] == [4.0, 5.0]
    assert [c.classes[0].score for c in resp.results[1].classification_result.classifications] \
        == [3.0, 4.0]
    assert [(r.model_spec.name, r.model_spec.signature_name, r.model_spec.version.value)
            for r in resp.results] == [(model, "regress_x_to_y2", 123),
                                       (model, "classify_x_to_y", 123)]


@pytest.mark.parametrize("tasks, code, message", [
    ([("regress_x_to_y", REGRESS), ("regress_x_to_y", REGRESS)], "INVALID_ARGUMENT",
     "Duplicate evaluation of signature: regress_x_to_y"),
    ([("nope", REGRESS)], "INVALID_ARGUMENT", "Requested signature not found in model graph: nope"),
    ([("regress_x_to_y", "tensorflow/serving/predict")], "UNIMPLEMENTED",
     "Unsupported signature method_name: tensorflow/serving/predict"),
])
def test_multi_inference_errors(stub, tasks, code, message):
    with pytest.raises(grpc.RpcError) as e:
        stub.MultiInference(multi("default", *tasks), timeout=30)
    assert (e.value.code().name, e.value.details()) == (code, message)


def test_multi_inference_tasks_must_share_one_model(stub):
    req = multi("default", ("regress_x_to_y", REGRESS))
    t = req.tasks.add(method_name=CLASSIFY)
    t.model_spec.name = "tf2"
    with pytest.raises(grpc.RpcError) as e:
        stub.MultiInference(req, timeout=30)
    assert e.value.details() == ("All ModelSpecs in a MultiInferenceRequest must access the "
                                 "same model name.")


# 6. REST classify/regress answer "results" --------------------------------------------

def test_rest_classify_and_regress_results_key(server):
    s, body = http(server.rest_port, "POST", "/v1/models/default:classify",
                   {"signature_name": "classify_x_to_y", "examples": [{"x": 2.0}, {"x": 4.0}]})
    assert (s, body) == (200, {"results": [[["", 3.0]], [["", 4.0]]]})
    s, body = http(server.rest_port, "POST", "/v1/models/tf2:regress",
                   {"signature_name": "regress_x_to_y", "examples": [{"x": 2.0}]})
    assert (s, body) == (200, {"results": [3.0]})


# 7. Metadata serialized as the real server does, empty fields included ------------------

def _info(name, dtype, dims):
    shape = ({"dim": [], "unknown_rank": True} if dims is None else
             {"dim": [{"size": str(d), "name": ""} for d in dims], "unknown_rank": False})
    return {"name": name, "dtype": dtype, "tensor_shape": shape}


def _sig(inputs, outputs, method):
    return {"inputs": inputs, "outputs": outputs, "method_name": method, "defaults": {}}


def half_plus_two_metadata():
    """What TF Serving's REST handler prints for upstream_models.half_plus_two."""
    ex = {"inputs": _info("tf_example:0", "DT_STRING", None)}  # unknown rank, as upstream's
    col = [-1, 1]
    return {
        "model_spec": {"name": "default", "signature_name": "", "version": "123"},
        "metadata": {"signature_def": {"signature_def": {
            "serving_default": _sig({"x": _info("x:0", "DT_FLOAT", col)},
                                    {"y": _info("y:0", "DT_FLOAT", col)},
                                    "tensorflow/serving/predict"),
            "classify_x_to_y": _sig(ex, {"scores": _info("y:0", "DT_FLOAT", col)}, CLASSIFY),
            "regress_x_to_y": _sig(ex, {"outputs": _info("y:0", "DT_FLOAT", col)}, REGRESS),
            "regress_x_to_y2": _sig(ex, {"outputs": _info("y2:0", "DT_FLOAT", col)}, REGRESS),
            "regress_x2_to_y3": _sig({"inputs": _info("x2:0", "DT_FLOAT", col)},
                                     {"outputs": _info("y3:0", "DT_FLOAT", col)}, REGRESS),
        }}},
    }


def test_rest_metadata_prints_empty_fields_like_tf_serving(server):
    s, body = http(server.rest_port, "GET", "/v1/models/default/metadata")
    assert s == 200 and body == half_plus_two_metadata()


def test_rest_metadata_of_an_unknown_rank_tensor(server, upstream):
    s, body = http(server.rest_port, "GET", "/v1/models/counter/metadata")
    delta = body["metadata"]["signature_def"]["signature_def"]["incr_counter_by"]["inputs"]
    assert delta["delta"]["tensor_shape"] == {"dim": [], "unknown_rank": True}
    get = body["metadata"]["signature_def"]["signature_def"]["get_counter"]
    assert get["inputs"] == {} and get["defaults"] == {}


def test_classify_and_regress_parse_examples_fed_to_an_unknown_rank_input(server, stub):
    """half_plus_two's `tf_example` has unknown rank (as upstream's model): the serialized
    tf.Examples are still fed as one [n] string tensor, over gRPC (with `context`
    features merged) and REST, on classify and regress."""
    sig = server.manager.resolve("default").signatures["classify_x_to_y"]
    assert sig.inputs["inputs"].shape is None
    req = classification_pb2.ClassificationRequest()
    req.model_spec.name, req.model_spec.signature_name = "default", "classify_x_to_y"
    example_input(req.input, 2.0, 4.0, 6.0)
    resp = stub.Classify(req, timeout=30)
    assert [c.classes[0].score for c in resp.result.classifications] == [3.0, 4.0, 5.0]
    rreq = regression_pb2.RegressionRequest()
    rreq.model_spec.name, rreq.model_spec.signature_name = "default", "regress_x_to_y2"
    ctx = rreq.input.example_list_with_context
    ctx.context.features.feature["x"].float_list.value.append(8.0)
    ctx.examples.add()  # x from the context
    assert [r.value for r in stub.Regress(rreq, timeout=30).result.regressions] == [7.0]
    s, body = http(server.rest_port, "POST", "/v1/models/default:regress",
                   {"signature_name": "regress_x_to_y", "examples": [{"x": 0.0}, {"x": 2.0}]})
    assert (s, body) == (200, {"results": [2.0, 3.0]})


def test_grpc_metadata_field_checks(stub):
    req = get_model_metadata_pb2.GetModelMetadataRequest()
    req.model_spec.name = "default"
    with pytest.raises(grpc.RpcError) as e:
        stub.GetModelMetadata(req, timeout=30)
    assert e.value.details() == "GetModelMetadataRequest must specify at least one metadata_field"
    req.metadata_field.extend(["signature_def", "foo"])
    with pytest.raises(grpc.RpcError) as e:
        stub.GetModelMetadata(req, timeout=30)
    assert e.value.details() == "Metadata field foo is not supported"


# 8. --grpc_socket_path and --grpc_channel_arguments --------------------------------------

@pytest.mark.parametrize("implementation", ["native", "grpcio"])
def test_grpc_on_a_unix_socket_only_with_port_zero(upstream, monkeypatch, implementation):
    monkeypatch.setenv("BATON_SERVING_GRPC", implementation)
    path = os.path.join(tempfile.mkdtemp(prefix="baton-uds-"), "tfs.sock")
    s = ModelServer(ServerOptions(port=0, rest_api_port=0, grpc_socket_path=path,
                                  grpc_channel_arguments="grpc.max_connection_age_ms=60000,"
                                                         "grpc.lb_policy_name=grpclb"),
                    [ModelConfig("default", upstream["half_plus_two"])]).start()
    try:
        assert s.grpc_port is None and s.rest_port is None
        with grpc.insecure_channel(f"unix:{path}") as ch:
            resp = prediction_service_pb2_grpc.PredictionServiceStub(ch).Predict(
                predict_request(), timeout=30)
        assert list(resp.outputs["y"].float_val) == [3.0]
    finally:
        s.stop(grace=1)


def test_a_stale_socket_file_is_replaced(upstream, monkeypatch):
    monkeypatch.setenv("BATON_SERVING_GRPC", "native")
    path = os.path.join(tempfile.mkdtemp(prefix="baton-uds-"), "tfs.sock")
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(path)
    stale.close()  # the file stays, nobody listens: what a killed server leaves
    s = ModelServer(ServerOptions(bind_free_ports=True, grpc_socket_path=path),
                    [ModelConfig("default", upstream["half_plus_two"])]).start()
    try:
        with grpc.insecure_channel(f"unix:{path}") as ch:
            ms = model_service_pb2_grpc.ModelServiceStub(ch)
            req = get_model_status_pb2.GetModelStatusRequest()
            req.model_spec.name = "default"
            assert ms.GetModelStatus(req, timeout=30).model_version_status[0].version == 123
    finally:
        s.stop(grace=1)


@pytest.mark.parametrize("implementation", ["native", "grpcio"])
def test_grpc_channel_arguments_for_limits_are_applied(upstream, monkeypatch, implementation):
    """grpc.max_receive_message_length, grpc.max_send_message_length and
    grpc.max_concurrent_streams reach the native server too (they were logged and
    ignored there); other grpc core arguments are still ignored by it."""
    monkeypatch.setenv("BATON_SERVING_GRPC", implementation)
    args = ("grpc.max_concurrent_streams=7,grpc.max_receive_message_length=4000,"
            "grpc.max_send_message_length=2000,grpc.so_reuseaddr=1")
    s = ModelServer(ServerOptions(bind_free_ports=True, grpc_channel_arguments=args),
                    [ModelConfig("default", upstream["half_plus_two"])]).start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.grpc_port}") as ch:
            st = prediction_service_pb2_grpc.PredictionServiceStub(ch)
            assert list(st.Predict(predict_request(), timeout=30).outputs["y"].float_val) == [3.0]
            for rows, message in ((1200, "Received message larger than max"),  # 4.8 kB in
                                  (600, "Sent message larger than max")):  # 2.4 kB out
                with pytest.raises(grpc.RpcError) as e:
                    st.Predict(predict_request(x=[1.0] * rows, shape=(rows, 1)), timeout=30)
                assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                assert message in e.value.details()
        if implementation == "native":
            with socket.create_connection(("127.0.0.1", s.grpc_port), timeout=5) as sock:
                sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"  # and an empty SETTINGS
                             + struct.pack(">BHBBI", 0, 0, 4, 0, 0))
                got = b""
                while len(got) < 9 or len(got) < 9 + int.from_bytes(got[:3], "big"):
                    got += sock.recv(65536)
            assert got[3] == 4  # the server's SETTINGS first
            payload = got[9:9 + int.from_bytes(got[:3], "big")]
            settings = dict(struct.unpack_from(">HI", payload, i)
                            for i in range(0, len(payload), 6))
            assert settings[3] == 7  # SETTINGS_MAX_CONCURRENT_STREAMS
    finally:
        s.stop(grace=1)


# 9. A bad --model_config_file fails with TF Serving's message -------------------------

def test_bad_model_config_file_message(tmp_path):
    bad = tmp_path / "bad_model_config.txt"
    bad.write_text("improperly formatted file")
    with pytest.raises(ConfigError) as e:
        load_model_config_file(str(bad))
    assert str(e.value) == (
        "Error parsing text-format tensorflow.serving.ModelServerConfig: 1:1: Message type "
        "\"tensorflow.serving.ModelServerConfig\" has no field named \"improperly\".\n"
        f"Invalid protobuf file: '{bad}'")


# 10. The profiler service is there: hostile requests refused, Monitor unimplemented -----

def test_profiler_service_refuses_paths_that_climb_out(server, tmp_path):
    from baton.serving.profiler import _messages

    req_t = _messages()[0]
    cases = [req_t(duration_ms=10),  # no repository_root
             req_t(duration_ms=10, repository_root=str(tmp_path), session_id="../x"),
             req_t(duration_ms=10, repository_root=str(tmp_path), session_id="s",
                   host_name="a/b")]
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as ch:
        profile = ch.unary_unary("/tensorflow.ProfilerService/Profile")
        for req in cases:
            with pytest.raises(grpc.RpcError) as e:
                profile(req.SerializeToString(), timeout=10)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.RpcError) as e:
            ch.unary_unary("/tensorflow.ProfilerService/Monitor")(b"", timeout=10)
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
        # Terminate of no running session answers OK, as TSL's
        assert ch.unary_unary("/tensorflow.ProfilerService/Terminate")(b"", timeout=10) == b""
    assert list(tmp_path.iterdir()) == []


def test_enable_profiler_false_leaves_the_service_out(upstream):
    s = start(upstream, enable_profiler=False)
    try:
        with (grpc.insecure_channel(f"127.0.0.1:{s.grpc_port}") as ch,
              pytest.raises(grpc.RpcError) as e):
            ch.unary_unary("/tensorflow.ProfilerService/Profile")(b"", timeout=10)
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
    finally:
        s.stop(grace=1)


# The other upstream test models ----------------------------------------------------------

def test_stateful_counter_runs_each_call_once(stub):
    def call(name, **inputs):
        req = predict_pb2.PredictRequest()
        req.model_spec.name, req.model_spec.signature_name = "counter", name
        for k, v in inputs.items():
            req.inputs[k].CopyFrom(tf.make_tensor_proto(v, tf.float32))
        return tf.make_ndarray(stub.Predict(req, timeout=30).outputs["output"]).item()

    assert call("reset_counter") == 0.0
    assert [call("incr_counter") for _ in range(3)] == [1.0, 2.0, 3.0]
    assert call("incr_counter_by", delta=2.5) == 5.5
    assert call("get_counter") == 5.5 and call("reset_counter") == 0.0


def test_bad_model_never_loads_and_the_server_keeps_serving(server, stub):
    """Differs from TF Serving, which exits at startup when a model fails to load:
    Baton starts, reports the version END with the error, and serves the other models."""
    (rec,) = server.manager.status("bad")
    assert rec.version == 123 and rec.state == "END" and rec.error is not None
    assert "saved_model.pb" in rec.error.message
    with pytest.raises(grpc.RpcError) as e:
        stub.Predict(predict_request("bad"), timeout=30)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    s, body = http(server.rest_port, "GET", "/v1/models/bad")
    assert s == 200 and body["model_version_status"][0]["state"] == "END"
    assert body["model_version_status"][0]["status"]["error_code"] == "DATA_LOSS"


# Without --enable_batching there is no batching queue ------------------------------------

def test_concurrent_large_predicts_without_batching_all_succeed(server, stub):
    """TF Serving without --enable_batching runs each request as its own Session::Run:
    8 concurrent predicts of 5000 rows are all answered (they were refused UNAVAILABLE
    "The batch scheduling queue ... is full" when the unbatched path counted rows)."""
    assert not server.options.enable_batching
    reqs = []
    for i in range(8):
        req = predict_pb2.PredictRequest()
        req.model_spec.name = "default"
        from_ndarray(np.full((5000, 1), float(i), np.float32), req.inputs["x"])
        reqs.append(req)
    for _ in range(3):  # a few rounds: each has all 8 in flight at once
        futures = [stub.Predict.future(r, timeout=60) for r in reqs]
        for i, f in enumerate(futures):
            y = to_ndarray(f.result().outputs["y"])
            assert y.shape == (5000, 1) and float(y[0, 0]) == 0.5 * i + 2.0
    bodies = [{"instances": [[float(i)]] * 5000} for i in range(8)]
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(
            lambda b: http(server.rest_port, "POST", "/v1/models/default:predict", b), bodies))
    for i, (status, body) in enumerate(answers):
        assert status == 200, body
        assert len(body["predictions"]) == 5000 and body["predictions"][0] == [0.5 * i + 2.0]
