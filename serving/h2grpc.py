"""A gRPC server for unary methods, on asyncio: HTTP/2 framing in Python, on the REST loop.

Why not grpcio's server: under load its per-call cost is the server's limit. A grpc.aio
server whose handler returns a constant answers fewer calls per second here than
`baton serve` answers REST predictions (docs/benchmarks-serving.md): every call crosses
from grpc's polling thread to the event loop and back several times. Every method of TF
Serving's API is unary, so this server implements exactly that: one request message,
one response message, per stream, on an `asyncio.Protocol`, with the same servicers.

It takes grpcio's handler objects (`add_generic_rpc_handlers`, what the generated
`add_*Servicer_to_server` functions call), so the official servicer classes and stubs
are used unchanged; handlers are coroutines (as for grpc.aio) or plain functions and get
a `ServicerContext` with grpc.aio's methods (`abort`, `set_code`, `set_details`,
`invocation_metadata`, `time_remaining`, `peer`, ...).

Implemented from RFC 9113 and gRPC's PROTOCOL-HTTP2.md: the connection preface and
SETTINGS exchange, flow control both ways (WINDOW_UPDATE; sends wait for window),
PING, RST_STREAM (the handler is cancelled), GOAWAY (graceful stop: calls in flight
finish, new streams are refused and clients retry elsewhere, UNAVAILABLE), HEADERS and
CONTINUATION with HPACK (h2frames.py), `grpc-timeout` (DEADLINE_EXCEEDED), `grpc-encoding`
gzip/deflate requests, message size limits (RESOURCE_EXHAUSTED), trailers-only error
responses with percent-encoded `grpc-message`. Streaming methods answer UNIMPLEMENTED.
Not implemented: TLS, server push, priorities (ignored, as grpc core does).

Limits against clients that hold resources: a connection whose preface (the magic and a
first SETTINGS frame) is not complete within `handshake_timeout` (10 s) is closed; a
message whose 5-byte length prefix declares more than the receive limit is refused
RESOURCE_EXHAUSTED as soon as the prefix arrives (the stream is then reset with NO_ERROR,
so the client stops sending the rest); SETTINGS_MAX_CONCURRENT_STREAMS (1000 by default,
or grpc.max_concurrent_streams) is advertised, and a stream opened beyond it is reset
with REFUSED_STREAM (clients retry it). `channel_options` maps the grpc channel
arguments that set these (grpc.max_concurrent_streams, grpc.max_receive_message_length,
grpc.max_send_message_length) as grpc core reads them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import time
import urllib.parse
import zlib
from typing import Any

import grpc

from baton.serving import h2frames as h2

log = logging.getLogger(__name__)

_OK_HEADERS = h2.encode_headers([(b":status", b"200"), (b"content-type", b"application/grpc"),
                                 (b"grpc-accept-encoding", b"identity,deflate,gzip")])
_OK_TRAILERS = h2.encode_headers([(b"grpc-status", b"0")])
_RESERVED = frozenset({b"content-type", b"te", b"grpc-timeout", b"grpc-encoding",
                       b"grpc-accept-encoding", b"user-agent", b"content-length"})
_TIMEOUT_UNIT = {b"H": 3600.0, b"M": 60.0, b"S": 1.0, b"m": 1e-3, b"u": 1e-6, b"n": 1e-9}
_UNITS = (3600.0, 60.0, 1.0, 1e-3, 1e-6, 1e-9)
OUR_SETTINGS = {h2.MAX_FRAME_SIZE: 1 << 20, h2.INITIAL_WINDOW_SIZE: 1 << 20,
                h2.MAX_HEADER_LIST_SIZE: 16384 * 4, h2.ENABLE_PUSH: 0}
CONN_WINDOW = 16 << 20  # the connection receive window we keep open
# Streams open at once per connection (grpc core's server sets no limit by default).
DEFAULT_MAX_CONCURRENT_STREAMS = 1000
HANDSHAKE_TIMEOUT = 10.0  # seconds for a new connection to send its preface and SETTINGS
UNLIMITED_MESSAGE = 2**32 - 1  # a length prefix cannot declare more
_Status = grpc.StatusCode


class _Details:
    """grpc.HandlerCallDetails for handler lookup."""

    __slots__ = ("method", "invocation_metadata")

    def __init__(self, method: str, metadata: tuple):
        self.method = method
        self.invocation_metadata = metadata


class ServicerContext:
    """The per-call context handlers get: grpc.aio.ServicerContext's common methods."""

    def __init__(self, stream: _Stream):
        self._stream = stream
        self._code: grpc.StatusCode | None = None
        self._details = ""
        self._trailing: tuple = ()

    async def abort(self, code: grpc.StatusCode, details: str = "",
                    trailing_metadata: tuple = ()) -> None:
        if code == grpc.StatusCode.OK:
            code = grpc.StatusCode.UNKNOWN  # as grpc: abort with OK is an error
        self._code, self._details = code, details
        self._trailing = tuple(trailing_metadata)
        raise grpc.aio.AbortError()

    def set_code(self, code: grpc.StatusCode) -> None:
        self._code = code

    def set_details(self, details: str) -> None:
        self._details = details

    def code(self):
        return self._code

    def details(self) -> str:
        return self._details

    def set_trailing_metadata(self, metadata) -> None:
        self._trailing = tuple(metadata)

    async def send_initial_metadata(self, metadata) -> None:  # sent with the response
        pass

    def invocation_metadata(self) -> tuple:
        return self._stream.metadata()

    def peer(self) -> str:
        return self._stream.conn.peer

    def time_remaining(self) -> float | None:
        d = self._stream.deadline
        return None if d is None else max(0.0, d - time.monotonic())

    def cancelled(self) -> bool:
        return self._stream.cancelled

    def done(self) -> bool:
        return self._stream.closed

    def is_active(self) -> bool:
        return not self._stream.closed


