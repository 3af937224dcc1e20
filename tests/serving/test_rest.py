"""REST API as TF Serving documents it, against the in-process server."""

import base64

import fixture_models as fm
import numpy as np
import pytest
from conftest import http


def test_model_status_shapes(server):
    s, body = http(server.rest_port, "GET", "/v1/models/penguins")
    assert s == 200
    assert body == {"model_version_status": [
        {"version": v, "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
        for v in ("2", "1")]}
    s, body = http(server.rest_port, "GET", "/v1/models/penguins/versions/1")
    assert s == 200 and [x["version"] for x in body["model_version_status"]] == ["1"]
    s, body = http(server.rest_port, "GET", "/v1/models/penguins/labels/canary")
    assert s == 200 and [x["version"] for x in body["model_version_status"]] == ["2"]


def test_metadata(server):
    s, body = http(server.rest_port, "GET", "/v1/models/penguins/versions/1/metadata")
    assert s == 200
    assert body["model_spec"] == {"name": "penguins", "signature_name": "", "version": "1"}
    sigs = body["metadata"]["signature_def"]["signature_def"]
    default = sigs["serving_default"]
    assert default["method_name"] == "tensorflow/serving/predict"
    assert default["inputs"]["island"]["dtype"] == "DT_STRING"
    assert default["outputs"]["probabilities"]["dtype"] == "DT_FLOAT"
    assert sigs["classify"]["method_name"] == "tensorflow/serving/classify"
    assert "transform_features" in sigs


def test_predict_row_and_columnar_agree_and_versions_differ(server):
    rows = {"instances": [fm.PENGUIN, dict(fm.PENGUIN, island="Biscoe")]}
    s, r1 = http(server.rest_port, "POST", "/v1/models/penguins/versions/1:predict", rows)
    assert s == 200 and len(r1["predictions"]) == 2
    p = r1["predictions"][0]
    assert set(p) == {"probabilities", "class_ids", "classes"}
    assert p["class_ids"] == 1 and p["classes"] == "Chinstrap"  # bias of version 1
    assert abs(sum(p["probabilities"]) - 1) < 1e-5
    cols = {"inputs": {k: [v, v] for k, v in fm.PENGUIN.items()}}
    cols["inputs"]["island"] = ["Torgersen", "Biscoe"]
    s, r2 = http(server.rest_port, "POST", "/v1/models/penguins/labels/stable:predict", cols)
    assert s == 200
    assert np.allclose(r2["outputs"]["probabilities"],
                       [x["probabilities"] for x in r1["predictions"]])
    s, r3 = http(server.rest_port, "POST", "/v1/models/penguins:predict", rows)
    assert s == 200 and r3["predictions"][0]["classes"] == "Gentoo"  # latest = version 2


def test_b64_strings_and_signature_name(server):
    inst = dict(fm.PENGUIN, island={"b64": base64.b64encode(b"Torgersen").decode()})
    s, body = http(server.rest_port, "POST", "/v1/models/penguins/versions/1:predict",
                   {"signature_name": "transform_features", "instances": [inst]})
    s2, plain = http(server.rest_port, "POST", "/v1/models/penguins/versions/1:predict",
                     {"signature_name": "transform_features", "instances": [fm.PENGUIN]})
    assert s == s2 == 200
    assert body == plain and len(body["predictions"][0]) == 20


def test_classify_with_context(server):
    ctx = {k: v for k, v in fm.PENGUIN.items() if k != "island"}
    s, body = http(server.rest_port, "POST", "/v1/models/penguins/versions/2:classify", {
        "signature_name": "classify", "context": ctx,
        "examples": [{"island": "Torgersen"}, {"island": "Dream"}]})
    assert s == 200 and len(body["result"]) == 2
    labels = [c[0] for c in body["result"][0]]
    assert labels == list(fm.CLASSES)
    assert max(body["result"][0], key=lambda c: c[1])[0] == "Gentoo"


def test_regress(server):
    s, body = http(server.rest_port, "POST", "/v1/models/regressor:regress",
                   {"examples": [fm.PENGUIN, dict(fm.PENGUIN, body_mass_g=5000.0)]})
    assert s == 200
    assert np.allclose(body["result"], [3.75, 5.0])


@pytest.mark.parametrize("method, path, body, status, needle", [
    ("POST", "/v1/models/nope:predict", {"instances": [1]}, 404, "Servable not found"),
    ("POST", "/v1/models/penguins/versions/9:predict", {"instances": [1]}, 404, "Specific"),
    ("POST", "/v1/models/penguins/labels/beta:predict", {"instances": [1]}, 400,
     "Unrecognized servable version label"),
    ("POST", "/v1/models/penguins:predict", {"instances": [{"island": "x"}]}, 400, "must have"),
    ("POST", "/v1/models/penguins:predict", {"signature_name": "nope", "instances": [1]}, 400,
     "not found in signature def"),
    ("POST", "/v1/models/regressor:classify", {"examples": [{}]}, 400, "classification"),
    ("POST", "/v1/models/penguins:classify", {"examples": [{}]}, 400, "is required"),
    ("POST", "/v1/models/penguins:predict", {}, 400, "Missing 'inputs' or 'instances'"),
    ("GET", "/v1/models/penguins:predict", None, 405, "POST"),
    ("GET", "/v2/models", None, 404, "Malformed request"),
])
def test_errors_are_json_with_tf_serving_status(server, method, path, body, status, needle):
    s, resp = http(server.rest_port, method, path, body)
    assert s == status, resp
    assert set(resp) == {"error"} and needle in resp["error"]


def test_prometheus_metrics(server):
    http(server.rest_port, "POST", "/v1/models/penguins:predict", {"instances": [fm.PENGUIN]})
    http(server.rest_port, "POST", "/v1/models/nope:predict", {"instances": [fm.PENGUIN]})
    s, text = http(server.rest_port, "GET", "/monitoring/prometheus/metrics")
    assert s == 200
    assert ('request_count_total{API="predict",entrypoint="REST",model_name="penguins",'
            'status="OK"}') in text
    assert 'status="NOT_FOUND"' in text
    assert ':tensorflow:serving:request_latency_bucket{API="predict"' in text
    assert ':tensorflow:serving:runtime_latency_count{model_name="penguins"}' in text
    assert "batching_session:processed_batch_size_bucket" in text
    assert ':tensorflow:serving:batching_session:queue_depth' in text
    assert ':tensorflow:serving:loaded_versions{model_name="penguins"} 2.0' in text
