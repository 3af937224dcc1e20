"""A lean HTTP/1.1 server on asyncio.Protocol (keep-alive, pipelining, 100-continue).

The REST hot path is parse -> route -> submit to the batcher -> write, with no task or
coroutine per request: handlers either answer at once or call `respond` later from a
batch completion. Only what TF Serving's REST API needs is implemented: Content-Length
and chunked bodies, a body size limit (413), a header size limit (431) and per-request
timeouts swept by one periodic timer instead of a timer per request.

The timeout is `--rest_api_timeout_in_ms`, which TF Serving applies to the model run: a
request whose run outlives it is answered 504 with DirectSession's DEADLINE_EXCEEDED
message. A request still waiting in a batching queue is left to the batcher, which fails
it with 429 RESOURCE_EXHAUSTED when it is taken too late (see batcher).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
            404: "Not Found", 405: "Method Not Allowed", 409: "Conflict",
            411: "Length Required", 413: "Payload Too Large", 429: "Too Many Requests",
            431: "Request Header Fields Too Large", 499: "Client Closed Request",
            500: "Internal Server Error", 501: "Not Implemented",
            503: "Service Unavailable", 504: "Gateway Timeout"}
MAX_HEADER_BYTES = 64 * 1024
# (status, content type) -> response head up to the Content-Length value
_HEAD_CACHE: dict[tuple[int, bytes], bytes] = {}


# What TF Serving's REST API answers (504) when the run exceeds --rest_api_timeout_in_ms.
TIMEOUT_MESSAGE = "Timed out waiting for notification"


def error_body(message: str) -> bytes:
    return json.dumps({"error": message}).encode()


class HttpServerState:
    """Shared by all connections: handler, limits, in-flight tracking, shutdown flag."""

    def __init__(self, handler: Callable, max_body_bytes: int, timeout_s: float):
        self.handler = handler  # handler(conn, method, target, body) -> None
        self.max_body_bytes = max_body_bytes
        self.timeout_s = timeout_s
        self.connections: set[HttpProtocol] = set()
        self.closing = False

    @property
    def in_flight(self) -> int:
        return sum(1 for c in self.connections if c.busy)

    def sweep(self) -> None:
        """Answers requests whose run is past its deadline with 504 (called periodically)."""
        if self.timeout_s <= 0:
            return
        now = time.monotonic()
        for c in list(self.connections):
            if not c.busy:
                continue
            task = c.task
            if task is None:
                deadline = c.started + self.timeout_s
            elif not task.running:
                continue  # queued: the batcher decides when a worker takes it
            else:
                deadline = task.deadline
            if deadline and now > deadline:
                c.respond(504, error_body(TIMEOUT_MESSAGE), close=True)


class HttpProtocol(asyncio.Protocol):
    __slots__ = ("state", "transport", "buf", "busy", "keep_alive", "started", "seq",
                 "task", "_discard")

    def __init__(self, state: HttpServerState):
        self.state = state
        self.transport = None
        self.buf = b""
        self.busy = False
        self.keep_alive = True
        self.started = 0.0
        self.seq = 0
        self.task = None  # the batching Task of the request in flight, if any
        self._discard = 0  # body bytes still to swallow after a 413 before closing

    def connection_made(self, transport):
        self.transport = transport
        self.state.connections.add(self)

    def connection_lost(self, exc):
        self.state.connections.discard(self)
        self.busy = False
        self.transport = None
        self.task = None

    def data_received(self, data: bytes):
        if self._discard:
            self._discard -= min(self._discard, len(data))
            if not self._discard and self.transport is not None:
                self.transport.close()
            return
        self.buf = self.buf + data if self.buf else data
        if not self.busy:
            self._process()

    def _fail(self, status: int, message: str):
        self.busy = True
        self.respond(status, error_body(message), close=True)

    def _process(self):
        while self.buf and not self.busy and self.transport is not None:
            buf = self.buf
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEADER_BYTES:
                    self._fail(431, "Request headers too large")
                return
            try:
                head = buf[:end].decode("latin-1")
                lines = head.split("\r\n")
                method, target, version = lines[0].split(" ")
            except ValueError:
                self._fail(400, "Malformed HTTP request line")
                return
            length = 0
            chunked = False
            expect = False
            keep_alive = version == "HTTP/1.1"
            try:
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    name = name.strip().lower()
                    if name == "content-length":
                        length = int(value)
                        if length < 0:
                            raise ValueError
                    elif name == "transfer-encoding":
                        chunked = "chunked" in value.lower()
                    elif name == "connection":
                        v = value.strip().lower()
                        keep_alive = v == "keep-alive" if v in ("keep-alive", "close") \
                            else keep_alive
                    elif name == "expect":
                        expect = value.strip().lower() == "100-continue"
            except ValueError:
                self._fail(400, "Invalid Content-Length header")
                return
            if length > self.state.max_body_bytes:
                # Answer now, then swallow what the client is still sending (up to a bound,
                # for at most a few seconds) so it reads a 413 instead of a broken pipe.
                transport = self.transport
                left = length - (len(buf) - end - 4)
                if left > 0 and length <= 4 * self.state.max_body_bytes:
                    self._discard = left
                    asyncio.get_running_loop().call_later(5.0, transport.close)
                self._fail(413, f"Request body of {length} bytes exceeds the limit of "
                                f"{self.state.max_body_bytes} bytes")
                if self._discard:
                    self.transport = transport
                return
            start = end + 4
            if chunked:
                parsed = self._dechunk(buf, start)
                if parsed is None:
                    if expect and len(buf) == start:
                        self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                    return
                if parsed is False:
                    return
                body, consumed = parsed
            else:
                if len(buf) < start + length:
                    if expect and len(buf) == start:
                        self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                    return
                body = buf[start:start + length]
                consumed = start + length
            self.buf = buf[consumed:]
            self.busy = True
            self.keep_alive = keep_alive
            self.started = time.monotonic()
            self.seq += 1
            if self.state.closing:
                self.respond(503, error_body("Server is shutting down"), close=True)
                return
            try:
                self.state.handler(self, method, target, body)
            except Exception as e:  # noqa: BLE001 - never drop a connection silently
                self.respond(500, error_body(f"Internal error: {e}"))

    def _dechunk(self, buf: bytes, pos: int):
        """(body, end) when complete, None when more data is needed, False on error."""
        parts: list[bytes] = []
        total = 0
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                return None
            try:
                size = int(buf[pos:eol].split(b";")[0], 16)
            except ValueError:
                self._fail(400, "Malformed chunked body")
                return False
            total += size
            if total > self.state.max_body_bytes:
                self._fail(413, f"Request body exceeds the limit of "
                                f"{self.state.max_body_bytes} bytes")
                return False
            if size == 0:
                trailer_end = buf.find(b"\r\n", eol + 2)
                if trailer_end < 0:
                    return None
                # no trailers supported beyond an empty line
                return b"".join(parts), trailer_end + 2
            if len(buf) < eol + 2 + size + 2:
                return None
            parts.append(buf[eol + 2:eol + 2 + size])
            pos = eol + 2 + size + 2

    def respond(self, status: int, body: bytes, content_type: bytes = b"application/json",
                close: bool = False, seq: int | None = None) -> None:
        """Writes one response; `seq` guards against answering a timed-out request twice."""
        if self.transport is None or not self.busy or (seq is not None and seq != self.seq):
            return
        keep = self.keep_alive and not close and not self.state.closing
        prefix = _HEAD_CACHE.get((status, content_type))
        if prefix is None:
            prefix = _HEAD_CACHE[(status, content_type)] = (
                b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: "
                % (status, _REASONS.get(status, "Unknown").encode(), content_type))
        self.transport.write(b"%s%d\r\n%s\r\n%s" % (
            prefix, len(body), b"" if keep else b"Connection: close\r\n", body))
        self.busy = False
        self.task = None
        if not keep:
            if not self._discard:
                self.transport.close()
            self.transport = None
            self.state.connections.discard(self)
        elif self.buf:
            asyncio.get_running_loop().call_soon(self._process)