class _Stream:
    __slots__ = ("conn", "sid", "headers", "body", "send_window", "recv_unacked",
                 "deadline", "timer", "task", "closed", "cancelled", "pending")

    def __init__(self, conn: GrpcProtocol, sid: int, headers, send_window: int):
        self.conn = conn
        self.sid = sid
        self.headers = headers
        self.body = bytearray()
        self.send_window = send_window
        self.recv_unacked = 0
        self.deadline: float | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.task: asyncio.Future | None = None
        self.closed = False  # answered, reset or abandoned
        self.cancelled = False
        self.pending: bytes | None = None  # DATA payload and trailers waiting for window

    def metadata(self) -> tuple:
        out = []
        for k, v in self.headers:
            if k[:1] == b":" or k in _RESERVED:
                continue
            key = k.decode("latin-1")
            out.append((key, v if key.endswith("-bin") else v.decode("latin-1")))
        return tuple(out)


# the grpc channel arguments the native server applies -> GrpcServer's keyword
_CHANNEL_ARGUMENTS = {"grpc.max_receive_message_length": "max_receive_message_length",
                      "grpc.max_send_message_length": "max_send_message_length",
                      "grpc.max_concurrent_streams": "max_concurrent_streams"}


def channel_options(args, max_receive: int, max_send: int
                    ) -> tuple[dict[str, Any], list[str]]:
    """GrpcServer's keyword arguments from --grpc_channel_arguments, and what it ignores.

    As grpc core reads them: grpc.max_receive_message_length and
    grpc.max_send_message_length in bytes, negative for no limit;
    grpc.max_concurrent_streams per connection, negative for no limit (not advertised).
    A non-integer value is ignored (grpc core logs it and keeps its default). Any other
    argument tunes grpc core machinery this server does not have: returned as ignored.
    """
    opts: dict[str, Any] = {"max_receive_message_length": max_receive,
                            "max_send_message_length": max_send}
    ignored: list[str] = []
    for key, value in args:
        name = _CHANNEL_ARGUMENTS.get(key)
        if name is None or not isinstance(value, int):
            ignored.append(f"{key}={value}")
            continue
        if value < 0:
            opts[name] = None if name == "max_concurrent_streams" else UNLIMITED_MESSAGE
        else:
            opts[name] = value
    return opts, ignored


