"""Large-batch splitting end to end, on the server's default event loop (uvloop).

The server runs as a subprocess so that a crash of the server process (a split request
used to be completed off the event loop: SIGSEGV under uvloop) fails these tests instead
of taking pytest down with it.
"""

import concurrent.futures
import json
import urllib.request

import fixture_models as fm
import grpc
import numpy as np
import pytest
import tensorflow as tf
from conftest import install
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from baton.serving.client_demo import ServerProcess

N = 40  # split requests per API: each must complete (generous timeouts, no timing asserts)
ROWS = [dict(fm.PENGUIN, body_mass_g=3000.0 + 250 * i,
             island=("Torgersen", "Biscoe", "Dream")[i % 3]) for i in range(6)]


@pytest.fixture(scope="module")
def split_server(built, tmp_path_factory):
    root = tmp_path_factory.mktemp("split")
    base = str(root / "penguins")
    install(built["penguins1"], base, 1)
    params = root / "batching.config"
    params.write_text("max_batch_size { value: 4 }\n"
                      "enable_large_batch_splitting { value: true }\n"
                      "num_batch_threads { value: 2 }\n"
                      "max_enqueued_batches { value: 1000 }\n")
    mp = pytest.MonkeyPatch()
    mp.setenv("BATON_SERVING_UVLOOP", "1")  # the default: uvloop
    srv = ServerProcess("penguins", base, ["--enable_batching",
                                           f"--batching_parameters_file={params}"])
    try:
        srv.start()
        yield srv
    finally:
        srv.stop()
        mp.undo()


def rest_predict(srv, rows):
    req = urllib.request.Request(srv.url + ":predict",
                                 data=json.dumps({"instances": rows}).encode())
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)["predictions"]


def grpc_request(rows):
    req = predict_pb2.PredictRequest()
    req.model_spec.name = "penguins"
    for k in fm.PENGUIN:
        req.inputs[k].CopyFrom(tf.make_tensor_proto([r[k] for r in rows]))
    return req


def assert_same(got, want):
    assert [p["classes"] for p in got] == [p["classes"] for p in want]
    assert np.allclose([p["probabilities"] for p in got],
                       [p["probabilities"] for p in want], atol=1e-6)


def unsplit(srv):
    """The same 6 rows as requests of at most max_batch_size (4) rows: never split."""
    return rest_predict(srv, ROWS[:4]) + rest_predict(srv, ROWS[4:])


def test_rest_split_requests_answer_like_unsplit_ones_and_server_stays_up(split_server):
    srv = split_server
    want = unsplit(srv)
    for _ in range(N):
        assert_same(rest_predict(srv, ROWS), want)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:  # concurrent split requests
        for got in pool.map(lambda _: rest_predict(srv, ROWS), range(N)):
            assert_same(got, want)
    assert srv.proc.poll() is None, srv.log()
    assert_same(unsplit(srv), want)


def test_grpc_split_requests_complete_and_answer_like_unsplit_ones(split_server):
    srv = split_server
    want = unsplit(srv)
    with grpc.insecure_channel(f"127.0.0.1:{srv.grpc_port}") as ch:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(ch)
        req = grpc_request(ROWS)
        for _ in range(N):
            resp = stub.Predict(req, timeout=60)
            probs = tf.make_ndarray(resp.outputs["probabilities"])
            classes = [c.decode() for c in tf.make_ndarray(resp.outputs["classes"])]
            got = [{"classes": c, "probabilities": p}
                   for c, p in zip(classes, probs, strict=True)]
            assert_same(got, want)
        futures = [stub.Predict.future(req, timeout=60) for _ in range(N)]  # concurrent
        assert all(f.result().outputs["probabilities"].tensor_shape.dim[0].size == 6
                   for f in futures)
    assert srv.proc.poll() is None, srv.log()
