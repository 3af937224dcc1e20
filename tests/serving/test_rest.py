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
    assert s == 200 and len(body["results"]) == 2  # kClassifyRegressResponseKey
    labels = [c[0] for c in body["results"][0]]
    assert labels == list(fm.CLASSES)
    assert max(body["results"][0], key=lambda c: c[1])[0] == "Gentoo"


def test_regress(server):
    s, body = http(server.rest_port, "POST", "/v1/models/regressor:regress",
                   {"examples": [fm.PENGUIN, dict(fm.PENGUIN, body_mass_g=5000.0)]})
    assert s == 200
    assert np.allclose(body["results"], [3.75, 5.0])


@pytest.mark.parametrize("method, path, body, status, needle", [
    ("POST", "/v1/models/nope:predict", {"instances": [1]}, 404, "Servable not found"),
    ("POST", "/v1/models/penguins/versions/9:predict", {"instances": [1]}, 404, "Specific"),
    ("POST", "/v1/models/penguins/labels/beta:predict", {"instances": [1]}, 400,
     "Unrecognized servable version label"),
    ("POST", "/v1/models/penguins:predict", {"instances": [{"island": "x"}]}, 400,
     "keys must be equal to: bill_depth_mm,bill_length_mm,body_mass_g"),
    ("POST", "/v1/models/penguins:predict", {"signature_name": "nope", "instances": [1]}, 400,
     "not found in signature def"),
    # no classify signature: serving_default, whose structure is not a classifier's
    ("POST", "/v1/models/regressor:classify", {"examples": [{}]}, 400,
     "Expected one input Tensor."),
    ("POST", "/v1/models/penguins:classify", {"examples": [{}]}, 400, "is required"),
    ("POST", "/v1/models/penguins:predict", {}, 400, "Missing 'inputs' or 'instances'"),
    ("GET", "/v1/models/penguins:predict", None, 400,
     "Malformed request: GET /v1/models/penguins:predict"),
    ("GET", "/v2/models", None, 404, "Not Found"),
])
def test_errors_are_json_with_tf_serving_status(server, method, path, body, status, needle):
    s, resp = http(server.rest_port, method, path, body)
    assert s == status, resp
    assert set(resp) == {"error"} and needle in resp["error"]


@pytest.mark.parametrize("method, path", [
    ("GET", "/v1/models/penguins:predict"),  # wrong method for a verb
    ("POST", "/v1/models/penguins"),  # wrong method for status
    ("POST", "/v1/models/penguins/metadata"),
    ("PUT", "/v1/models/penguins:predict"),
    ("DELETE", "/v1/models/penguins"),
    ("POST", "/v1/models/penguins:explode"),
    ("POST", "/v1/models/penguins:PREDICT"),  # the regex ignores case, the dispatch does not
    ("GET", "/v1/models/penguins/"),  # whole-path match: no trailing slash
    ("GET", "/v1/models/penguins/versions/1/labels/stable"),
    ("GET", "/v1/nothing/here"),
    ("GET", "/v1/models/a%2Fb/versions/x"),
])
def test_malformed_requests_are_400_with_tf_serving_message(server, method, path):
    s, body = http(server.rest_port, method, path,
                   raw=b"{}" if method in ("POST", "PUT") else None)
    assert s == 400, body
    assert body == {"error": f"Malformed request: {method} {path}"}


def test_routes_match_tf_serving_exactly(server):
    port = server.rest_port
    # /v1/models is matched case-insensitively, the model name is decoded after matching
    s, body = http(port, "GET", "/V1/MODELS/penguins/VERSIONS/1")
    assert s == 200 and [x["version"] for x in body["model_version_status"]] == ["1"]
    s, body = http(port, "POST", "/v1/Models/pen%67uins/Labels/stable:predict",
                   {"instances": [fm.PENGUIN]})
    assert s == 200 and body["predictions"][0]["class_ids"] == 1
    s, body = http(port, "GET", "/v1/models/penguins/versions/1/metadata?x=1")
    assert s == 200 and "signature_def" in body["metadata"]
    # a subresource other than exactly "metadata" is a status request, as in TF Serving
    s, body = http(port, "GET", "/v1/models/penguins/versions/1/METADATA")
    assert s == 200 and "model_version_status" in body
    assert http(port, "GET", "/v1/models") == (
        400, {"error": "Missing model name in request."})
    big = "99999999999999999999"
    assert http(port, "POST", f"/v1/models/penguins/versions/{big}:predict",
                {"instances": [fm.PENGUIN]}) == (
        400, {"error": f"Failed to convert version: {big} to numeric."})
    # unknown models and versions stay model-level errors: 404 NOT_FOUND
    s, body = http(port, "GET", "/v1/models/nope")
    assert s == 404 and "nope" in body["error"]
    s, body = http(port, "GET", "/v1/models/penguins/versions/9/metadata")
    assert s == 404
    # outside /v1/ nothing is routed: 404, as TF Serving's HTTP server answers
    assert http(port, "GET", "/")[0] == 404
    assert http(port, "POST", "/v2/models/penguins:predict", {"instances": []})[0] == 404


