"""The REST server's HTTP/1.1 parsing (llhttp via httptools), over raw sockets.

Each refused request must get its error status line at once and a closed connection:
request smuggling shapes (two Content-Lengths, Content-Length with chunked, an unknown
Transfer-Encoding) used to be accepted or to hold the connection without an answer.
"""

from __future__ import annotations

import json
import socket
import time

import fixture_models as fm
import pytest

PREDICT = "/v1/models/penguins:predict"
BODY = json.dumps({"instances": [fm.PENGUIN]}).encode()


def connect(server) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", server.rest_port), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_response(s: socket.socket, buf: bytes = b"") -> tuple[bytes, dict, bytes, bytes]:
    """(status line, headers, body, bytes left over) of one response."""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        assert chunk, f"connection closed before a response: {buf!r}"
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(b":")
        headers[k.strip().lower().decode()] = v.strip().decode()
    n = int(headers.get("content-length", 0))
    while len(rest) < n:
        chunk = s.recv(65536)
        assert chunk, "connection closed inside a response body"
        rest += chunk
    return lines[0], headers, rest[:n], rest[n:]


def assert_closed(s: socket.socket, leftover: bytes = b"", within: float = 2.0) -> None:
    """The server closes: recv returns b'' within `within` seconds, nothing else sent."""
    assert leftover == b"", leftover
    s.settimeout(within)
    t0 = time.monotonic()
    try:
        data = s.recv(65536)
    except ConnectionResetError:
        data = b""
    assert data == b"", data
    assert time.monotonic() - t0 < within


def post(body: bytes = BODY, extra: bytes = b"", version: bytes = b"HTTP/1.1") -> bytes:
    return (b"POST " + PREDICT.encode() + b" " + version + b"\r\nHost: x\r\n"
            b"Content-Type: application/json\r\n" + extra
            + b"Content-Length: %d\r\n\r\n" % len(body) + body)


