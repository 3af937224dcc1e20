"""orjson and uvloop are dependencies, used directly: no silent stdlib fallback."""

import asyncio
import os

import orjson
import pytest
import uvloop

from baton.serving import json_parse, rest_json
from baton.serving.server import new_event_loop


@pytest.mark.skipif(os.name == "nt", reason="uvloop does not support Windows")
def test_serving_loop_is_uvloop_unless_switched_off(monkeypatch):
    monkeypatch.delenv("BATON_SERVING_UVLOOP", raising=False)
    loop = new_event_loop()
    try:
        assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()
    monkeypatch.setenv("BATON_SERVING_UVLOOP", "0")
    loop = new_event_loop()
    try:
        assert isinstance(loop, asyncio.SelectorEventLoop)
    finally:
        loop.close()


def test_rest_json_uses_orjson_and_json_for_what_orjson_refuses():
    assert json_parse.orjson is orjson
    assert rest_json.loads(b'{"instances": [1, 2.5]}') == {"instances": [1, 2.5]}
    # NaN is not RFC 8259: orjson refuses it and json.loads parses it, as TF Serving does
    assert rest_json.loads(b'{"x": NaN}')["x"] != rest_json.loads(b'{"x": NaN}')["x"]
