"""TF Serving's model_servers/http_rest_api_util_test.cc, ported.

Upstream tests ParseModelInfo(method, path) -> model name, version, label, method,
subresource and whether the path parsed. Its counterpart here is rest.parse_route (None:
did not parse; ServingError: parsed, then refused), checked case by case with upstream's
paths and values; then the reserved-character names end to end: a model named
`modelname!#$%&'()*+,/:;=?@[]` in a --model_config_file, reached over REST with its name
percent-encoded, as upstream's paths carry it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import urllib.parse

import pytest
from conftest import http

from baton.serving.rest import parse_route
from baton.serving.status import Code, ServingError

RESERVED = "%21%23%24%25%26%27%28%29%2A%2B%2C%2F%3A%3B%3D%3F%40%5B%5D"
DECODED = "!#$%&'()*+,/:;=?@[]"
TESTDATA = os.path.join(os.path.dirname(__file__), "testdata", "tf_serving")


def parse_model_info(method: str, path: str) -> dict | None:
    """ParseModelInfo's outputs, or None where parse_successful is false."""
    route = parse_route(method, path)
    if route is None:
        return None
    name, version, label, what = route
    out = {"model_name": name}
    if version is not None:
        out["model_version"] = version
    if label is not None:
        out["model_version_label"] = label
    if what == "metadata":
        out["model_subresource"] = "metadata"
    elif what != "status":
        out["method"] = what
    return out


def test_TestParseModelInfoForGet():
    assert parse_model_info("GET", f"/v1/models/modelname{RESERVED}") == {
        "model_name": f"modelname{DECODED}"}
    assert parse_model_info("GET", "/v1/models/modelname/versions/99") == {
        "model_name": "modelname", "model_version": 99}
    assert parse_model_info("GET", "/v1/models/modelname/labels/latest") == {
        "model_name": "modelname", "model_version_label": "latest"}
    assert parse_model_info("GET", f"/v1/models/modelname/labels/latest{RESERVED}") == {
        "model_name": "modelname", "model_version_label": f"latest{DECODED}"}
    assert parse_model_info("GET", "/v1/models/modelname/labels/latest/metadata") == {
        "model_name": "modelname", "model_version_label": "latest",
        "model_subresource": "metadata"}
    assert parse_model_info(
        "GET", f"/v1/models/modelname{RESERVED}/labels/latest{RESERVED}/metadata") == {
        "model_name": f"modelname{DECODED}", "model_version_label": f"latest{DECODED}",
        "model_subresource": "metadata"}
    # Test failure cases.
    for path in ("/v1/foo", "/v1/models/foo:predict", "/v1/models/foo/version/50:predict"):
        assert parse_model_info("GET", path) is None, path


def test_TestParseModelInfoForPost():
    assert parse_model_info("POST", f"/v1/models/modelname{RESERVED}:predict") == {
        "model_name": f"modelname{DECODED}", "method": "predict"}
    assert parse_model_info("POST", "/v1/models/modelname/versions/99:predict") == {
        "model_name": "modelname", "model_version": 99, "method": "predict"}
    assert parse_model_info("POST", "/v1/models/modelname/labels/latest:predict") == {
        "model_name": "modelname", "model_version_label": "latest", "method": "predict"}
    assert parse_model_info("POST", f"/v1/models/modelname/labels/latest{RESERVED}:predict") == {
        "model_name": "modelname", "model_version_label": f"latest{DECODED}",
        "method": "predict"}
    assert parse_model_info(
        "POST", f"/v1/models/modelname{RESERVED}/labels/latest{RESERVED}:predict") == {
        "model_name": f"modelname{DECODED}", "model_version_label": f"latest{DECODED}",
        "method": "predict"}
    # Test failure cases.
    for path in ("/v1/foo", "/v1/models", "/v1/models/foo/version/50:predict",
                 "/v1/models/foo/versions/string:predict", "/v1/models/foo/metadata",
                 "/v1/models/foo/versions/50/labels/some_label:regress"):
        assert parse_model_info("POST", path) is None, path
    # parsed, then refused
    with pytest.raises(ServingError) as e:
        parse_route("POST", f"/v1/models/foo/versions/{2 ** 64 - 1}:predict")
    assert e.value.code == Code.INVALID_ARGUMENT
    assert "Failed to convert version" in e.value.message


def test_a_model_named_with_reserved_characters_is_served_under_its_encoded_name():
    """The name in a --model_config_file (TF Serving accepts it; Baton refused it), each
    REST route reached with the name percent-encoded as upstream's paths carry it."""
    name = f"modelname{DECODED}"
    model = os.path.join(TESTDATA, "saved_model_half_plus_two_cpu")
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "models.config")
        with open(config, "w") as f:
            quoted = name.replace("'", "\\'")
            f.write(f'model_config_list {{ config {{ name: "{quoted}" base_path: "{model}" '
                    'model_platform: "tensorflow" } }')
        ports, log = os.path.join(tmp, "ports.json"), os.path.join(tmp, "server.log")
        with open(log, "wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "baton.serving",
                                     "--bind_free_ports", f"--ports_file={ports}",
                                     f"--model_config_file={config}"],
                                    stdout=out, stderr=out,
                                    env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
        try:
            port = _rest_port(proc, ports, log)
            encoded = urllib.parse.quote(name, safe="")
            assert encoded == f"modelname{RESERVED}"
            status, body = http(port, "GET", f"/v1/models/{encoded}")
            assert status == 200 and body["model_version_status"][0]["state"] == "AVAILABLE"
            status, body = http(port, "GET", f"/v1/models/{encoded}/metadata")
            assert status == 200 and body["model_spec"]["name"] == name
            status, body = http(port, "POST", f"/v1/models/{encoded}:predict",
                                {"instances": [2.0]})
            assert (status, body) == (200, {"predictions": [3.0]})
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def _rest_port(proc, ports: str, log: str) -> int:
    import json
    import time

    deadline = time.monotonic() + 120
    while not os.path.exists(ports):
        if proc.poll() is not None or time.monotonic() > deadline:
            with open(log, "rb") as f:
                raise RuntimeError(f"server not up: {f.read()[-2000:]!r}")
        time.sleep(0.05)
    with open(ports) as f:
        return json.load(f)["rest"]
