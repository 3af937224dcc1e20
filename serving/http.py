"""HTTP/1.1 on asyncio.Protocol with llhttp (httptools) parsing requests.

Keep-alive, pipelining and 100-continue. The REST hot path is parse -> route -> submit
to the batcher -> write, with no task or coroutine per request: handlers either answer
at once or call `respond` later from a batch completion. Only what TF Serving's REST API
needs is implemented: Content-Length and chunked bodies, a body size limit (413), a
header size limit (431) and per-request timeouts swept by one periodic timer instead of
a timer per request.

Requests are parsed by llhttp, Node.js's parser, through httptools (the binding uvicorn
uses), in its strict default mode. A request it refuses (a malformed request line, an
unknown method, an invalid HTTP version, bad header syntax, a bad chunk size, two
Content-Length headers, Content-Length with Transfer-Encoding, a Transfer-Encoding that
does not end in chunked, ...) is answered 400 and the connection is closed; so are the
few things llhttp accepts that RFC 9112 says a server must not (see on_headers_complete).
Pipelined requests are parsed as they arrive and answered in order, one in flight at a
time; reading pauses while MAX_PIPELINE of them are waiting.

The timeout is `--rest_api_timeout_in_ms`, which TF Serving applies to the model run: a
request whose run outlives it is answered 504 with DirectSession's DEADLINE_EXCEEDED
message. A request still waiting in a batching queue is left to the batcher, which fails
it with 429 RESOURCE_EXHAUSTED when it is taken too late (see batcher).

Connections are admitted by `serving.connections` (a cap shared with gRPC, idle eviction
at the cap). A connection with no request in progress is closed after `idle_timeout`
seconds (keep-alive's end: clients reconnect); a request whose head is not complete
`HEAD_TIMEOUT` seconds after its first byte, or whose body is not complete
`BODY_TIMEOUT` seconds after it, is answered 408 and the connection closed (slow
clients cannot hold a connection and its buffers for ever).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Callable

import httptools

from baton.serving.connections import (
    DRAIN_TIMEOUT,
    IDLE_TIMEOUT,
    ConnectionTable,
    close_when_drained,
    default_max_connections,
    reset,
    unsent_bytes,
)

_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
            404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout",
            409: "Conflict", 411: "Length Required", 413: "Payload Too Large",
            429: "Too Many Requests",
            431: "Request Header Fields Too Large", 499: "Client Closed Request",
            500: "Internal Server Error", 501: "Not Implemented",
            503: "Service Unavailable", 504: "Gateway Timeout"}
MAX_HEADER_BYTES = 64 * 1024
MAX_PIPELINE = 32  # parsed requests waiting behind the one in flight before reading pauses
HEAD_TIMEOUT = 10.0  # seconds from a request's first byte to the end of its head
BODY_TIMEOUT = 60.0  # seconds from a request's first byte to the end of its body
# (status, content type) -> response head up to the Content-Length value
_HEAD_CACHE: dict[tuple[int, bytes], bytes] = {}
_METHODS: dict[bytes, str] = {}  # llhttp's method names (a fixed set) as str
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


# What TF Serving's REST API answers (504) when the run exceeds --rest_api_timeout_in_ms.
TIMEOUT_MESSAGE = "Timed out waiting for notification"


def error_body(message: str) -> bytes:
    return json.dumps({"error": message}).encode()


def _refusal() -> bytes:
    body = error_body("Too many connections")
    return (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))


# What a connection refused at the connection cap reads before it is closed.
REFUSAL = _refusal()


class _Reject(Exception):  # noqa: N818 - raised in a parser callback: answer and close
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class HttpServerState:
    """Shared by all connections: handler, limits, in-flight tracking, shutdown flag."""

    def __init__(self, handler: Callable, max_body_bytes: int, timeout_s: float,
                 table: ConnectionTable | None = None, idle_timeout: float = IDLE_TIMEOUT):
        self.handler = handler  # handler(conn, method, target, body) -> None
        self.max_body_bytes = max_body_bytes
        self.timeout_s = timeout_s
        self.connections: set[HttpProtocol] = set()
        self.closing = False
        self.table = (table if table is not None
                      else ConnectionTable(default_max_connections()))
        self.idle_timeout = idle_timeout

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
    """One connection. The parser calls the on_* methods back from `feed_data`."""

    __slots__ = ("state", "transport", "parser", "busy", "keep_alive", "started", "seq",
                 "task", "queue", "idle_timeout", "loop",
                 "_dead", "_paused", "_write_paused", "_stall_timer", "_drain_left",
                 "_drain_transport",
                 "_url", "_body", "_parts", "_length", "_te", "_expect", "_keep",
                 "_in_body", "_head_bytes", "_head_size", "_body_bytes")

    def __init__(self, state: HttpServerState):
        self.state = state
        self.transport = None
        self.parser = httptools.HttpRequestParser(self)
        self.busy = False  # a request has been handed to the handler and not answered
        self.keep_alive = True
        self.started = 0.0
        self.seq = 0
        self.task = None  # the batching Task of the request in flight, if any
        # parsed requests behind the one in flight: (method, target, body, keep alive),
        # or (None, status, message, False) for a refused one, answered in its turn
        self.queue: deque[tuple] = deque()
        self.idle_timeout = state.idle_timeout  # for the ConnectionTable
        self.loop: asyncio.AbstractEventLoop | None = None
        self._dead = False  # refused or upgraded: nothing more is parsed
        self._paused = False
        self._write_paused = False  # the peer does not read: no request is answered
        self._stall_timer: asyncio.TimerHandle | None = None
        self._drain_left = 0  # body bytes still to swallow after a 413 before closing
        self._drain_transport = None
        # the message being parsed
        self._url = b""
        self._body = b""
        self._parts: list[bytes] | None = None  # body fragments after the first
        self._length = -1  # its Content-Length, -1 if none
        self._te: bytes | None = None  # its Transfer-Encoding
        self._expect = False  # Expect: 100-continue, 100 not sent yet
        self._keep = True
        self._in_body = False  # between headers complete and message complete
        # bytes received while reading a head (httptools buffers an unfinished header
        # value: this bounds it), and the head's url and header bytes (431 past the limit)
        self._head_bytes = 0
        self._head_size = 0
        self._body_bytes = 0

    def connection_made(self, transport):
        self.transport = transport
        self.state.connections.add(self)
        self.state.table.add(self)
        self.loop = asyncio.get_running_loop()

    def connection_lost(self, exc):
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None
        self.state.connections.discard(self)
        self.state.table.discard(self)
        self.busy = False
        self.transport = None
        self.task = None
        self.queue.clear()
        self._dead = True
        del self.parser  # it holds our bound callbacks: no cycle left for the collector

    def data_received(self, data: bytes):
        if self._dead:
            if self._drain_left > 0:
                self._drain_left -= len(data)
                if self._drain_left <= 0 and self._drain_transport is not None:
                    close_when_drained(self._drain_transport, self.loop, DRAIN_TIMEOUT)
            return
        if not self._in_body:
            self._head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as e:
            err = e.__context__
            if isinstance(err, _Reject):
                if err.status == 413 and 0 < self._length <= 4 * self.state.max_body_bytes:
                    # Swallow what the client is still sending (up to a bound, for at most
                    # a few seconds) so it reads the 413 instead of a broken pipe.
                    end = data.find(b"\r\n\r\n")
                    self._drain_left = self._length - (len(data) - end - 4 if end >= 0 else 0)
                self._refuse(err.status, err.message)
            else:
                self._refuse(400, f"Malformed HTTP request: {err or e}")
            return
        except httptools.HttpParserUpgrade:
            # Upgrade and CONNECT are not supported: the request itself was complete and is
            # answered as any other, with Connection: close (see on_headers_complete).
            self._dead = True
            return
        except httptools.HttpParserError as e:
            self._refuse(400, f"Malformed HTTP request: {e}")
            return
        if not self._in_body and self._head_bytes > MAX_HEADER_BYTES:
            self._refuse(431, "Request headers too large")
        elif self._expect:
            self._continue()

    # -- parser callbacks ------------------------------------------------------------
    def on_url(self, url: bytes):
        self._url += url

    def on_header(self, name: bytes, value: bytes):
        n = len(name)
        self._head_size += n + len(value)
        if n == 14:
            if name.lower() == b"content-length":
                if self._length >= 0:
                    # RFC 9112 6.3: differing Content-Length values are unrecoverable (a
                    # smuggling vector). llhttp refuses any second one already; this keeps
                    # it refused whatever llhttp's leniency settings.
                    raise _Reject(400, "Duplicate Content-Length header")
                self._length = int(value)
        elif n == 17:
            if name.lower() == b"transfer-encoding":
                self._te = value if self._te is None else self._te + b"," + value
        elif n == 6 and name.lower() == b"expect":
            self._expect = value.strip().lower() == b"100-continue"

    def on_headers_complete(self):
        p = self.parser
        version = p.get_http_version()
        if version != "1.1" and version != "1.0":
            # llhttp accepts HTTP/0.9 (no version), 2.0 and 3.0 request lines; only 1.x
            # framing is spoken here.
            raise _Reject(400, f"Unsupported HTTP version {version}")
        te = self._te
        if te is not None:
            if self._length >= 0:
                # RFC 9112 6.1: a server may reject a request with both (CL.TE smuggling);
                # llhttp refuses it already, this keeps it so regardless of leniencies.
                raise _Reject(400, "Content-Length together with Transfer-Encoding")
            if version == "1.0":
                # RFC 9112 6.1: Transfer-Encoding in HTTP/1.0 is faulty framing; llhttp
                # accepts it.
                raise _Reject(400, "Transfer-Encoding in an HTTP/1.0 request")
            if te.strip().lower() != b"chunked":
                if te.rsplit(b",", 1)[-1].strip().lower() != b"chunked":
                    # RFC 9112 6.3: chunked not last, the length cannot be determined:
                    # 400 and close (llhttp refuses it too, after on_headers_complete)
                    raise _Reject(400, "Transfer-Encoding must end in chunked")
                # llhttp accepts codings before chunked ("gzip, chunked"); only chunked
                # itself is implemented (RFC 9112 6.1: 501).
                raise _Reject(501, f"Transfer-Encoding {te.decode('latin-1')!r} "
                                   f"is not implemented")
        if self._head_size + len(self._url) > MAX_HEADER_BYTES:  # a whole head in one read
            raise _Reject(431, "Request headers too large")
        if te is None and self._length > self.state.max_body_bytes:
            raise _Reject(413, f"Request body of {self._length} bytes exceeds the limit of "
                               f"{self.state.max_body_bytes} bytes")
        # Upgrade/CONNECT are not supported: answered, then the connection closes.
        self._keep = p.should_keep_alive() and not p.should_upgrade()
        self._in_body = True
        self._head_bytes = self._head_size = 0

    def on_body(self, body: bytes):
        n = self._body_bytes = self._body_bytes + len(body)
        if n > self.state.max_body_bytes:  # chunked (Content-Length was checked)
            raise _Reject(413, f"Request body exceeds the limit of "
                               f"{self.state.max_body_bytes} bytes")
        if not self._body:
            self._body = body
        elif self._parts is None:
            self._parts = [self._body, body]
        else:
            self._parts.append(body)

    def on_message_complete(self):
        m = self.parser.get_method()
        method = _METHODS.get(m)
        if method is None:
            method = _METHODS[m] = m.decode("latin-1")
        target = self._url.decode("latin-1")
        body = self._body if self._parts is None else b"".join(self._parts)
        keep = self._keep
        self._url = self._body = b""
        self._parts = None
        self._length = -1
        self._te = None
        self._expect = self._in_body = False
        self._body_bytes = 0
        if self._dead:
            return
        if self.busy or self.queue or self._write_paused:
            self.queue.append((method, target, body, keep))
            if len(self.queue) >= MAX_PIPELINE:
                self._pause()
            return
        self._dispatch(method, target, body, keep)

    # -- requests --------------------------------------------------------------------
    def _dispatch(self, method: str, target: str, body: bytes, keep: bool) -> None:
        self.busy = True
        self.keep_alive = keep
        self.started = time.monotonic()
        self.seq += 1
        if self.state.closing:
            self.respond(503, error_body("Server is shutting down"), close=True)
            return
        try:
            self.state.handler(self, method, target, body)
        except Exception as e:  # noqa: BLE001 - never drop a connection silently
            self.respond(500, error_body(f"Internal error: {e}"))

    def _refuse(self, status: int, message: str) -> None:
        """Answers `status` and closes, after the requests parsed before this one."""
        self._dead = True
        if self.transport is None:
            return
        if self.busy or self.queue:
            self._drain_left = 0
            self.queue.append((None, status, message, False))
            self._pause()
            return
        self.busy = True
        self.respond(status, error_body(message), close=True)

    def _next(self) -> None:
        if self.busy or self.transport is None or not self.queue or self._write_paused:
            return
        item = self.queue.popleft()
        if not self.queue and self._paused and not self._dead:
            self._paused = False
            self.transport.resume_reading()
        if item[0] is None:
            self.busy = True
            self.respond(item[1], error_body(item[2]), close=True)
        else:
            self._dispatch(*item)

    def pause_writing(self) -> None:
        """The peer does not read what we send: the requests it pipelines wait (their
        queue pauses reading at MAX_PIPELINE) instead of their answers piling up in
        memory (was: a client pipelining requests and never reading grew the server by
        about 60 MiB a second). A peer that then takes none of its answers for
        DRAIN_TIMEOUT seconds is reset, as nginx's send_timeout does."""
        self._write_paused = True
        if self._stall_timer is None and self.transport is not None and self.loop:
            self._stall_timer = self.loop.call_later(DRAIN_TIMEOUT, self._stalled,
                                                     unsent_bytes(self.transport))

    def _stalled(self, before: int) -> None:
        self._stall_timer = None
        if not self._write_paused or self.transport is None or self.loop is None:
            return
        now = unsent_bytes(self.transport)
        if now >= before:
            self._dead = True
            reset(self.transport)
            return
        self._stall_timer = self.loop.call_later(DRAIN_TIMEOUT, self._stalled, now)

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None
        if self.queue and self.loop is not None:
            self.loop.call_soon(self._next)

    def _pause(self) -> None:
        if not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def _continue(self) -> None:
        """100 Continue once the request is the next to answer and no body has come."""
        if (self._in_body and not self._body_bytes and not self.busy and not self.queue
                and self.transport is not None):
            self._expect = False
            self.transport.write(_CONTINUE)

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
            transport, self.transport = self.transport, None
            self._dead = True
            self.queue.clear()
            self.state.connections.discard(self)
            self.state.table.discard(self)
            if self._drain_left > 0:
                self._drain_transport = transport
                self.loop.call_later(5.0, close_when_drained,  # type: ignore[union-attr]
                                     transport, self.loop, DRAIN_TIMEOUT)
            else:
                close_when_drained(transport, self.loop, DRAIN_TIMEOUT)
        elif self.queue:
            self.loop.call_soon(self._next)  # type: ignore[union-attr]
        elif self._expect:
            self._continue()

    # -- the ConnectionTable's hooks ---------------------------------------------------
    @property
    def progress(self) -> int:
        return self.seq

    def active(self) -> bool:
        """A request in progress, waiting, or arriving."""
        return bool(self.busy or self.queue or self._in_body or self._head_bytes)

    def receiving(self) -> bool:
        return bool(self._in_body or self._head_bytes) and not self._dead

    def close_idle(self) -> None:
        """Idle too long, or evicted at the connection cap: closed without a word (RFC
        9112 9.5: a client must expect a kept-alive connection to close)."""
        if self.transport is not None and not self.busy:
            self._dead = True
            close_when_drained(self.transport, self.loop, DRAIN_TIMEOUT)

    def check_receive(self, seconds: float) -> None:
        """408 for a request arriving too slowly (a head, or a whole request)."""
        if self._dead:
            return
        if seconds > BODY_TIMEOUT or (seconds > HEAD_TIMEOUT and not self._in_body):
            what = "request" if self._in_body else "request head"
            self._refuse(408, f"The {what} did not arrive within "
                              f"{BODY_TIMEOUT if self._in_body else HEAD_TIMEOUT:g} s")
