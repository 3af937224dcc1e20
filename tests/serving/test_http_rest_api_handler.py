"""TF Serving's model_servers/http_rest_api_handler_test.cc, ported black-box.

Upstream calls HttpRestApiHandler::ProcessRequest(method, path, body) on a ServerCore
serving `saved_model_half_plus_two_2_versions` (version 123 only, label "Version_Label"
-> 123) and checks the status, the error text, the JSON output and the headers. Here the
same requests go over HTTP to a `baton serve` (in-process ModelServer) set up the same
way, on upstream's own model (testdata/tf_serving/saved_model_half_plus_two_2_versions;
upstream's handler test reads TensorFlow's cc/saved_model/testdata/half_plus_two, the
same y = 0.5x + 2 graph, and compares its metadata with this model's JSON). A status is
checked as its HTTP code (InvalidArgument 400, NotFound 404); an error text as a
substring of `{"error": ...}`; JSON as parsed values (CompareJson compares documents).
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request

import pytest

from baton.serving.config import ModelConfig, VersionPolicy
from baton.serving.server import ModelServer, ServerOptions

TESTDATA = os.path.join(os.path.dirname(__file__), "testdata", "tf_serving")
kTestModelName = "saved_model_half_plus_two_2_versions"
kTestModelVersion1 = 123
kTestModelVersionLabel = "Version_Label"
kNonexistentModelVersionLabel = "Version_Nonexistent"
UINT64_MAX = 2 ** 64 - 1


@pytest.fixture(scope="module")
def handler():
    models = [ModelConfig(kTestModelName, os.path.join(TESTDATA, kTestModelName),
                          VersionPolicy("specific", versions=(kTestModelVersion1,)),
                          ((kTestModelVersionLabel, kTestModelVersion1),))]
    # upstream's handler has no timeout (-1); its ServerCore runs without batching
    s = ModelServer(ServerOptions(bind_free_ports=True, rest_api_timeout_in_ms=0,
                                  file_system_poll_wait_seconds=0), models).start()
    yield s.rest_port
    s.stop(grace=1)


def process_request(port: int, method: str, path: str, body: str = ""):
    """(http status, headers, output) of one request, as ProcessRequest's out-params."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                 data=body.encode() if method == "POST" else None,
                                 method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


def json_error_msg(output: str) -> str:
    """GetJsonErrorMsg: the "error" string of an error body."""
    doc = json.loads(output)
    assert isinstance(doc, dict) and isinstance(doc.get("error"), str), output
    return doc["error"]


def compare_json(output: str, expected: str) -> None:
    assert json.loads(output) == json.loads(expected)


def expect_status(result, status: int, needle: str) -> None:
    code, _, output = result
    assert code == status, output
    assert needle in json_error_msg(output)


def expect_ok(result, expected: str) -> None:
    code, headers, output = result
    assert code == 200, output
    compare_json(output, expected)
    assert headers["Content-Type"] == "application/json"


def test_kPathRegex(handler):
    """kPathRegex is "(?i)/v1/.*": /v1/models is the REST API's, the others are not."""
    assert process_request(handler, "GET", "/v1/models")[0] == 400  # handled: no model name
    for path in ("/statuspage", "/index"):
        assert process_request(handler, "GET", path)[0] == 404
    assert re.fullmatch(r"(?i)/v1/.*", "/v1/models")


def test_UnsupportedApiCalls(handler):
    invalid = 400
    for method, path in [("GET", "/v1/foo"), ("POST", "/v1/foo")]:
        expect_status(process_request(handler, method, path), invalid, "Malformed request")
    expect_status(process_request(handler, "GET", "/v1/models"), invalid,
                  "Missing model name")
    for method, path in [("GET", "/v1/models/debug/model_name"), ("POST", "/v1/models"),
                         ("GET", "/v1/models/foo:predict"),
                         ("GET", "/v1/models/foo/version/50:predict"),
                         ("POST", "/v1/models/foo/version/50:regress"),
                         ("POST", "/v1/models/foo/versions/HELLO:regress")]:
        expect_status(process_request(handler, method, path), invalid, "Malformed request")
    expect_status(process_request(handler, "POST",
                                  f"/v1/models/foo/versions/{UINT64_MAX}:regress"),
                  invalid, "Failed to convert version")
    for method, path in [("POST", "/v1/models/foo/metadata"),
                         ("POST", "/v1/models/foo/label/some_label:regress"),
                         ("POST", "/v1/models/foo/versions/50/labels/some_label:regress"),
                         ("POST", "/v1/models/foo/versions/some_label:regress")]:
        expect_status(process_request(handler, method, path), invalid, "Malformed request")