def _timeout(value: bytes) -> float:
    unit = _TIMEOUT_UNIT.get(value[-1:])
    if unit is None or not value[:-1].isdigit() or len(value) > 9:
        raise ValueError(value)
    return int(value[:-1]) * unit


def _trailers(code: int, message: str, trailing: tuple = ()) -> list[tuple[bytes, bytes]]:
    fields = [(b"grpc-status", str(code).encode())]
    if message:
        fields.append((b"grpc-message",
                       urllib.parse.quote(message, safe=" !\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~")
                       .encode()))
    for k, v in trailing:
        fields.append((k.encode("latin-1"), v if isinstance(v, bytes) else v.encode()))
    return fields


class GrpcProtocol(asyncio.Protocol):
    """One HTTP/2 connection."""

    def __init__(self, server: GrpcServer):
        self.server = server
        self.loop = server.loop
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.preface = False
        self.decoder = h2.Decoder()
        self.streams: dict[int, _Stream] = {}
        self.last_sid = 0
        self.send_window = h2.DEFAULT_WINDOW
        self.peer_initial_window = h2.DEFAULT_WINDOW
        self.peer_frame_size = h2.DEFAULT_FRAME_SIZE
        self.recv_unacked = 0
        self.headers_sid = 0  # a HEADERS block waiting for CONTINUATION
        self.headers_buf = b""
        self.headers_flags = 0
        self.goaway_sent = False
        self.peer = ""
        self.waiting: list[_Stream] = []  # streams with data blocked on the window
        self.handshake_timer: asyncio.TimerHandle | None = None  # until the first SETTINGS

    # -- connection ------------------------------------------------------------------
    def connection_made(self, transport):
        self.transport = transport
        self.server.connections.add(self)
        name = transport.get_extra_info("peername")
        if isinstance(name, tuple):
            host = name[0]
            self.peer = (f"ipv6:[{host}]:{name[1]}" if ":" in host
                         else f"ipv4:{host}:{name[1]}")
        else:
            self.peer = f"unix:{name or self.server.unix_path}"
        transport.write(h2.settings_frame(self.server.settings)
                        + h2.window_update(0, CONN_WINDOW - h2.DEFAULT_WINDOW))
        if self.server.handshake_timeout:
            self.handshake_timer = self.loop.call_later(self.server.handshake_timeout,
                                                        self._handshake_expired)
        if self.server.closing:
            self.goaway()

    def _handshake_expired(self) -> None:
        """No complete client preface in time: a connection that only holds a slot."""
        self.handshake_timer = None
        if self.transport is None:
            return
        if self.preface:  # an HTTP/2 peer that never sent SETTINGS: tell it why
            self._fail(h2.PROTOCOL_ERROR, "handshake timed out: no SETTINGS")
        else:  # not (yet) HTTP/2: a GOAWAY would mean nothing to it
            log.debug("HTTP/2 connection closed: no preface within %ss",
                      self.server.handshake_timeout)
            self.transport.close()
            self.buf = b""

    def connection_lost(self, exc):
        if self.handshake_timer is not None:
            self.handshake_timer.cancel()
            self.handshake_timer = None
        self.server.connections.discard(self)
        for s in list(self.streams.values()):
            self._abandon(s)
        self.streams.clear()
        self.transport = None

    def pause_writing(self):
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self):
        if self.transport is not None:
            self.transport.resume_reading()

    def _fail(self, code: int, why: str) -> None:
        log.debug("HTTP/2 connection error %d: %s", code, why)
        if self.transport is not None:
            self.transport.write(h2.goaway(self.last_sid, code, why.encode()[:200]))
            self.transport.close()
        self.buf = b""

    def goaway(self) -> None:
        """Graceful: the streams opened so far finish, new ones are refused."""
        if not self.goaway_sent and self.transport is not None:
            self.goaway_sent = True
            self.transport.write(h2.goaway(self.last_sid, h2.NO_ERROR))
            if not self.streams:
                self.transport.close()

    # -- frames in -------------------------------------------------------------------
    def data_received(self, data: bytes):
        buf = self.buf + data if self.buf else data
        if not self.preface:
            if len(buf) < 24:
                if not h2.PREFACE.startswith(buf):
                    return self._fail(h2.PROTOCOL_ERROR, "not HTTP/2")
                self.buf = buf
                return None
            if buf[:24] != h2.PREFACE:
                return self._fail(h2.PROTOCOL_ERROR, "not HTTP/2")
            self.preface = True
            buf = buf[24:]
        pos, n = 0, len(buf)
        limit = OUR_SETTINGS[h2.MAX_FRAME_SIZE]
        while n - pos >= 9:
            length = (buf[pos] << 16) | (buf[pos + 1] << 8) | buf[pos + 2]
            if length > limit:
                return self._fail(h2.FRAME_SIZE_ERROR, f"frame of {length} bytes")
            end = pos + 9 + length
            if end > n:
                break
            ftype, flags = buf[pos + 3], buf[pos + 4]
            sid = int.from_bytes(buf[pos + 5:pos + 9], "big") & 0x7FFFFFFF
            payload = buf[pos + 9:end]
            pos = end
            if self.headers_sid and ftype != h2.CONTINUATION:
                return self._fail(h2.PROTOCOL_ERROR, "expected CONTINUATION")
            try:
                self._frame(ftype, flags, sid, payload)
            except _ConnectionError as e:
                return self._fail(e.code, str(e))
            if self.transport is None or self.transport.is_closing():
                self.buf = b""
                return None
        self.buf = buf[pos:] if pos < n else b""
        return None

    def _frame(self, ftype: int, flags: int, sid: int, payload: bytes) -> None:
        if ftype == h2.DATA:
            self._data(flags, sid, payload)
        elif ftype == h2.HEADERS:
            if not sid:
                raise _ConnectionError(h2.PROTOCOL_ERROR, "HEADERS on stream 0")
            if flags & h2.PADDED:
                pad = payload[0]
                payload = payload[1:len(payload) - pad]
            if flags & h2.PRIORITY_FLAG:
                payload = payload[5:]
            if flags & h2.END_HEADERS:
                self._headers(sid, flags, payload)
            else:
                self.headers_sid, self.headers_buf, self.headers_flags = sid, payload, flags
        elif ftype == h2.CONTINUATION:
            if sid != self.headers_sid or not sid:
                raise _ConnectionError(h2.PROTOCOL_ERROR, "unexpected CONTINUATION")
            self.headers_buf += payload
            if len(self.headers_buf) > 1 << 20:
                raise _ConnectionError(h2.ENHANCE_YOUR_CALM, "header block too large")
            if flags & h2.END_HEADERS:
                block, self.headers_buf, self.headers_sid = self.headers_buf, b"", 0
                self._headers(sid, self.headers_flags, block)
        elif ftype == h2.SETTINGS:
            if sid:
                raise _ConnectionError(h2.PROTOCOL_ERROR, "SETTINGS on a stream")
            if not flags & h2.ACK:
                self._settings(payload)
                if self.handshake_timer is not None:  # the client's preface is complete
                    self.handshake_timer.cancel()
                    self.handshake_timer = None
        elif ftype == h2.WINDOW_UPDATE:
            if len(payload) != 4:
                raise _ConnectionError(h2.FRAME_SIZE_ERROR, "WINDOW_UPDATE size")
            inc = int.from_bytes(payload, "big") & 0x7FFFFFFF
            if sid == 0:
                self.send_window += inc
                if self.send_window > h2.MAX_WINDOW:
                    raise _ConnectionError(h2.FLOW_CONTROL_ERROR, "window overflow")
            else:
                s = self.streams.get(sid)
                if s is not None:
                    s.send_window += inc
            if self.waiting:
                self._flush_waiting()
        elif ftype == h2.PING:
            if len(payload) != 8:
                raise _ConnectionError(h2.FRAME_SIZE_ERROR, "PING size")
            if not flags & h2.ACK and self.transport is not None:
                self.transport.write(h2.frame(h2.PING, h2.ACK, 0, payload))
        elif ftype == h2.RST_STREAM:
            s = self.streams.pop(sid, None)
            if s is not None:
                s.cancelled = True
                self._abandon(s)
                self._maybe_close()
        elif ftype == h2.GOAWAY:
            self.goaway()
        elif ftype == h2.PUSH_PROMISE:
            raise _ConnectionError(h2.PROTOCOL_ERROR, "PUSH_PROMISE from a client")
        # PRIORITY and unknown frame types are ignored (RFC 9113 5.5)

    def _settings(self, payload: bytes) -> None:
        if len(payload) % 6:
            raise _ConnectionError(h2.FRAME_SIZE_ERROR, "SETTINGS size")
        for i in range(0, len(payload), 6):
            key, value = struct.unpack_from(">HI", payload, i)
            if key == h2.INITIAL_WINDOW_SIZE:
                if value > h2.MAX_WINDOW:
                    raise _ConnectionError(h2.FLOW_CONTROL_ERROR, "initial window")
                delta = value - self.peer_initial_window
                self.peer_initial_window = value
                for s in self.streams.values():
                    s.send_window += delta
            elif key == h2.MAX_FRAME_SIZE:
                if not 16384 <= value <= 16777215:
                    raise _ConnectionError(h2.PROTOCOL_ERROR, "max frame size")
                self.peer_frame_size = value
        assert self.transport is not None
        self.transport.write(h2.frame(h2.SETTINGS, h2.ACK, 0))
        if self.waiting:
            self._flush_waiting()

    def _headers(self, sid: int, flags: int, block: bytes) -> None:
        try:
            headers = self.decoder.decode(block)
        except h2.CompressionError as e:
            raise _ConnectionError(h2.COMPRESSION_ERROR, str(e)) from None
        s = self.streams.get(sid)
        if s is not None:  # trailers from the client: the request's end
            if flags & h2.END_STREAM:
                self._dispatch(s)
            return
        if sid <= self.last_sid or not sid & 1:
            raise _ConnectionError(h2.PROTOCOL_ERROR, f"stream id {sid}")
        self.last_sid = sid
        limit = self.server.max_concurrent_streams
        if self.goaway_sent or (limit is not None and len(self.streams) >= limit):
            # RFC 9113 5.1.2: beyond the advertised limit, REFUSED_STREAM (retryable)
            assert self.transport is not None
            self.transport.write(h2.rst_stream(sid, h2.REFUSED_STREAM))
            return
        s = _Stream(self, sid, headers, self.peer_initial_window)
        self.streams[sid] = s
        if flags & h2.END_STREAM:
            self._dispatch(s)

    def _data(self, flags: int, sid: int, payload: bytes) -> None:
        n = len(payload)
        self.recv_unacked += n
        if flags & h2.PADDED:
            payload = payload[1:len(payload) - payload[0]]
        s = self.streams.get(sid)
        out = b""
        if self.recv_unacked >= CONN_WINDOW // 2:
            out = h2.window_update(0, self.recv_unacked)
            self.recv_unacked = 0
        if s is not None and s.task is None:
            had = len(s.body)
            s.body += payload
            size = len(s.body) - 5
            if had < 5 <= len(s.body):  # the length prefix is in: refuse before the data
                size = max(size, int.from_bytes(s.body[1:5], "big"))
            if size > self.server.max_receive:
                self._answer(s, _Status.RESOURCE_EXHAUSTED.value[0],
                             f"Received message larger than max ({size} vs. "
                             f"{self.server.max_receive})")
                if not flags & h2.END_STREAM:  # the rest is not wanted (RFC 9113 8.1)
                    out += h2.rst_stream(sid, h2.NO_ERROR)
            elif flags & h2.END_STREAM:
                self._dispatch(s)
            else:
                s.recv_unacked += n
                if s.recv_unacked >= OUR_SETTINGS[h2.INITIAL_WINDOW_SIZE] // 2:
                    out += h2.window_update(sid, s.recv_unacked)
                    s.recv_unacked = 0
        elif sid == 0:
            raise _ConnectionError(h2.PROTOCOL_ERROR, "DATA on stream 0")
        if out and self.transport is not None:
            self.transport.write(out)

    # -- calls -----------------------------------------------------------------------
    def _dispatch(self, s: _Stream) -> None:
        path = method = ctype = b""
        encoding = b"identity"
        timeout = None
        for k, v in s.headers:
            if k == b":path":
                path = v
            elif k == b":method":
                method = v
            elif k == b"content-type":
                ctype = v
            elif k == b"grpc-timeout":
                timeout = v
            elif k == b"grpc-encoding":
                encoding = v
        if method != b"POST" or not ctype.startswith(b"application/grpc"):
            status = b"405" if method != b"POST" else b"415"
            self._write_close(s, h2.encode_headers([(b":status", status)]), b"", b"")
            return
        if timeout is not None:
            try:
                s.deadline = time.monotonic() + _timeout(timeout)
            except ValueError:
                self._answer(s, _Status.INTERNAL.value[0], f"bad grpc-timeout {timeout!r}")
                return
        handler = self.server.handler(path, s)
        if handler is None:
            self._answer(s, _Status.UNIMPLEMENTED.value[0], "Method not found!")
            return
        if handler.request_streaming or handler.response_streaming:
            self._answer(s, _Status.UNIMPLEMENTED.value[0],
                         "streaming methods are not served by this server")
            return
        body = s.body
        if len(body) < 5 or int.from_bytes(body[1:5], "big") != len(body) - 5:
            self._answer(s, _Status.INTERNAL.value[0],
                         "a unary call carries exactly one length-prefixed message")
            return
        msg = bytes(body[5:])
        if body[0]:
            if encoding == b"gzip":
                wbits = 16 + zlib.MAX_WBITS
            elif encoding == b"deflate":
                wbits = zlib.MAX_WBITS
            else:
                self._answer(s, _Status.UNIMPLEMENTED.value[0],
                             f"Compression algorithm {encoding.decode('latin-1')!r} "
                             "is not supported")
                return
            try:
                d = zlib.decompressobj(wbits)
                msg = d.decompress(msg, self.server.max_receive + 1)
            except zlib.error as e:
                self._answer(s, _Status.INTERNAL.value[0], f"cannot decompress: {e}")
                return
            if len(msg) > self.server.max_receive:
                self._answer(s, _Status.RESOURCE_EXHAUSTED.value[0],
                             "Received message larger than max")
                return
        try:
            request = handler.request_deserializer(msg) if handler.request_deserializer \
                else msg
        except Exception as e:  # noqa: BLE001 - a message that does not parse
            self._answer(s, _Status.INTERNAL.value[0], f"Failed to parse request: {e}")
            return
        s.body = bytearray()
        ctx = ServicerContext(s)
        self.server.in_flight += 1
        s.task = task = self.loop.create_task(self._call(s, handler, request, ctx))
        if s.deadline is not None:
            s.timer = self.loop.call_at(self.loop.time() + (s.deadline - time.monotonic()),
                                        self._expire, s)
        del task

    async def _call(self, s: _Stream, handler, request, ctx: ServicerContext) -> None:
        try:
            result = handler.unary_unary(request, ctx)
            if asyncio.iscoroutine(result):
                result = await result
        except grpc.aio.AbortError:
            code = ctx._code or _Status.UNKNOWN
            self._answer(s, code.value[0], ctx._details, ctx._trailing)
            return
        except asyncio.CancelledError:
            return
        except Exception as e:  # noqa: BLE001 - UNKNOWN, as grpc reports a raising handler
            log.exception("gRPC handler %s failed", handler)
            self._answer(s, _Status.UNKNOWN.value[0], f"Unexpected {type(e).__name__}: {e}")
            return
        finally:
            self.server.in_flight -= 1
            self.server.idle_check()
        code = ctx._code
        if code is not None and code != _Status.OK:
            self._answer(s, code.value[0], ctx._details, ctx._trailing)
            return
        try:
            out = handler.response_serializer(result) if handler.response_serializer \
                else result
        except Exception as e:  # noqa: BLE001
            self._answer(s, _Status.INTERNAL.value[0], f"Failed to serialize response: {e}")
            return
        self.respond(s, out, ctx._trailing)

    def _expire(self, s: _Stream) -> None:
        s.timer = None
        if not s.closed:
            self._answer(s, _Status.DEADLINE_EXCEEDED.value[0], "Deadline Exceeded")
        s.cancelled = True
        if s.task is not None and not s.task.done():
            s.task.cancel()  # as grpc: a handler past its deadline is cancelled

    def respond(self, s: _Stream, message: bytes, trailing: tuple = ()) -> None:
        """The response message and OK trailers (one write when the windows allow)."""
        if s.closed:
            return
        n = len(message)
        if n > self.server.max_send:
            self._answer(s, _Status.RESOURCE_EXHAUSTED.value[0],
                         f"Sent message larger than max ({n} vs. {self.server.max_send})")
            return
        data = b"\x00" + n.to_bytes(4, "big") + message
        trailers = (_OK_TRAILERS if not trailing
                    else h2.encode_headers(_trailers(0, "", trailing)))
        if len(data) <= min(s.send_window, self.send_window, self.peer_frame_size):
            self.send_window -= len(data)
            self._write_close(s, _OK_HEADERS, data, trailers)
            return
        # large: the headers now, the data as the windows open, then the trailers
        assert self.transport is not None
        self.transport.write(h2.frame(h2.HEADERS, h2.END_HEADERS, s.sid, _OK_HEADERS))
        s.pending = data
        s.body = bytearray(trailers)  # reused: the trailers to send after the data
        self.waiting.append(s)
        self._flush_waiting()

    def _flush_waiting(self) -> None:
        if self.transport is None:
            return
        still = []
        for s in self.waiting:
            if s.closed or s.pending is None:
                continue
            data = s.pending
            while data and self.send_window > 0 and s.send_window > 0:
                k = min(len(data), self.send_window, s.send_window, self.peer_frame_size)
                self.transport.write(h2.frame(h2.DATA, 0, s.sid, data[:k]))
                data = data[k:]
                self.send_window -= k
                s.send_window -= k
            if data:
                s.pending = data
                still.append(s)
            else:
                s.pending = None
                self._write_close(s, b"", b"", bytes(s.body))
        self.waiting = still

    def _answer(self, s: _Stream, code: int, message: str, trailing: tuple = ()) -> None:
        """A trailers-only response (an error), or error trailers after sent headers."""
        if s.closed:
            return
        fields = _trailers(code, message, trailing)
        if s.pending is not None:  # headers already sent
            s.pending = None
            self._write_close(s, b"", b"", h2.encode_headers(fields))
            return
        block = h2.encode_headers([(b":status", b"200"),
                                   (b"content-type", b"application/grpc")] + fields)
        self._write_close(s, block, b"", b"")

    def _write_close(self, s: _Stream, headers: bytes, data: bytes, trailers: bytes) -> None:
        """Writes what is given and ends the stream (END_STREAM on the last frame)."""
        s.closed = True
        if s.timer is not None:
            s.timer.cancel()
            s.timer = None
        self.streams.pop(s.sid, None)
        if self.transport is None:
            return
        sid = s.sid
        if trailers:
            out = (h2.frame(h2.HEADERS, h2.END_HEADERS, sid, headers) if headers else b"")
            if data:
                out += h2.frame(h2.DATA, 0, sid, data)
            out += h2.frame(h2.HEADERS, h2.END_HEADERS | h2.END_STREAM, sid, trailers)
        else:  # trailers-only, or a non-gRPC answer
            out = h2.frame(h2.HEADERS, h2.END_HEADERS | h2.END_STREAM, sid, headers)
        self.transport.write(out)
        self._maybe_close()

    def _abandon(self, s: _Stream) -> None:
        s.closed = True
        if s.timer is not None:
            s.timer.cancel()
            s.timer = None
        if s.task is not None and not s.task.done():
            s.task.cancel()

    def _maybe_close(self) -> None:
        if self.goaway_sent and not self.streams and self.transport is not None:
            self.transport.close()


