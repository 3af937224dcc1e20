"""gRPC over the HTTP/2 streams: unary calls, statuses, deadlines, message limits.

From gRPC's PROTOCOL-HTTP2.md: a request is HEADERS (`:method POST`, `content-type:
application/grpc...`) and one length-prefixed message; the response is HEADERS, one
length-prefixed message and trailers with `grpc-status`, or trailers only for an error,
with a percent-encoded `grpc-message`. `grpc-timeout` is the call's deadline
(DEADLINE_EXCEEDED, the handler cancelled); `grpc-encoding` gzip/deflate requests are
inflated (within the message limit). A message whose 5-byte prefix declares more than
the receive limit is refused RESOURCE_EXHAUSTED as soon as the prefix arrives.

Handlers are grpcio's (`grpc.unary_unary_rpc_method_handler`), coroutines as for
grpc.aio or plain functions, and get a `ServicerContext` with grpc.aio's methods. A
method may also have a callback handler (`add_callback_handlers`): called at once with
`(request, context, reply)`, it answers later through `reply(response)` or
`reply(None, code, details)`, without a task or a coroutine for the call; the hot
methods use it.
"""

from __future__ import annotations

import asyncio
import logging
import time
import urllib.parse
import zlib
from collections.abc import Callable
from typing import Any

import grpc

from baton.serving.http2 import frames as f
from baton.serving.http2.stream import Stream

log = logging.getLogger("baton.serving.http2")

_OK_HEADERS = f.encode_headers([(b":status", b"200"), (b"content-type", b"application/grpc"),
                                (b"grpc-accept-encoding", b"identity,deflate,gzip")])
_OK_TRAILERS = f.encode_headers([(b"grpc-status", b"0")])
_TIMEOUT_UNIT = {b"H": 3600.0, b"M": 60.0, b"S": 1.0, b"m": 1e-3, b"u": 1e-6, b"n": 1e-9}
_Status = grpc.StatusCode
_UNKNOWN = _Status.UNKNOWN.value[0]
_INTERNAL = _Status.INTERNAL.value[0]
_UNIMPLEMENTED = _Status.UNIMPLEMENTED.value[0]
_RESOURCE_EXHAUSTED = _Status.RESOURCE_EXHAUSTED.value[0]


class _Details:
    """grpc.HandlerCallDetails for handler lookup."""

    __slots__ = ("method", "invocation_metadata")

    def __init__(self, method: str, metadata: tuple):
        self.method = method
        self.invocation_metadata = metadata


class ServicerContext:
    """The per-call context handlers get: grpc.aio.ServicerContext's common methods."""

    def __init__(self, stream: Stream):
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
        return None

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


def parse_timeout(value: bytes) -> float:
    unit = _TIMEOUT_UNIT.get(value[-1:])
    if unit is None or not value[:-1].isdigit() or len(value) > 9:
        raise ValueError(value)
    return int(value[:-1]) * unit


def trailer_fields(code: int, message: str, trailing: tuple = ()) -> list[tuple[bytes, bytes]]:
    fields = [(b"grpc-status", str(code).encode())]
    if message:
        fields.append((b"grpc-message",
                       urllib.parse.quote(message, safe=" !\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~")
                       .encode()))
    for k, v in trailing:
        fields.append((k.encode("latin-1"), v if isinstance(v, bytes) else v.encode()))
    return fields