CHUNKED = b"%x\r\n" % len(BODY) + BODY + b"\r\n0\r\n\r\n"
REFUSED = {
    "duplicate differing Content-Length": (
        b"POST " + PREDICT.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
        b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY, 400),
    "duplicate equal Content-Length": (
        b"POST " + PREDICT.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
        b"Content-Length: %d\r\n\r\n" % (len(BODY), len(BODY)) + BODY, 400),
    "Content-Length with Transfer-Encoding chunked": (
        b"POST " + PREDICT.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n" % len(CHUNKED) + CHUNKED, 400),
    "Transfer-Encoding chunked with Content-Length": (
        b"POST " + PREDICT.encode() + b" HTTP/1.1\r\nHost: x\r\n"
        b"Transfer-Encoding: chunked\r\nContent-Length: %d\r\n\r\n" % len(CHUNKED) + CHUNKED,
        400),
    "Transfer-Encoding xchunked": (
        b"POST " + PREDICT.encode() + b" HTTP/1.1\r\nHost: x\r\n"
        b"Transfer-Encoding: xchunked\r\n\r\n" + CHUNKED, 400),
    "Transfer-Encoding chunked in HTTP/1.0": (
        b"POST " + PREDICT.encode() + b" HTTP/1.0\r\nHost: x\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n" + CHUNKED, 400),
    "Transfer-Encoding gzip, chunked": (
        b"POST " + PREDICT.encode() + b" HTTP/1.1\r\nHost: x\r\n"
        b"Transfer-Encoding: gzip, chunked\r\n\r\n" + CHUNKED, 501),
    "HTTP/9.9": (b"GET /v1/models/penguins HTTP/9.9\r\nHost: x\r\n\r\n", 400),
    "HTTP/2.0": (b"GET /v1/models/penguins HTTP/2.0\r\nHost: x\r\n\r\n", 400),
    "HTTP/0.9 (no version)": (b"GET /v1/models/penguins\r\n\r\n", 400),
    "malformed request line": (b"GET /v1/models/penguins HTTP/1.1 extra\r\nHost: x\r\n\r\n",
                               400),
    "lower-case method": (b"get /v1/models/penguins HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    "bare LF line ends": (b"GET /v1/models/penguins HTTP/1.1\nHost: x\n\n", 400),
    "space before the colon": (b"GET /v1/models/penguins HTTP/1.1\r\nHost : x\r\n\r\n", 400),
    "obsolete line folding": (b"GET /v1/models/penguins HTTP/1.1\r\nHost: x\r\n y\r\n\r\n",
                              400),
    "bad chunk size": (b"POST " + PREDICT.encode() + b" HTTP/1.1\r\nHost: x\r\n"
                       b"Transfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
    # just over 64 KiB: what has arrived when the limit is passed is (nearly) all of it
    "over-long header": (b"GET /v1/models/penguins HTTP/1.1\r\nHost: x\r\nX-Big: "
                         + b"a" * 65600 + b"\r\n\r\n", 431),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_refused_requests_get_an_error_and_a_closed_connection(server, name):
    raw, status = REFUSED[name]
    with connect(server) as s:
        t0 = time.monotonic()
        s.sendall(raw)
        line, headers, body, rest = read_response(s)
        assert time.monotonic() - t0 < 2, "the answer must not wait for more input"
        assert line.startswith(b"HTTP/1.1 %d " % status), line
        assert headers.get("connection") == "close"
        assert set(json.loads(body)) == {"error"}
        assert_closed(s, rest)


def test_over_long_header_sent_slowly_is_refused_without_its_end(server):
    with connect(server) as s:
        s.sendall(b"GET /v1/models/penguins HTTP/1.1\r\nX-Big: ")
        # never finished: the limit applies to what has arrived (8 x 8 KiB and the line
        # above pass 64 KiB with the last piece, so nothing arrives after the refusal)
        for _ in range(8):
            time.sleep(0.02)
            s.sendall(b"a" * 8192)
        line, _, _, rest = read_response(s)
        assert line.startswith(b"HTTP/1.1 431 "), line
        assert_closed(s, rest)


def test_keep_alive_sequence_on_one_connection(server):
    with connect(server) as s:
        rest = b""
        for i in range(6):
            if i % 2:
                s.sendall(b"GET /v1/models/penguins HTTP/1.1\r\nHost: x\r\n\r\n")
            else:
                s.sendall(post())
            line, headers, body, rest = read_response(s, rest)
            assert line == b"HTTP/1.1 200 OK", (i, line, body)
            assert "connection" not in headers
            assert ("predictions" if i % 2 == 0 else "model_version_status") in json.loads(body)
        # an error answer keeps the connection too; Connection: close ends it
        s.sendall(b"GET /v1/models/nope HTTP/1.1\r\nHost: x\r\n\r\n")
        line, _, body, rest = read_response(s, rest)
        assert line.startswith(b"HTTP/1.1 404 "), line
        s.sendall(b"GET /v1/models/penguins HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        line, headers, _, rest = read_response(s, rest)
        assert line == b"HTTP/1.1 200 OK" and headers["connection"] == "close"
        assert_closed(s, rest)


def test_http_1_0_closes_unless_keep_alive(server):
    with connect(server) as s:
        s.sendall(post(version=b"HTTP/1.0", extra=b"Connection: keep-alive\r\n"))
        line, headers, _, rest = read_response(s)
        assert line == b"HTTP/1.1 200 OK" and "connection" not in headers
        s.sendall(post(version=b"HTTP/1.0"))
        line, headers, _, rest = read_response(s, rest)
        assert line == b"HTTP/1.1 200 OK" and headers["connection"] == "close"
        assert_closed(s, rest)


def test_pipelined_requests_are_answered_in_order_then_the_refusal(server):
    with connect(server) as s:
        s.sendall(post() + b"GET /v1/models/penguins HTTP/1.1\r\nHost: x\r\n\r\n" + post()
                  + REFUSED["duplicate differing Content-Length"][0] + post())
        rest = b""
        kinds = []
        for _ in range(4):
            line, _, body, rest = read_response(s, rest)
            kinds.append((line.split(b" ")[1], next(iter(json.loads(body)))))
        assert kinds == [(b"200", "predictions"), (b"200", "model_version_status"),
                         (b"200", "predictions"), (b"400", "error")]
        assert_closed(s, rest)


def test_request_fed_one_byte_at_a_time(server):
    raw = (b"POST " + PREDICT.encode() + b" HTTP/1.1\r\nHost: x\r\n"
           b"Transfer-Encoding: chunked\r\n\r\n" + CHUNKED + post())
    with connect(server) as s:
        for i in range(len(raw)):
            s.send(raw[i:i + 1])
        line, _, body, rest = read_response(s)
        assert line == b"HTTP/1.1 200 OK" and "predictions" in json.loads(body)
        line, _, body, rest = read_response(s, rest)
        assert line == b"HTTP/1.1 200 OK" and "predictions" in json.loads(body)


def test_expect_100_continue(server):
    with connect(server) as s:
        s.sendall(b"POST " + PREDICT.encode() + b" HTTP/1.1\r\nHost: x\r\n"
                  b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(BODY))
        assert s.recv(4096) == b"HTTP/1.1 100 Continue\r\n\r\n"
        s.sendall(BODY)
        line, _, body, _ = read_response(s)
        assert line == b"HTTP/1.1 200 OK" and "predictions" in json.loads(body)


def test_upgrade_is_answered_and_closed(server):
    with connect(server) as s:
        s.sendall(b"GET /v1/models/penguins HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n"
                  b"Upgrade: websocket\r\n\r\nxxxx")
        line, headers, _, rest = read_response(s)
        assert line == b"HTTP/1.1 200 OK" and headers["connection"] == "close"
        assert_closed(s, rest)


def test_body_over_the_limit_is_413_and_closed(server):
    limit = 1 << 20  # the fixture's rest_api_max_body_bytes
    with connect(server) as s:
        s.sendall(b"POST " + PREDICT.encode() + b" HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Length: %d\r\n\r\n" % (limit + 1))
        line, _, body, rest = read_response(s)
        assert line.startswith(b"HTTP/1.1 413 ") and b"exceeds" in body
        s.sendall(b" " * (limit + 1))  # swallowed, then closed
        assert_closed(s, rest, within=5)
    # chunked: refused when byte limit + 1 arrives, the last one sent (nothing after it)
    chunk = b"%x\r\n" % 65536 + b" " * 65536 + b"\r\n"
    with connect(server) as s:
        s.sendall(b"POST " + PREDICT.encode() + b" HTTP/1.1\r\nHost: x\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n" + chunk * (limit // 65536)
                  + b"1\r\n ")
        line, _, body, rest = read_response(s)
        assert line.startswith(b"HTTP/1.1 413 ") and b"exceeds" in body
        assert_closed(s, rest)


class _Transport:
    def __init__(self):
        self.out = b""
        self.closed = False

    def write(self, data):
        self.out += data

    def close(self):
        self.closed = True

    def get_write_buffer_size(self):  # asyncio.WriteTransport's: all written at once
        return 0

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass


@pytest.mark.parametrize("leniency,raw", [
    ("lenient_chunked_length", REFUSED["Content-Length with Transfer-Encoding chunked"][0]),
    ("lenient_transfer_encoding", REFUSED["Transfer-Encoding xchunked"][0]),
    ("lenient_version", REFUSED["HTTP/9.9"][0]),
])
def test_refusals_hold_with_a_lenient_llhttp(leniency, raw):
    """What RFC 9112 says a server must refuse is refused by http.py itself too."""
    import asyncio

    from baton.serving.http import HttpProtocol, HttpServerState

    handled = []

    async def run():
        conn = HttpProtocol(HttpServerState(lambda *a: handled.append(a), 1 << 20, 0))
        t = _Transport()
        conn.connection_made(t)
        conn.parser.set_dangerous_leniencies(**{leniency: True})
        conn.data_received(raw)
        return t

    t = asyncio.run(run())
    assert t.out.startswith(b"HTTP/1.1 400 ") and t.closed and not handled, t.out