class _ConnectionError(Exception):  # noqa: N818 - an HTTP/2 connection error (GOAWAY)
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


class GrpcServer:
    """grpc.aio.Server's surface that `baton serve` uses, for unary methods."""

    def __init__(self, max_receive_message_length: int = 4 * 1024 * 1024,
                 max_send_message_length: int = 2**31 - 1,
                 max_concurrent_streams: int | None = DEFAULT_MAX_CONCURRENT_STREAMS,
                 handshake_timeout: float = HANDSHAKE_TIMEOUT):
        """`max_concurrent_streams` None: no limit (and none advertised);
        `handshake_timeout` 0: none."""
        self.max_receive = max_receive_message_length
        self.max_send = max_send_message_length
        self.max_concurrent_streams = max_concurrent_streams
        self.handshake_timeout = handshake_timeout
        self.settings = dict(OUR_SETTINGS)
        if max_concurrent_streams is not None:
            self.settings[h2.MAX_CONCURRENT_STREAMS] = max_concurrent_streams
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self._generic: list = []
        self._methods: dict[bytes, object] = {}
        self._binds: list[tuple[str, int | str]] = []
        self._servers: list[asyncio.AbstractServer] = []
        self.connections: set[GrpcProtocol] = set()
        self.closing = False
        self.in_flight = 0
        self._idle: asyncio.Event | None = None
        self.unix_path = ""

    # -- registration (grpc.Server's names) ---------------------------------------
    def add_generic_rpc_handlers(self, handlers) -> None:
        self._generic.extend(handlers)
        self._methods.clear()

    def add_registered_method_handlers(self, service_name: str, method_handlers) -> None:
        for name, h in method_handlers.items():
            self._methods[f"/{service_name}/{name}".encode()] = h

    def handler(self, path: bytes, s: _Stream):
        h = self._methods.get(path)
        if h is None:
            details = _Details(path.decode("latin-1"), s.metadata())
            for g in self._generic:
                h = g.service(details)
                if h is not None:
                    if len(self._methods) < 1024:
                        self._methods[path] = h
                    break
        return h

    # -- lifecycle ---------------------------------------------------------------------
    async def bind_tcp(self, host: str, port: int) -> int:
        self.loop = asyncio.get_running_loop()
        srv = await self.loop.create_server(lambda: GrpcProtocol(self), host, port,
                                            backlog=2048, reuse_address=True)
        self._servers.append(srv)
        return srv.sockets[0].getsockname()[1]

    async def bind_unix(self, path: str) -> None:
        self.loop = asyncio.get_running_loop()
        self.unix_path = path
        srv = await self.loop.create_unix_server(lambda: GrpcProtocol(self), path,
                                                 backlog=2048)
        self._servers.append(srv)

    def idle_check(self) -> None:
        if self._idle is not None and self.in_flight == 0:
            self._idle.set()

    async def stop(self, grace: float | None) -> None:
        """As grpc.aio's: refuse new calls, let calls in flight finish for `grace` s."""
        self.closing = True
        for srv in self._servers:
            srv.close()
        for c in list(self.connections):
            c.goaway()
        if self.in_flight and grace:
            self._idle = asyncio.Event()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._idle.wait(), grace)
        for c in list(self.connections):
            for s in list(c.streams.values()):
                if not s.closed:
                    c._answer(s, _Status.CANCELLED.value[0], "server shutting down")
                c._abandon(s)
            if c.transport is not None:
                c.transport.close()
        for srv in self._servers:
            with contextlib.suppress(Exception):
                await srv.wait_closed()
