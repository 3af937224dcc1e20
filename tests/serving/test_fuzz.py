"""Fuzzing the REST API: always a 4xx with {"error": ...}, never a 5xx or a crash."""

import json
import random
import socket

import fixture_models as fm
from conftest import http

from baton.serving.testing import fuzz_bodies

PATHS = ["/v1/models/penguins:predict", "/v1/models/penguins/versions/1:predict",
         "/v1/models/penguins:classify", "/v1/models/regressor:regress",
         "/v1/models/penguins/labels/stable:predict"]
BAD_PATHS = ["/v1/models/..%2F..%2Fetc%2Fpasswd:predict", "/v1/models/../../etc/passwd",
             "/v1/models/penguins/versions/-1:predict", "/v1/models/penguins/versions/x",
             "/v1/models/%00:predict", "/v1/models/penguins/labels/..%2F:predict",
             "/v1/models/penguins/versions/99999999999999999999999:predict",
             "/v1/models/" + "a" * 5000 + ":predict", "/", "/v1/models/penguins:explode"]


def bodies(rng):
    return fuzz_bodies(rng, fm.PENGUIN)


def check(status, body):
    assert 400 <= status < 500, (status, body)
    assert isinstance(body, dict) and set(body) == {"error"} and body["error"], body


def test_fuzz_bodies_never_5xx(server):
    rng = random.Random(6)
    for raw in bodies(rng):
        for path in PATHS:
            status, body = http(server.rest_port, "POST", path, raw=raw)
            if status == 200:  # a mutation can still be valid JSON for the model
                continue
            check(status, body)


def test_fuzz_paths_and_methods(server):
    for path in BAD_PATHS:
        for method in ("GET", "POST", "PUT", "DELETE"):
            status, body = http(server.rest_port, method, path,
                                raw=b"{}" if method in ("POST", "PUT") else None)
            check(status, body)
    for path in PATHS:
        check(*http(server.rest_port, "DELETE", path))
        check(*http(server.rest_port, "GET", path))
    # the server is still fine afterwards
    status, body = http(server.rest_port, "POST", PATHS[0], {"instances": [fm.PENGUIN]})
    assert status == 200


def test_huge_body_gets_413_without_reading_it(server):
    limit = 1 << 20
    status, body = http(server.rest_port, "POST", PATHS[0], raw=b" " * (limit + 1))
    assert status == 413 and "exceeds" in body["error"]
    with socket.create_connection(("127.0.0.1", server.rest_port), timeout=10) as s:
        s.sendall(b"POST /v1/models/penguins:predict HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Length: 99999999999\r\n\r\n")
        head = s.recv(4096)
    assert head.startswith(b"HTTP/1.1 413")


def test_raw_protocol_garbage(server):
    for raw in (b"GARBAGE\r\n\r\n", b"GET / HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
                b"POST /v1/models/penguins:predict HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
                b"\r\nzz\r\n", b"X" * 70000):
        with socket.create_connection(("127.0.0.1", server.rest_port), timeout=10) as s:
            s.sendall(raw)
            head = s.recv(4096)
        assert head.startswith(b"HTTP/1.1 4"), head[:80]


def test_chunked_and_pipelined_requests(server):
    body = json.dumps({"instances": [fm.PENGUIN]}).encode()
    chunked = (b"POST /v1/models/penguins:predict HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
               + b"%x\r\n" % 10 + body[:10] + b"\r\n" + b"%x\r\n" % (len(body) - 10)
               + body[10:] + b"\r\n0\r\n\r\n")
    plain = (b"POST /v1/models/penguins:predict HTTP/1.1\r\nContent-Length: %d\r\n\r\n"
             % len(body) + body)
    with socket.create_connection(("127.0.0.1", server.rest_port), timeout=10) as s:
        s.sendall(chunked + plain + plain)
        data = b""
        while data.count(b"HTTP/1.1 200") < 3:
            chunk = s.recv(65536)
            assert chunk, data
            data += chunk
    assert data.count(b'"predictions"') == 3
