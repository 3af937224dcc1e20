"""json_tensor_test.cc's rules over HTTP, against a model (rest_test_models.py), and the
REST cases issue 36 lists: each answered at once, with TF Serving's status.

test_json_tensor.py checks every upstream case on the functions; here the same JSON goes
through a running `baton serve` (with and without --enable_batching) and what it became
comes back from the model (echo signatures), or the answer is the error TF Serving gives.
Two of these requests used to hold the connection until --rest_api_timeout_in_ms and then
answer 504: a scalar string sent as columnar b64 (without batching) and a model whose
output is complex64.
"""

from __future__ import annotations

import json
import time

import pytest
import rest_test_models
from conftest import http

from baton.serving.config import ModelConfig
from baton.serving.server import ModelServer, ServerOptions

FAST = 3.0  # seconds: an answer "at once" on a loaded CI machine; the old hang was 5 s here


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return rest_test_models.export_in_subprocess(str(tmp_path_factory.mktemp("rest_models")))


@pytest.fixture(scope="module", params=[True, False], ids=["batching", "no_batching"])
def port(request, model):
    s = ModelServer(ServerOptions(bind_free_ports=True, enable_batching=request.param,
                                  rest_api_timeout_in_ms=5000,
                                  file_system_poll_wait_seconds=0),
                    [ModelConfig("m", model)]).start()
    s.batching = request.param
    yield s
    s.stop(grace=1)


def post(server, body, raw: bytes | None = None):
    """(status, parsed JSON or text, raw text, seconds) of one :predict."""
    data = raw if raw is not None else json.dumps(body).encode()
    t = time.monotonic()
    status, parsed = http(server.rest_port, "POST", "/v1/models/m:predict", raw=data)
    return status, parsed, time.monotonic() - t


def raw_post(server, body: dict) -> tuple[int, str]:
    import urllib.error
    import urllib.request

    req = urllib.request.Request(f"http://127.0.0.1:{server.rest_port}/v1/models/m:predict",
                                 data=json.dumps(body).encode())
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_MultipleNamedTensor_is_what_the_model_receives(port):
    status, text = raw_post(port, {"instances": [
        {"int_tensor": [[1, 2], [3, 4], [5, 6]], "str_tensor": ["foo", "bar"],
         "float_tensor": [1.0, 0.5], "dbl_tensor": [0.25]},
        {"int_tensor": [[7, 8], [9, 0], [1, 2]], "str_tensor": ["baz", "bat"],
         "float_tensor": [2.0, 1e300], "dbl_tensor": [2.0]}]})
    assert status == 200, text
    assert json.loads(text, parse_float=str, parse_int=str, parse_constant=str) == {
        "predictions": [
            {"int_tensor": [["1", "2"], ["3", "4"], ["5", "6"]], "str_tensor": ["foo", "bar"],
             "float_tensor": ["1.0", "0.5"], "dbl_tensor": ["0.25"]},
            {"int_tensor": [["7", "8"], ["9", "0"], ["1", "2"]], "str_tensor": ["baz", "bat"],
             # a double beyond float32 becomes inf, as rapidjson's GetFloat
             "float_tensor": ["2.0", "Infinity"], "dbl_tensor": ["2.0"]}]}


def test_float32_is_written_with_six_significant_digits(port):
    status, text = raw_post(port, {"signature_name": "six_digits", "instances": [0.0]})
    assert status == 200, text
    raw = json.loads(text, parse_float=str, parse_int=str)
    assert raw == {"predictions": [[["9e+06", "999999.0", "0.5"],
                                    ["0.0003", "3e-05", "555557.5"]]]}
    status, text = raw_post(port, {"inputs": {"int_tensor": [1], "str_tensor": ["a"],
                                              "float_tensor": [0.2], "dbl_tensor": [0.2]}})
    assert status == 200 and '"float_tensor":[0.2]' in text, text
    assert "0.20000000298023224" not in text


def test_a_scalar_string_sent_as_columnar_b64_is_answered_at_once(port):
    status, body, seconds = post(port, {"signature_name": "echo_string",
                                        "inputs": {"b64": "aGVsbG8="}})
    assert seconds < FAST
    if port.batching:  # BatchingSession's refusal
        assert status == 400 and "must have at least one dimension" in body["error"]
    else:  # a plain Session::Run: the scalar goes through
        assert (status, body) == (200, {"outputs": {"y": "hello",
                                                    "y_bytes": {"b64": "aGVsbG8="}}})


def test_a_complex64_output_is_a_400_at_once(port):
    status, body, seconds = post(port, {"signature_name": "complex", "instances": [1.0, 2.0]})
    assert seconds < FAST
    assert status == 400 and "Failed to write JSON value for tensor type: complex64" in body[
        "error"]


def test_a_scalar_output_has_no_row_format(port):
    status, body, _ = post(port, {"signature_name": "scalar", "instances": [1.0, 2.0]})
    if port.batching:  # BatchingSession refuses to split it, as TF Serving's
        assert status == 400 and "Batched output tensor has 0 dimensions" in body["error"]
    else:
        assert status == 400 and "s has no shape information" in body["error"]
        assert post(port, {"signature_name": "scalar", "inputs": [1.0, 2.0]})[:2] == (
            200, {"outputs": 3.0})


def test_a_dtype_json_cannot_carry_is_refused_by_name(port):
    status, body, _ = post(port, {"signature_name": "half", "inputs": [1.0]})
    assert status == 501 and body["error"] == "Conversion of JSON Value: 1.0 to type: half"
    status, body, _ = post(port, {"signature_name": "half", "instances": [1.0]})
    assert status == 400 and "UNIMPLEMENTED: Conversion of JSON Value" in body["error"]


def test_deep_nesting(port):
    deep = "[" * 500000 + "]" * 500000
    status, body, _ = post(port, None, raw=f'{{"signature_name": "six_digits", '
                                           f'"instances":[1], "nested":{deep}}}'.encode())
    assert status == 200, body
    status, body, _ = post(port, None, raw=f'{{"signature_name":{deep}}}'.encode())
    assert status == 400 and "'signature_name' key must be a string value" in body["error"]
    deeper = "[" * (1 << 21) + "]" * (1 << 21)
    status, body, _ = post(port, None, raw=f'{{"instances":{deeper}}}'.encode())
    assert status == 400 and "Nesting deeper than" in body["error"]


@pytest.mark.parametrize("raw, needle", [
    (b"", "JSON Parse error: The document is empty"),
    (b"instances = [1, 2]", "JSON Parse error: Invalid value."),
    (b'{"instances": [1, 2]', "Missing a comma or '}' after an object member."),
    (b"[1]", "Is not object"),
])
def test_parse_errors_are_rapidjsons(port, raw, needle):
    status, body, _ = post(port, None, raw=raw)
    assert status == 400 and needle in body["error"]
