"""TF Serving's own model-server tests, ported: `baton serve` run as upstream runs
tensorflow_model_server (model_servers/tensorflow_model_server_test.py and
test_util/tensorflow_model_server_test_base.py in tensorflow/serving).

Each case keeps upstream's name (test_<name>), its requests (official tensorflow_serving.apis
stubs over gRPC, urllib over REST) and its expectations. `run_server` builds upstream's
command line (`--rest_api_timeout_in_ms=5000 --grpc_socket_path=... --grpc_channel_arguments=
...,grpc.so_reuseaddr=1`, `--model_name/--model_base_path` or `--model_config_file`,
`--monitoring_config_file`, `--model_config_file_poll_wait_seconds`,
`--prefer_tflite_model=true` for the TFLite cases), caches a server per argument set as
upstream's RunServer does, and waits as WaitForServerReady does (Predict to a missing model
until the error names a Servable).

The models are upstream's own checked-in test models (testdata/tf_serving/, copied from
servables/tensorflow/testdata: saved_model_half_plus_two_cpu, saved_model_half_plus_two_tf2_cpu,
saved_model_half_plus_three, the two half_plus_two TFLite models, tf_text_regression) with
upstream's config files and expected metadata JSON. The models upstream's cases export
inline (tf.saved_model.save, Keras) are exported the same way by upstream_models.py.

Where this differs from upstream's harness, deliberately:
- ports: `--bind_free_ports --ports_file` instead of portpicker's `--port/--rest_api_port`
  (no race for a port); every other flag is upstream's.
- one Unix socket per server under a temporary directory, not /tmp/tf-serving.sock shared
  by every server upstream starts.
- servers are shared where upstream's cases differ only in a flag that changes nothing
  for the other cases: the Prometheus case uses the half_plus_two server started with
  the monitoring config, the zero-poll-period case reuses the good-config server (both
  read their config once), the channel-arguments case runs on the TF2 model's server
  (expected output and version are the same), and upstream's inline exports are served
  under their own names from one config file.
- the config-reload case polls for the new model for up to 10 s instead of sleeping 10 s.
- the profiler case checks what upstream's only runs: the trace file is written where
  TensorBoard reads it, and the predictions sent meanwhile are answered.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import grpc
import pytest
from tensorflow.core.framework import types_pb2
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

RPC_TIMEOUT = 20.0
HTTP_REST_TIMEOUT_MS = 5000
WAIT_FOR_SERVER_READY_INT_SECS = 60
# Before the server can be polled it loads its models (TF Serving's binary does too, but
# here a Python process imports TensorFlow first, and tensorflow-text for test_tf_text):
# on a loaded CI machine that has taken over a minute.
STARTUP_SECS = 300
TESTDATA = os.path.join(os.path.dirname(__file__), "testdata", "tf_serving")
# upstream's _Get*Path helpers: the models upstream's test serves, by upstream's names
TFS = {name: os.path.join(TESTDATA, d) for name, d in (
    ("half_plus_two", "saved_model_half_plus_two_cpu"),
    ("half_plus_two_tf2", "saved_model_half_plus_two_tf2_cpu"),
    ("half_plus_three", "saved_model_half_plus_three"),
    ("tflite", "saved_model_half_plus_two_tflite"),
    ("tflite_with_sigdef", "saved_model_half_plus_two_tflite_with_sigdef"),
    ("tf_text_regression", "tf_text_regression"))}
BASE_CONFIG = """
model_config_list: {{
  config: {{
    name: "{name}",
    base_path: "{model_path}",
    model_platform: "tensorflow"
  }}
}}
"""
INLINE_EXPORTS = ("tf_saved_model_save", "multiple_signatures", "keras_sequential",
                  "keras_distrat")


class Servers:
    """Upstream's RunServer: one `baton serve` per distinct argument set, killed at the end."""

    def __init__(self, tmp: str):
        self.tmp = tmp
        self.cache: dict[tuple, tuple] = {}
        self.procs: list[subprocess.Popen] = []

    def run(self, model_name, model_path, model_type="tf", model_config_file=None,
            monitoring_config_file=None, grpc_channel_arguments="", wait_for_server_ready=True,
            pipe=None, model_config_file_poll_period=None):
        key = (model_name, model_path, model_type, model_config_file, monitoring_config_file,
               grpc_channel_arguments, wait_for_server_ready, pipe,
               model_config_file_poll_period)
        if key in self.cache:
            return self.cache[key]
        where = tempfile.mkdtemp(prefix="tfs-", dir=self.tmp)
        ports_file, sock = os.path.join(where, "ports.json"), os.path.join(where, "tfs.sock")
        command = [sys.executable, "-m", "baton.serving", "--bind_free_ports",
                   f"--ports_file={ports_file}",
                   f"--rest_api_timeout_in_ms={HTTP_REST_TIMEOUT_MS}",
                   f"--grpc_socket_path={sock}"]
        if model_config_file:
            command.append(f"--model_config_file={model_config_file}")
        elif model_path:
            command += [f"--model_name={model_name}", f"--model_base_path={model_path}"]
        else:
            raise ValueError("Both model_config_file and model_path cannot be empty!")
        if model_type == "tflite":
            command.append("--prefer_tflite_model=true")
        if monitoring_config_file:
            command.append(f"--monitoring_config_file={monitoring_config_file}")
        if model_config_file_poll_period is not None:
            command.append(f"--model_config_file_poll_wait_seconds={model_config_file_poll_period}")
        args = ",".join(a for a in (grpc_channel_arguments, "grpc.so_reuseaddr=1") if a)
        command.append(f"--grpc_channel_arguments={args}")
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        log = None if pipe else open(os.path.join(where, "server.log"), "wb")  # noqa: SIM115
        proc = subprocess.Popen(command, stderr=pipe or log, stdout=log or subprocess.DEVNULL,
                                env=env)
        self.procs.append(proc)
        grpc_addr = rest_addr = None
        if wait_for_server_ready:
            ports = self._wait_for_ports(proc, ports_file, where)
            grpc_addr = f"localhost:{ports['grpc']}"
            rest_addr = f"localhost:{ports['rest']}"
            wait_for_server_ready_grpc(grpc_addr)
        hostports = (proc, grpc_addr, rest_addr, sock)
        self.cache[key] = hostports
        return hostports

    @staticmethod
    def _wait_for_ports(proc, ports_file, where) -> dict:
        deadline = time.monotonic() + STARTUP_SECS
        while not os.path.exists(ports_file):
            if proc.poll() is not None or time.monotonic() > deadline:
                with open(os.path.join(where, "server.log"), "rb") as f:
                    raise RuntimeError(f"server not up ({proc.poll()}):\n{f.read()[-3000:]}")
            time.sleep(0.05)
        with open(ports_file) as f:
            return json.load(f)

    def stop_all(self):
        for p in self.procs:  # by pid, SIGTERM then SIGKILL
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def wait_for_server_ready_grpc(address: str) -> None:
    """Upstream's WaitForServerReady: Predict to a missing model until 'Servable' answers."""
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "intentionally_missing_model"
    for _ in range(WAIT_FOR_SERVER_READY_INT_SECS * 10):
        try:
            with grpc.insecure_channel(address) as channel:
                prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(request, 5)
        except grpc.RpcError as error:
            if "Servable" in (error.details() or ""):
                return
        time.sleep(0.1)
    raise TimeoutError(f"server at {address} never answered")


