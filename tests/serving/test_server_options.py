"""Server flags end to end: --rest_api_timeout_in_ms, --model_config_file_poll_wait_seconds."""

import logging
import os
import threading
import time

import fixture_models as fm
import grpc
import pytest
import tensorflow as tf
from conftest import http, install
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from baton.serving.config import ModelConfig
from baton.serving.server import ModelServer, ServerOptions


def wait_until(check, timeout=60.0, every=0.1):
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(every)


@pytest.fixture(scope="module")
def slow_server(built, tmp_path_factory):
    """Batching on one thread, a 300 ms REST timeout, and a signature we can slow down."""
    root = tmp_path_factory.mktemp("slow")
    base = str(root / "penguins")
    install(built["penguins1"], base, 1)
    params = root / "batching.config"
    params.write_text("max_batch_size { value: 8 } num_batch_threads { value: 1 }")
    opts = ServerOptions(bind_free_ports=True, enable_batching=True,
                         batching_parameters_file=str(params), rest_api_timeout_in_ms=300,
                         file_system_poll_wait_seconds=0)
    s = ModelServer(opts, [ModelConfig("penguins", base)]).start()
    sig = s.manager.resolve("penguins").signature("serving_default")
    fast = sig.fn
    s.delay = 0.0

    def slow(**kw):
        time.sleep(s.delay)
        return fast(**kw)

    sig.fn = slow
    yield s
    s.delay = 0.0
    s.stop(grace=5)


def predict(port, rows=1):
    return http(port, "POST", "/v1/models/penguins:predict", {"instances": [fm.PENGUIN] * rows})


def test_rest_request_whose_run_exceeds_the_timeout_gets_504(slow_server):
    s = slow_server
    status, body = predict(s.rest_port)
    assert status == 200 and body["predictions"][0]["class_ids"] == 1
    s.delay = 1.5
    try:
        status, body = predict(s.rest_port)
    finally:
        s.delay = 0.0
    # TF Serving: the session run fails with DEADLINE_EXCEEDED -> 504
    assert (status, body) == (504, {"error": "Timed out waiting for notification"})
    time.sleep(1.6)  # let the slow batch finish
    assert predict(s.rest_port)[0] == 200  # and the server is fine


def test_rest_request_timing_out_in_the_batching_queue_gets_429(slow_server):
    s = slow_server
    s.delay = 1.5
    results = {}
    try:
        first = threading.Thread(target=lambda: results.setdefault("a", predict(s.rest_port)))
        first.start()
        time.sleep(0.3)  # the single batch thread is busy with the first request
        results["b"] = predict(s.rest_port, rows=2)  # waits in the queue past its deadline
        first.join(30)
    finally:
        s.delay = 0.0
    assert results["a"] == (504, {"error": "Timed out waiting for notification"})
    # TF Serving's BatchingSession: RESOURCE_EXHAUSTED -> 429, the batch is not run
    assert results["b"] == (
        429, {"error": "Run() timeout exceeded while waiting in batching queue"})
    assert predict(s.rest_port)[0] == 200


def test_rest_timeout_does_not_apply_to_grpc(slow_server):
    s = slow_server
    req = predict_pb2.PredictRequest()
    req.model_spec.name = "penguins"
    for k, v in fm.PENGUIN.items():
        req.inputs[k].CopyFrom(tf.make_tensor_proto([v]))
    s.delay = 0.6
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.grpc_port}") as ch:
            resp = prediction_service_pb2_grpc.PredictionServiceStub(ch).Predict(req,
                                                                                timeout=30)
    finally:
        s.delay = 0.0
    assert tf.make_ndarray(resp.outputs["class_ids"]).tolist() == [1]


def config_text(models):
    """A ModelServerConfig with (name, base_path, all_versions, labels) entries."""
    out = ["model_config_list {"]
    for name, base, all_versions, labels in models:
        out.append(f'  config {{ name: "{name}" base_path: "{base}"')
        if all_versions:
            out.append("    model_version_policy { all {} }")
        for k, v in labels.items():
            out.append(f'    version_labels {{ key: "{k}" value: {v} }}')
        out.append("  }")
    out.append("}")
    return "\n".join(out) + "\n"


def write(path, text):
    tmp = str(path) + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def test_model_config_file_is_polled_and_applied(built, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="serving")
    pb, rb = str(tmp_path / "penguins"), str(tmp_path / "regressor")
    install(built["penguins1"], pb, 1)
    install(built["penguins2"], pb, 2)
    install(built["regressor"], rb, 7)
    cfg = tmp_path / "models.config"
    write(cfg, config_text([("penguins", pb, False, {})]))
    opts = ServerOptions(bind_free_ports=True, model_config_file=str(cfg),
                         model_config_file_poll_wait_seconds=0.2,
                         file_system_poll_wait_seconds=0)
    s = ModelServer(opts).start()
    port = s.rest_port
    try:
        assert http(port, "GET", "/v1/models/regressor")[0] == 404
        assert [v["version"] for v in http(port, "GET", "/v1/models/penguins")[1][
            "model_version_status"] if v["state"] == "AVAILABLE"] == ["2"]
        # add a model, serve every penguins version and label one: applied by the poller
        write(cfg, config_text([("penguins", pb, True, {"stable": 1}),
                                ("regressor", rb, False, {})]))
        assert wait_until(lambda: http(port, "GET", "/v1/models/regressor")[0] == 200)
        status, body = wait_until(lambda: (r := http(
            port, "POST", "/v1/models/penguins/labels/stable:predict",
            {"instances": [fm.PENGUIN]}))[0] == 200 and r)
        assert status == 200 and body["predictions"][0]["class_ids"] == 1
        # a file that does not parse is logged; what is served stays
        write(cfg, 'model_config_list { config { name: "penguins" ')
        assert wait_until(lambda: "Failed to read ModelServerConfig file" in caplog.text)
        time.sleep(0.5)
        assert http(port, "GET", "/v1/models/regressor")[0] == 200
        # removing a model from the file unloads it
        write(cfg, config_text([("penguins", pb, True, {"stable": 1})]))
        assert wait_until(lambda: http(port, "GET", "/v1/models/regressor")[0] == 404)
        assert http(port, "GET", "/v1/models/penguins/versions/1")[0] == 200
    finally:
        s.stop(grace=2)


@pytest.mark.parametrize("host, warned", [
    ("127.0.0.1", False), ("::1", False), ("[::1]", False), ("localhost", False),
    ("127.0.0.2", False), ("0.0.0.0", True), ("::", True), ("10.1.2.3", True),
    ("serving.example", True)])
def test_a_host_beyond_loopback_is_warned_about(host, warned):
    """Neither API has TLS or authentication: binding beyond loopback is the user's
    explicit choice (--host), and it is logged as a warning that names the remedy."""
    from baton.serving.server import exposure_warning

    text = exposure_warning(host)
    assert (text is not None) == warned
    if warned:
        assert host in text and "without TLS or authentication" in text