def test_PredictModelNameVersionErrors(handler):
    not_found = 404
    # 'foo' is not a valid model name.
    assert process_request(handler, "POST", "/v1/models/foo:predict",
                           '{ "instances": [1] }')[0] == not_found
    assert process_request(handler, "POST", "/v1/models/foo/versions/50:predict",
                           '{ "instances": [1] }')[0] == not_found
    # Valid model name, but invalid version number (99).
    assert process_request(handler, "POST", f"/v1/models/{kTestModelName}99:predict",
                           '{ "instances": [1] }')[0] == not_found


def test_PredictRequestErrors(handler):
    invalid = 400
    req_path = f"/v1/models/{kTestModelName}:predict"
    # Empty document.
    expect_status(process_request(handler, "POST", req_path, ""), invalid,
                  "JSON Parse error: The document is empty")
    # Badly formatted JSON.
    expect_status(process_request(handler, "POST", req_path, "instances = [1, 2]"), invalid,
                  "JSON Parse error: Invalid value")
    # Incorrect type.
    expect_status(process_request(handler, "POST", req_path, '{ "instances": ["x", "y"] }'),
                  invalid, "not of expected type: float")
    # Nonexistent version label.
    expect_status(process_request(
        handler, "POST",
        f"/v1/models/{kTestModelName}/labels/{kNonexistentModelVersionLabel}:predict",
        '{ "instances": ["x", "y"] }'), invalid, "Unrecognized servable version label")
    # Incorrect signature_name type.
    expect_status(process_request(handler, "POST", req_path, '{ "signature_name": 100 }'),
                  invalid, "'signature_name' key must be a string value.")


def test_Predict(handler):
    # Query latest version.
    expect_ok(process_request(handler, "POST", f"/v1/models/{kTestModelName}:predict",
                              '{"instances": [[1.0, 2.0], [3.0, 4.0]]}'),
              '{ "predictions": [[2.5, 3.0], [3.5, 4.0]] }')
    # Query specific versions.
    version_path = f"/v1/models/{kTestModelName}/versions/{kTestModelVersion1}:predict"
    expect_ok(process_request(handler, "POST", version_path, '{"instances": [1.0, 2.0]}'),
              '{ "predictions": [2.5, 3.0] }')
    # Query specific versions using a version label.
    expect_ok(process_request(
        handler, "POST", f"/v1/models/{kTestModelName}/labels/{kTestModelVersionLabel}:predict",
        '{"instances": [1.0, 2.0]}'), '{ "predictions": [2.5, 3.0] }')
    # Query specific versions with explicit signature_name.
    expect_ok(process_request(handler, "POST", version_path,
                              '{"signature_name": "serving_default", "instances": [3.0, 4.0]}'),
              '{ "predictions": [3.5, 4.0] }')
    # Query specific versions with explicit signature_name and columnar inputs.
    expect_ok(process_request(handler, "POST", version_path,
                              '{"signature_name": "serving_default", "inputs": [3.0, 4.0]}'),
              '{ "outputs": [3.5, 4.0] }')


def test_Regress(handler):
    body = '{"signature_name": "regress_x_to_y", "examples": [ { "x": 80.0 } ] }'
    for path in (f"/v1/models/{kTestModelName}:regress",
                 f"/v1/models/{kTestModelName}/versions/{kTestModelVersion1}:regress",
                 f"/v1/models/{kTestModelName}/labels/{kTestModelVersionLabel}:regress"):
        expect_ok(process_request(handler, "POST", path, body), '{ "results": [42] }')


def test_Classify(handler):
    expect_ok(process_request(
        handler, "POST", f"/v1/models/{kTestModelName}:classify",
        '{"signature_name": "classify_x_to_y", "examples": [ { "x": 20.0 } ] }'),
        '{ "results": [[["", 12]]] }')
    expect_ok(process_request(
        handler, "POST", f"/v1/models/{kTestModelName}/labels/{kTestModelVersionLabel}:classify",
        '{"signature_name": "classify_x_to_y", "examples": [ { "x": 10.0 } ] }'),
        '{ "results": [[["", 7]]] }')


STATUS_123 = """{
 "model_version_status": [
  {
   "version": "123",
   "state": "AVAILABLE",
   "status": {
   "error_code": "OK",
   "error_message": ""
   }
  }
 ]
}"""


def test_GetStatus(handler):
    for path in (f"/v1/models/{kTestModelName}",
                 f"/v1/models/{kTestModelName}/versions/{kTestModelVersion1}",
                 f"/v1/models/{kTestModelName}/labels/{kTestModelVersionLabel}"):
        expect_ok(process_request(handler, "GET", path), STATUS_123)


def test_GetModelMetadata(handler):
    with open(os.path.join(TESTDATA, "saved_model_half_plus_two_2_versions_metadata.json")) as f:
        test_file_contents = f.read()
    expect_ok(process_request(handler, "GET", f"/v1/models/{kTestModelName}/metadata"),
              test_file_contents)