def call_rest(url: str, req) -> bytes:
    """Upstream's CallREST (one attempt: the server is ready when run_server returns)."""
    data = json.dumps(req).encode("utf-8") if req is not None else None
    with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=30) as resp:
        return resp.read()


def sorted_object(obj):
    """Upstream's SortedObject: JSON objects and lists compared without order."""
    if isinstance(obj, dict):
        return sorted((k, sorted_object(v)) for k, v in obj.items())
    if isinstance(obj, list | tuple):
        return sorted(sorted_object(x) for x in obj)
    return obj


def verify_model_spec(spec, name, signature_name, version):
    assert (spec.name, spec.signature_name, spec.version.value) == (
        name, signature_name, version)


def verify_predict_request(address, expected_output, expected_version, model_name="default",
                           specify_output=True, batch_input=False,
                           signature_name="serving_default", rpc_timeout=RPC_TIMEOUT):
    """Upstream's VerifyPredictRequest: x = [2.0] (shape [1], or [1, 1] batched)."""
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    request.model_spec.signature_name = signature_name
    request.inputs["x"].dtype = types_pb2.DT_FLOAT
    request.inputs["x"].float_val.append(2.0)
    request.inputs["x"].tensor_shape.dim.add().size = 1
    if batch_input:
        request.inputs["x"].tensor_shape.dim.add().size = 1
    if specify_output:
        request.output_filter.append("y")
    with grpc.insecure_channel(address) as channel:
        result = prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(
            request, rpc_timeout)
    assert "y" in result.outputs
    assert result.outputs["y"].dtype == types_pb2.DT_FLOAT
    assert len(result.outputs["y"].float_val) == 1
    assert result.outputs["y"].float_val[0] == expected_output
    verify_model_spec(result.model_spec, model_name, signature_name, expected_version)