class Calls:
    """The gRPC half of GrpcServer: what its connections call for each stream."""

    loop: asyncio.AbstractEventLoop
    max_receive: int
    max_send: int
    buffers: Any  # limits.BufferBudget
    connection_buffer_limit: int
    in_flight: int
    handler: Callable[[bytes, Stream], Any]
    _callbacks: dict[bytes, Any]
    call_ended: Callable[[], None]

    # -- request bytes -----------------------------------------------------------------
    def receive(self, conn, s: Stream, payload: bytes) -> None:
        """DATA for a call: buffered within the message limit and the server's budget."""
        n = len(payload)
        if conn.held + n > self.connection_buffer_limit or not self.buffers.take(n):
            self.answer(s, _RESOURCE_EXHAUSTED,
                        "Request buffers are full (unfinished messages of this connection "
                        f"or of all: {conn.held} and {self.buffers.used} bytes): retry later")
            return
        s.held += n
        conn.held += n
        body = s.body
        had = len(body)
        body += payload
        size = len(body) - 5
        if had < 5 <= len(body):  # the length prefix is in: refuse before the data
            size = max(size, int.from_bytes(body[1:5], "big"))
        if size > self.max_receive:
            self.answer(s, _RESOURCE_EXHAUSTED, f"Received message larger than max "
                                                f"({size} vs. {self.max_receive})")

    # -- calls ---------------------------------------------------------------------------
    def dispatch(self, conn, s: Stream) -> None:
        """The request is complete: find its handler and start the call."""
        req = s.request
        if req.method != b"POST" or not req.content_type.startswith(b"application/grpc"):
            status = b"405" if req.method != b"POST" else b"415"
            conn.send_response(s, f.encode_headers([(b":status", status)]), b"", b"")
            return
        if req.timeout is not None:
            try:
                s.deadline = time.monotonic() + parse_timeout(req.timeout)
            except ValueError:
                self.answer(s, _INTERNAL, f"bad grpc-timeout {req.timeout!r}")
                return
        path = req.path
        callback = self._callbacks.get(path)
        handler = callback if callback is not None else self.handler(path, s)
        if handler is None:
            self.answer(s, _UNIMPLEMENTED, "Method not found!")
            return
        if callback is None and (handler.request_streaming or handler.response_streaming):
            self.answer(s, _UNIMPLEMENTED, "streaming methods are not served by this server")
            return
        msg = self._message(s)
        if msg is None:
            return
        if s.held:  # the message is the call's now
            conn.release(s)
        self.start(s, handler, callback is not None, msg)

    def start(self, s: Stream, handler, is_callback: bool, msg: bytes) -> None:
        """Deserializes the message and starts the call (a task, or the callback)."""
        deserialize = handler.request_deserializer
        try:
            request = deserialize(msg) if deserialize else msg
        except Exception as e:  # noqa: BLE001 - a message that does not parse
            self.answer(s, _INTERNAL, f"Failed to parse request: {e}")
            return
        ctx = ServicerContext(s)
        self.in_flight += 1
        s.counted = True
        if s.deadline is not None:
            s.timer = self.loop.call_at(self.loop.time() + (s.deadline - time.monotonic()),
                                        self._expire, s)
        if is_callback:
            self._call_back(s, handler, request, ctx)
        else:
            s.task = self.loop.create_task(self._call(s, handler, request, ctx))

    def _message(self, s: Stream) -> bytes | None:
        """The one length-prefixed message of a unary call, inflated; None if answered."""
        body = s.body
        if len(body) < 5 or int.from_bytes(body[1:5], "big") != len(body) - 5:
            self.answer(s, _INTERNAL, "a unary call carries exactly one length-prefixed "
                                      "message")
            return None
        msg = bytes(body[5:])
        if not body[0]:
            return msg
        encoding = s.request.encoding
        if encoding == b"gzip":
            wbits = 16 + zlib.MAX_WBITS
        elif encoding == b"deflate":
            wbits = zlib.MAX_WBITS
        else:
            self.answer(s, _UNIMPLEMENTED, f"Compression algorithm "
                                           f"{encoding.decode('latin-1')!r} is not supported")
            return None
        try:
            msg = zlib.decompressobj(wbits).decompress(msg, self.max_receive + 1)
        except zlib.error as e:
            self.answer(s, _INTERNAL, f"cannot decompress: {e}")
            return None
        if len(msg) > self.max_receive:
            self.answer(s, _RESOURCE_EXHAUSTED, "Received message larger than max")
            return None
        return msg

    def _call_back(self, s: Stream, callback, request, ctx: ServicerContext) -> None:
        serialize = callback.response_serializer

        def reply(response, code: grpc.StatusCode | None = None, details: str = "") -> None:
            if s.closed:
                return
            if code is not None and code != _Status.OK:
                self.answer(s, code.value[0], details)
                return
            try:
                out = serialize(response) if serialize else response
            except Exception as e:  # noqa: BLE001
                self.answer(s, _INTERNAL, f"Failed to serialize response: {e}")
                return
            self.respond(s, out)

        try:
            callback.unary_unary(request, ctx, reply)
        except Exception as e:  # noqa: BLE001 - UNKNOWN, as grpc reports a raising handler
            log.exception("gRPC handler %s failed", callback.unary_unary)
            self.answer(s, _UNKNOWN, f"Unexpected {type(e).__name__}: {e}")

    async def _call(self, s: Stream, handler, request, ctx: ServicerContext) -> None:
        try:
            result = handler.unary_unary(request, ctx)
            if asyncio.iscoroutine(result):
                result = await result
        except grpc.aio.AbortError:
            code = ctx._code or _Status.UNKNOWN
            self.answer(s, code.value[0], ctx._details, ctx._trailing)
            return
        except asyncio.CancelledError:
            return
        except Exception as e:  # noqa: BLE001 - UNKNOWN, as grpc reports a raising handler
            log.exception("gRPC handler %s failed", handler)
            self.answer(s, _UNKNOWN, f"Unexpected {type(e).__name__}: {e}")
            return
        code = ctx._code
        if code is not None and code != _Status.OK:
            self.answer(s, code.value[0], ctx._details, ctx._trailing)
            return
        try:
            out = handler.response_serializer(result) if handler.response_serializer \
                else result
        except Exception as e:  # noqa: BLE001
            self.answer(s, _INTERNAL, f"Failed to serialize response: {e}")
            return
        self.respond(s, out, ctx._trailing)

    def _expire(self, s: Stream) -> None:
        s.timer = None
        s.cancelled = True
        task = s.task
        if not s.closed:
            self.answer(s, _Status.DEADLINE_EXCEEDED.value[0], "Deadline Exceeded")
        if task is not None and not task.done():
            task.cancel()  # as grpc: a handler past its deadline is cancelled

    # -- responses ---------------------------------------------------------------------
    def respond(self, s: Stream, message: bytes, trailing: tuple = ()) -> None:
        """The response message and OK trailers (one write when the windows allow)."""
        if s.closed:
            return
        n = len(message)
        if n > self.max_send:
            self.answer(s, _RESOURCE_EXHAUSTED,
                        f"Sent message larger than max ({n} vs. {self.max_send})")
            return
        trailers = (_OK_TRAILERS if not trailing
                    else f.encode_headers(trailer_fields(0, "", trailing)))
        s.conn.send_response(s, _OK_HEADERS, b"\x00" + n.to_bytes(4, "big") + message,
                             trailers)

    def answer(self, s: Stream, code: int, message: str, trailing: tuple = ()) -> None:
        """A trailers-only response (an error), or error trailers after sent headers."""
        if s.closed:
            return
        fields = trailer_fields(code, message, trailing)
        if s.pending is not None:  # headers already sent
            s.conn.send_trailers(s, f.encode_headers(fields))
            return
        block = f.encode_headers([(b":status", b"200"),
                                  (b"content-type", b"application/grpc")] + fields)
        s.conn.send_response(s, block, b"", b"")
