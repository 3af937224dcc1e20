"""Hot reload under load, graceful SIGTERM and the demo helper (slow: real processes)."""

import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request

import fixture_models as fm
import grpc
import pytest
import tensorflow as tf
from conftest import install
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from baton.serving.client_demo import ServerProcess
from baton.serving.config import ModelConfig
from baton.serving.server import ModelServer, ServerOptions
from baton.serving.testing import corrupt as make_corrupt
from baton.serving.testing import finish_copy, half_copy

# class id each fixture answers with, by bias: penguinsB adds 10 to class B % 3
EXPECTED_CLASS = {1: 1, 2: 2, 3: 0}


def state_of(server, version):
    """The manager's state for `version` of penguins, None before its first poll saw it."""
    return next((r.state for r in server.manager.status("penguins") if r.version == version),
                None)


def wait_for(condition, timeout=30.0):
    """Waits for the manager to reach a state (a loaded CI machine polls slowly)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the model manager did not get there in time"
        time.sleep(0.02)


@pytest.mark.slow
def test_push_versions_under_load_zero_failures(built, tmp_path):
    base = str(tmp_path / "penguins")
    install(built["penguins1"], base, 1)
    bias_of = {1: 1}
    opts = ServerOptions(bind_free_ports=True, enable_batching=True,
                         file_system_poll_wait_seconds=0.05)
    server = ModelServer(opts, [ModelConfig("penguins", base)]).start()
    stop = threading.Event()
    seen, failures, count = set(), [], [0]
    req = predict_pb2.PredictRequest()
    req.model_spec.name = "penguins"
    for k, v in fm.PENGUIN.items():
        req.inputs[k].CopyFrom(tf.make_tensor_proto([v]))

    def client():
        ch = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
        stub = prediction_service_pb2_grpc.PredictionServiceStub(ch)
        while not stop.is_set():
            try:
                r = stub.Predict(req, timeout=30)
            except grpc.RpcError as e:
                failures.append(f"{e.code()}: {e.details()}")
                continue
            v = r.model_spec.version.value
            cls = int(tf.make_ndarray(r.outputs["class_ids"])[0])
            if v not in bias_of or EXPECTED_CLASS[bias_of[v]] != cls:
                failures.append(f"version {v} answered class {cls}")
            seen.add(v)
            count[0] += 1
        ch.close()

    threads = [threading.Thread(target=client) for _ in range(32)]
    for t in threads:
        t.start()
    try:
        corrupt, half = 4, 7
        for v in range(2, 12):
            time.sleep(0.4)
            b = 1 + v % 3
            if v == corrupt:
                make_corrupt(built[f"penguins{b}"], base, v)
                # the next push must not hide it: a poll that sees 4 and 5 tries only 5
                wait_for(lambda: state_of(server, corrupt) == "END")
            elif v == half:
                src, dst = built[f"penguins{b}"], os.path.join(base, str(v))
                half_copy(src, dst)
                # a poll tried the half-copied directory and it failed (not served) ...
                wait_for(lambda: state_of(server, half) == "END")
                bias_of[v] = b
                finish_copy(src, dst)
                # ... and the completed copy is loaded before 8 arrives (a poll slowed by
                # the load of 6 would otherwise see 7 and 8 together and load only 8)
                wait_for(lambda: state_of(server, half) == "AVAILABLE")
            else:
                bias_of[v] = b
                install(built[f"penguins{b}"], base, v)
        deadline = time.monotonic() + 30
        while server.manager.resolve("penguins").version != 11 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        server.stop(grace=5)
    assert failures == []
    assert count[0] > 100
    assert corrupt not in seen and 11 in seen and half in {r.version for r in
                                                           server.manager.status("penguins")}
    assert len(seen) >= 3


@pytest.mark.slow
def test_sigterm_finishes_in_flight_and_refuses_new(built, tmp_path):
    base = str(tmp_path / "penguins")
    install(built["penguins1"], base, 1)
    params = tmp_path / "batching.config"
    # one lone request waits 1.5 s for company: it is in flight when SIGTERM arrives
    params.write_text("max_batch_size { value: 64 } batch_timeout_micros { value: 1500000 }")
    with ServerProcess("penguins", base, ["--enable_batching",
                                          f"--batching_parameters_file={params}"]) as srv:
        result = {}

        def slow_request():
            try:
                result["ok"] = srv.predict([fm.PENGUIN])
            except Exception as e:  # noqa: BLE001
                result["error"] = repr(e)

        t = threading.Thread(target=slow_request)
        t.start()
        time.sleep(0.5)
        t_sig = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        try:  # a new request while the in-flight one is still running: refused
            urllib.request.urlopen(srv.url, timeout=5)
            refused = "served"
        except urllib.error.HTTPError as e:
            refused = e.code
        except (urllib.error.URLError, ConnectionError):
            refused = "refused"
        assert refused in (503, "refused")
        assert "ok" not in result  # still in flight
        code = srv.stop(timeout=30)
        t.join(10)
        assert "ok" in result, result
        assert result["ok"]["predictions"][0]["class_ids"] == 1
        assert time.monotonic() - t_sig >= 0.5  # it waited for the in-flight request
        assert code == 0, srv.log()
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            urllib.request.urlopen(srv.url, timeout=5)


@pytest.mark.slow
def test_stop_under_grpc_load_finishes_every_started_call(built, tmp_path, monkeypatch):
    """Stopping under gRPC load: every Predict a handler started completes; clients see
    only OK, UNAVAILABLE, or CANCELLED for calls grpc cancelled before any handler had
    them (grpc's shutdown cancels calls not yet handed to the application)."""
    import asyncio

    from baton.serving import grpc_service

    base = str(tmp_path / "penguins")
    install(built["penguins1"], base, 1)
    started, finished = [0], [0]
    predict = grpc_service.PredictionServicer.Predict

    async def counted(self, request, context):
        started[0] += 1
        out = await predict(self, request, context)
        finished[0] += 1
        return out

    monkeypatch.setattr(grpc_service.PredictionServicer, "Predict", counted)
    predict_now = grpc_service.PredictionServicer.predict_now  # the native server's form

    def counted_now(self, raw, context, reply):
        started[0] += 1

        def counted_reply(*args):
            finished[0] += 1
            return reply(*args)

        return predict_now(self, raw, context, counted_reply)

    monkeypatch.setattr(grpc_service.PredictionServicer, "predict_now", counted_now)
    server = ModelServer(ServerOptions(bind_free_ports=True, enable_batching=True),
                         [ModelConfig("penguins", base)]).start()
    req = predict_pb2.PredictRequest()
    req.model_spec.name = "penguins"
    for k, v in fm.PENGUIN.items():
        req.inputs[k].CopyFrom(tf.make_tensor_proto([v]))
    seen: dict = {}

    async def load():
        ch = grpc.aio.insecure_channel(f"127.0.0.1:{server.grpc_port}")
        stub = prediction_service_pb2_grpc.PredictionServiceStub(ch)
        stopping = threading.Event()

        async def client():
            while True:
                try:
                    await stub.Predict(req, timeout=30)
                    code = "OK"
                except grpc.RpcError as e:
                    code = e.code().name
                key = (code, stopping.is_set())
                seen[key] = seen.get(key, 0) + 1
                if code != "OK":
                    if not stopping.is_set():
                        return
                    await asyncio.sleep(0.01)
                if stopping.is_set() and not stopper.is_alive():
                    return

        clients = [asyncio.ensure_future(client()) for _ in range(32)]
        await asyncio.sleep(1.5)
        stopping.set()
        stopper = threading.Thread(target=server.stop, kwargs={"grace": 10})
        stopper.start()
        await asyncio.gather(*clients)
        await ch.close()
        stopper.join(30)

    asyncio.run(load())
    assert started[0] == finished[0] > 0, (started, finished, seen)
    assert not [k for k in seen if not k[1] and k[0] != "OK"], seen  # nothing failed before
    assert {k[0] for k in seen} <= {"OK", "UNAVAILABLE", "CANCELLED"}, seen


@pytest.mark.slow
def test_demo_helper_prints_one_prediction(built, tmp_path):
    import io

    from baton.serving.client_demo import demo

    base = str(tmp_path / "penguins")
    install(built["penguins2"], base, 1)
    out = io.StringIO()
    result = demo(base, "penguins", fm.PENGUIN, out=out)
    assert result["predictions"][0]["classes"] == "Gentoo"
    printed = out.getvalue()
    assert ":predict" in printed and json.loads(printed[printed.index("{\n"):]) == result