def model_version(model_path: str) -> int:
    """Upstream's _GetModelVersion: the integer name of the (first) version directory."""
    return int(sorted(e for e in os.listdir(model_path) if e.isdigit())[0])


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    # short: a Unix socket path must fit in 108 bytes
    s = Servers(tempfile.mkdtemp(prefix="upstream-tfs-"))
    yield s
    s.stop_all()


@pytest.fixture(scope="module")
def files(upstream, tmp_path_factory):
    """Upstream's config files; the good one built as upstream's __BuildModelConfigFile."""
    d = tmp_path_factory.mktemp("upstream_config")
    with open(os.path.join(TESTDATA, "good_model_config.txt")) as f:
        config = f.read().replace("${TEST_HALF_PLUS_TWO_DIR}", TFS["half_plus_two"])
        config = config.replace("${TEST_HALF_PLUS_THREE_DIR}", TFS["half_plus_three"])
    good = d / "good_model_config.conf"
    good.write_text(config)
    inline = d / "inline_exports.conf"
    inline.write_text("model_config_list: {\n" + "".join(
        f'  config: {{ name: "{n}", base_path: "{upstream[n]}", model_platform: "tensorflow" }}\n'
        for n in INLINE_EXPORTS) + "}\n")
    return {"good": str(good), "bad": os.path.join(TESTDATA, "bad_model_config.txt"),
            "monitoring": os.path.join(TESTDATA, "monitoring_config.txt"),
            "inline": str(inline), "dir": str(d)}


@pytest.fixture(scope="module")
def tf1(servers, upstream, files):
    """The half_plus_two (TF1) server most cases share: --model_name=default."""
    return servers.run("default", TFS["half_plus_two"],
                       monitoring_config_file=files["monitoring"])


@pytest.fixture(scope="module")
def tf2(servers, upstream):
    """The TF2 half_plus_two server, started with testGoodGrpcChannelArgs' arguments."""
    return servers.run("default", TFS["half_plus_two_tf2"],
                       grpc_channel_arguments="grpc.max_connection_age_ms=2000,"
                                              "grpc.lb_policy_name=grpclb")


def stub(address):
    return prediction_service_pb2_grpc.PredictionServiceStub(grpc.insecure_channel(address))


def test_GetModelStatus(tf1):
    request = get_model_status_pb2.GetModelStatusRequest()
    request.model_spec.name = "default"
    with grpc.insecure_channel(tf1[1]) as channel:
        result = model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(
            request, RPC_TIMEOUT)
    assert len(result.model_version_status) == 1
    assert result.model_version_status[0].version == 123
    assert result.model_version_status[0].status.error_code == 0


def test_GetModelMetadata(tf1, upstream):
    request = get_model_metadata_pb2.GetModelMetadataRequest()
    request.model_spec.name = "default"
    request.metadata_field.append("signature_def")
    result = stub(tf1[1]).GetModelMetadata(request, RPC_TIMEOUT)
    assert result.model_spec.name == "default"
    assert result.model_spec.version.value == model_version(TFS["half_plus_two"])
    assert len(result.metadata) == 1 and "signature_def" in result.metadata