# Every series TF Serving's exporter has for what Baton does: name -> (type, label names).
TF_SERVING_SERIES = {
    ":tensorflow:serving:request_count": ("counter", {"model_name", "status"}),
    ":tensorflow:serving:request_latency": ("histogram", {"model_name", "API", "entrypoint"}),
    ":tensorflow:serving:runtime_latency": ("histogram", {"model_name", "API", "runtime"}),
    ":tensorflow:serving:request_example_counts": ("histogram", {"model"}),
    ":tensorflow:serving:request_example_count_total": ("counter", {"model"}),
    ":tensorflow:serving:batching_session:input_batch_size": ("histogram", set()),
    ":tensorflow:serving:batching_session:processed_batch_size": ("histogram", set()),
    ":tensorflow:serving:batching_session:padding_size": ("histogram",
                                                           {"execution_batch_size"}),
    ":tensorflow:serving:batching_session:queuing_latency": ("histogram",
                                                              {"thread_pool_name"}),
    ":tensorflow:serving:batching_session:wrapped_run_count": ("counter", set()),
}


def scrape(port):
    """{sample name: [(labels, value)]} and {family: type} from the exposition text."""
    s, text = http(port, "GET", "/monitoring/prometheus/metrics")
    assert s == 200
    types, samples = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            types[name] = kind
        elif line and not line.startswith("#"):
            head, value = line.rsplit(" ", 1)
            name, _, rest = head.partition("{")
            labels = dict(kv.split("=", 1) for kv in rest.rstrip("}").split(",")) if rest \
                else {}
            samples.setdefault(name, []).append(
                ({k: v.strip('"') for k, v in labels.items()}, float(value)))
    return text, types, samples


def test_prometheus_metrics_have_tf_serving_names_and_labels(server):
    port = server.rest_port
    http(port, "POST", "/v1/models/penguins:predict", {"instances": [fm.PENGUIN] * 3})
    http(port, "POST", "/v1/models/nope:predict", {"instances": [fm.PENGUIN]})
    http(port, "POST", "/v1/models/regressor:regress", {"examples": [fm.PENGUIN] * 2})
    # TF Serving's exporter serves the page whatever the method
    assert http(port, "POST", "/monitoring/prometheus/metrics")[0] == 200
    text, types, samples = scrape(port)
    assert "_total{" not in text.replace("request_example_count_total{", "")
    for name, (kind, labels) in TF_SERVING_SERIES.items():
        assert types.get(name) == kind, name
        suffixes = ("_bucket", "_sum", "_count") if kind == "histogram" else ("",)
        for suffix in suffixes:
            for lab, _ in samples.get(name + suffix, []):
                assert set(lab) - {"le"} == labels, (name + suffix, lab)
        if name != ":tensorflow:serving:batching_session:wrapped_run_count":
            assert any(n.startswith(name) for n in samples), f"no samples for {name}"
    count = dict((tuple(sorted(lab.items())), v)
                 for lab, v in samples[":tensorflow:serving:request_count"])
    assert count[(("model_name", "penguins"), ("status", "OK"))] >= 1
    assert count[(("model_name", "<unknown>"), ("status", "NOT_FOUND"))] >= 1
    assert ('request_latency_count{model_name="penguins",API="predict",entrypoint="REST"}'
            in text)
    assert 'runtime_latency_count{model_name="penguins",API="predict",runtime="TF1"}' in text
    assert ':tensorflow:serving:request_example_count_total{model="regressor"} ' in text
    assert 'queuing_latency_count{thread_pool_name="batch_threads"}' in text
    assert ':tensorflow:serving:batching_session:processed_batch_size_bucket{le="+Inf"}' in text
    assert [v for _, v in samples[":tensorflow:serving:batching_session:wrapped_run_count"]
            ][0] >= 2
    # Baton-only series under their own prefix
    assert 'baton_serving_loaded_versions{model_name="penguins"} 2' in text
    assert 'baton_serving_model_version_available{model_name="penguins",version="1"} 1' in text
    assert "# TYPE baton_serving_batch_queue_rows gauge" in text
    assert ":tensorflow:serving:loaded_versions" not in text
    assert "queue_depth" not in text