def _classify(address, version):
    request = classification_pb2.ClassificationRequest()
    request.model_spec.name = "default"
    request.model_spec.signature_name = "classify_x_to_y"
    example = request.input.example_list.examples.add()
    example.features.feature["x"].float_list.value.extend([2.0])
    result = stub(address).Classify(request, RPC_TIMEOUT)
    assert len(result.result.classifications) == 1
    assert len(result.result.classifications[0].classes) == 1
    assert result.result.classifications[0].classes[0].score == 3.0
    verify_model_spec(result.model_spec, "default", "classify_x_to_y", version)


def test_Classify(tf1, upstream):
    _classify(tf1[1], model_version(TFS["half_plus_two"]))


def test_ClassifyTf2(tf2, upstream):
    _classify(tf2[1], model_version(TFS["half_plus_two_tf2"]))


def _regress(address, version):
    request = regression_pb2.RegressionRequest()
    request.model_spec.name = "default"
    request.model_spec.signature_name = "regress_x_to_y"
    example = request.input.example_list.examples.add()
    example.features.feature["x"].float_list.value.extend([2.0])
    result = stub(address).Regress(request, RPC_TIMEOUT)
    assert len(result.result.regressions) == 1
    assert result.result.regressions[0].value == 3.0
    verify_model_spec(result.model_spec, "default", "regress_x_to_y", version)


def test_Regress(tf1, upstream):
    _regress(tf1[1], model_version(TFS["half_plus_two"]))


def test_RegressTf2(tf2, upstream):
    _regress(tf2[1], model_version(TFS["half_plus_two_tf2"]))


def _multi_inference(address, version):
    request = inference_pb2.MultiInferenceRequest()
    request.tasks.add().model_spec.name = "default"
    request.tasks[0].model_spec.signature_name = "regress_x_to_y"
    request.tasks[0].method_name = "tensorflow/serving/regress"
    request.tasks.add().model_spec.name = "default"
    request.tasks[1].model_spec.signature_name = "classify_x_to_y"
    request.tasks[1].method_name = "tensorflow/serving/classify"
    example = request.input.example_list.examples.add()
    example.features.feature["x"].float_list.value.extend([2.0])
    result = stub(address).MultiInference(request, RPC_TIMEOUT)
    assert len(result.results) == 2
    assert result.results[0].regression_result.regressions[0].value == 3.0
    assert result.results[1].classification_result.classifications[0].classes[0].score == 3.0
    for i in range(2):
        verify_model_spec(result.results[i].model_spec, request.tasks[i].model_spec.name,
                          request.tasks[i].model_spec.signature_name, version)


def test_MultiInference(tf1, upstream):
    _multi_inference(tf1[1], model_version(TFS["half_plus_two"]))


def test_MultiInferenceTf2(tf2, upstream):
    _multi_inference(tf2[1], model_version(TFS["half_plus_two_tf2"]))


def test_PredictSavedModel(tf1, upstream):
    """Upstream's _TestPredict: with and without an output filter."""
    version = model_version(TFS["half_plus_two"])
    verify_predict_request(tf1[1], expected_output=3.0, expected_version=version)
    verify_predict_request(tf1[1], expected_output=3.0, specify_output=False,
                           expected_version=version)


def test_GoodModelConfig(servers, upstream, files):
    address = servers.run(None, None, model_config_file=files["good"])[1]
    v2, v3 = model_version(TFS["half_plus_two"]), model_version(TFS["half_plus_three"])
    verify_predict_request(address, model_name="half_plus_two", expected_output=3.0,
                           expected_version=v2)
    verify_predict_request(address, model_name="half_plus_two", expected_output=3.0,
                           specify_output=False, expected_version=v2)
    verify_predict_request(address, model_name="half_plus_three", expected_output=4.0,
                           expected_version=v3)
    verify_predict_request(address, model_name="half_plus_three", expected_output=4.0,
                           specify_output=False, expected_version=v3)


def test_BadModelConfig(servers, files):
    proc = servers.run(None, None, model_config_file=files["bad"], pipe=subprocess.PIPE,
                       wait_for_server_ready=False)[0]
    assert proc.stderr is not None
    err = proc.stderr.read()
    assert err.find(b"Error parsing text-format tensorflow.serving.ModelServerConfig") > -1
    assert proc.wait(timeout=60) == 2  # Baton's usage-error exit (TF Serving: 255)


def test_ModelConfigReload(servers, upstream, files):
    config_path = os.path.join(files["dir"], "model_config.txt")
    with open(config_path, "w") as f:
        f.write(BASE_CONFIG.format(name="half_plus_two", model_path=TFS["half_plus_two"]))
    poll_period = 1
    address = servers.run(None, None, model_config_file=config_path,
                          model_config_file_poll_period=poll_period)[1]
    verify_predict_request(address, model_name="half_plus_two", expected_output=3.0,
                           specify_output=False,
                           expected_version=model_version(TFS["half_plus_two"]))
    with open(config_path, "w") as f:
        f.write(BASE_CONFIG.format(name="half_plus_three",
                                   model_path=TFS["half_plus_three"]))
    deadline = time.monotonic() + 10  # upstream sleeps 10 s; the poll happens within 1 s
    while True:
        try:
            verify_predict_request(address, model_name="half_plus_three", expected_output=4.0,
                                   specify_output=False,
                                   expected_version=model_version(TFS["half_plus_three"]))
            break
        except grpc.RpcError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_ModelConfigReloadWithZeroPollPeriod(servers, upstream, files):
    """Runs on the good-config server, which reads its config file once (poll period 0)."""
    address = servers.run(None, None, model_config_file=files["good"])[1]
    verify_predict_request(address, model_name="half_plus_two", expected_output=3.0,
                           specify_output=False,
                           expected_version=model_version(TFS["half_plus_two"]))
    with open(files["good"]) as f:
        good = f.read()
    try:
        with open(files["good"], "w") as f:
            f.write(BASE_CONFIG.format(name="half_plus_three",
                                       model_path=TFS["half_plus_three"]))
        poll_period = 0
        time.sleep(poll_period + 1)
        verify_predict_request(address, model_name="half_plus_two", expected_output=3.0,
                               specify_output=False,
                               expected_version=model_version(TFS["half_plus_three"]))
    finally:
        with open(files["good"], "w") as f:
            f.write(good)


def test_GoodGrpcChannelArgs(tf2, upstream):
    verify_predict_request(tf2[1], expected_output=3.0, specify_output=False,
                           expected_version=model_version(TFS["half_plus_three"]))


def test_ClassifyREST(tf1):
    url = f"http://{tf1[2]}/v1/models/default:classify"
    json_req = {"signature_name": "classify_x_to_y", "examples": [{"x": 2.0}]}
    assert json.loads(call_rest(url, json_req).decode()) == {"results": [[["", 3.0]]]}


def test_RegressREST(tf1):
    url = f"http://{tf1[2]}/v1/models/default:regress"
    json_req = {"signature_name": "regress_x_to_y", "examples": [{"x": 2.0}]}
    assert json.loads(call_rest(url, json_req).decode()) == {"results": [3.0]}


def test_PredictREST(tf1):
    url = f"http://{tf1[2]}/v1/models/default:predict"
    json_req = {"instances": [2.0, 3.0, 4.0]}
    assert json.loads(call_rest(url, json_req).decode()) == {"predictions": [3.0, 3.5, 4.0]}


def test_PredictColumnarREST(tf1):
    url = f"http://{tf1[2]}/v1/models/default:predict"
    json_req = {"inputs": [2.0, 3.0, 4.0]}
    assert json.loads(call_rest(url, json_req).decode()) == {"outputs": [3.0, 3.5, 4.0]}


def test_GetStatusREST(tf1):
    url = f"http://{tf1[2]}/v1/models/default"
    assert json.loads(call_rest(url, None).decode()) == {
        "model_version_status": [{"version": "123", "state": "AVAILABLE",
                                  "status": {"error_code": "OK", "error_message": ""}}]}


def test_GetModelMetadataREST(tf1):
    """Against upstream's own expected JSON (half_plus_two_model_metadata.json)."""
    url = f"http://{tf1[2]}/v1/models/default/metadata"
    got = json.loads(call_rest(url, None).decode())
    with open(os.path.join(TESTDATA, "half_plus_two_model_metadata.json")) as f:
        expected_metadata = json.load(f)
    assert sorted_object(got) == sorted_object(expected_metadata)


def test_PrometheusEndpoint(tf1):
    url = f"http://{tf1[2]}/monitoring/prometheus/metrics"
    resp_data = call_rest(url, None)
    assert "# TYPE" in resp_data.decode("utf-8")


def test_PredictUDS(tf1, upstream):
    verify_predict_request(f"unix:{tf1[3]}", expected_output=3.0, specify_output=False,
                           expected_version=model_version(TFS["half_plus_three"]))


def test_PredictOnTfLite(servers):
    address = servers.run("default", TFS["tflite"], model_type="tflite")[1]
    verify_predict_request(address, expected_output=3.0, specify_output=False,
                           expected_version=model_version(TFS["tflite"]))


def test_PredictWithSignatureDefOnTfLite(servers):
    address = servers.run("default", TFS["tflite_with_sigdef"], model_type="tflite")[1]
    verify_predict_request(address, expected_output=3.0, specify_output=False,
                           expected_version=model_version(TFS["tflite"]))


@pytest.fixture(scope="module")
def inline(servers, files):
    return servers.run(None, None, model_config_file=files["inline"])


def test_tf_saved_model_save(inline, upstream):
    verify_predict_request(inline[1], model_name="tf_saved_model_save", expected_output=12.0,
                           specify_output=False,
                           expected_version=model_version(upstream["tf_saved_model_save"]))


def test_tf_saved_model_save_multiple_signatures(inline, upstream):
    version = model_version(upstream["multiple_signatures"])
    verify_predict_request(inline[1], model_name="multiple_signatures", expected_output=2.0,
                           expected_version=version, signature_name="custom_signature_key")
    verify_predict_request(inline[1], model_name="multiple_signatures", expected_output=1.0,
                           expected_version=version)


def test_sequential_keras_saved_model_save(inline, upstream):
    verify_predict_request(inline[1], model_name="keras_sequential", batch_input=True,
                           specify_output=False, expected_output=2.0,
                           expected_version=model_version(upstream["keras_sequential"]))


def test_distrat_sequential_keras_saved_model_save(inline, upstream):
    verify_predict_request(inline[1], model_name="keras_distrat", batch_input=True,
                           specify_output=False, expected_output=2.0,
                           expected_version=model_version(upstream["keras_distrat"]))


def test_profiler_service_with_valid_trace_request(tf1, tmp_path):
    """Upstream's case: REST predictions in the background while a client traces the
    server for a second. Upstream only checks that the trace call succeeds; here also
    that the trace landed where TensorBoard reads it, with the server's TensorFlow
    events in it, and that the predictions sent meanwhile were answered."""
    from tensorflow.python.profiler import profiler_client

    from baton.serving.profiler import event_count

    url = f"http://{tf1[2]}/v1/models/default:predict"
    answers: list = []

    def predictions():  # upstream: wget every second for 3 seconds, in the background
        for _ in range(3):
            answers.append(json.loads(call_rest(url, {"instances": [2.0, 3.0, 4.0]})))
            time.sleep(0.3)

    background = threading.Thread(target=predictions)
    background.start()
    logdir = tmp_path / "logs"
    logdir.mkdir()
    worker_list, duration_ms, num_tracing_attempts = "", 1000, 10
    profiler_client.trace(tf1[1], str(logdir), duration_ms, worker_list, num_tracing_attempts)
    background.join(30)
    assert answers == [{"predictions": [3.0, 3.5, 4.0]}] * 3
    traces = list((logdir / "plugins" / "profile").glob("*/*.xplane.pb"))
    assert len(traces) == 1
    trace = traces[0].read_bytes()
    assert b"/host:CPU" in trace and event_count(trace) > 0


def test_tf_text(servers):
    """Upstream's tf_text_regression: a Keras model whose graph uses TF Text and
    SentencePiece ops, served because tensorflow-text is installed (`baton[text]`)."""
    pytest.importorskip("tensorflow_text", reason="the `text` extra (tensorflow-text) has no "
                                                  "wheel for this platform")
    address = servers.run("default", TFS["tf_text_regression"])[1]
    verify_predict_request(address, expected_output=3.0,
                           expected_version=model_version(TFS["tf_text_regression"]),
                           rpc_timeout=600)
