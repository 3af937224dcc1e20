"""GrpcServer: grpc.aio.Server's surface that `baton serve` uses, for unary methods.

It takes grpcio's handler objects (`add_generic_rpc_handlers`, what the generated
`add_*Servicer_to_server` functions call), so the official servicer classes and stubs
are used unchanged. Connections are accepted by `serving.connections.Listener` within a
`ConnectionTable` (shared with the REST listener in `baton serve`): a connection cap,
idle connections closed, accept() failures backed off. `stop(grace)` drains: GOAWAY on
every connection, new streams refused (clients retry elsewhere, UNAVAILABLE), calls in
flight finish within the grace, then every connection closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from typing import Any

import grpc

from baton.serving.connections import (
    ConnectionTable,
    Listener,
    bind_sockets,
    bind_unix,
    default_max_connections,
    sweep_forever,
)
from baton.serving.http2 import frames as f
from baton.serving.http2.calls import Calls, _Details
from baton.serving.http2.connection import H2Connection
from baton.serving.http2.limits import BufferBudget, Http2Limits, MiB

log = logging.getLogger("baton.serving.http2")

UNLIMITED_MESSAGE = 2**32 - 1  # a length prefix cannot declare more
# What a connection refused at the connection cap reads before it is closed: our
# SETTINGS, then GOAWAY (no stream processed: clients may retry elsewhere).
REFUSAL = f.settings_frame({}) + f.goaway(0, f.ENHANCE_YOUR_CALM, b"too many connections")
_VIOLATION_LOGS_PER_SECOND = 10

# grpc channel arguments the native server applies -> (where, its field, scale)
_CHANNEL_ARGUMENTS = {
    "grpc.max_receive_message_length": ("server", "max_receive_message_length", 1),
    "grpc.max_send_message_length": ("server", "max_send_message_length", 1),
    "grpc.max_concurrent_streams": ("limits", "max_concurrent_streams", 1),
    "grpc.max_metadata_size": ("limits", "max_header_list_size", 1),
    "grpc.max_connection_idle_ms": ("limits", "idle_timeout", 1e-3),
    "grpc.http2.max_ping_strikes": ("limits", "max_ping_strikes", 1),
    "grpc.http2.min_ping_interval_without_data_ms": ("limits", "min_ping_interval", 1e-3),
}


def channel_options(args, max_receive: int, max_send: int, base: Http2Limits | None = None
                    ) -> tuple[dict[str, Any], list[str]]:
    """GrpcServer's keyword arguments from --grpc_channel_arguments, and what it ignores.

    As grpc core reads them: grpc.max_receive_message_length and
    grpc.max_send_message_length in bytes, negative for no limit;
    grpc.max_concurrent_streams per connection, negative for no limit (not advertised);
    grpc.max_metadata_size (SETTINGS_MAX_HEADER_LIST_SIZE), grpc.max_connection_idle_ms
    (negative: never), grpc.http2.max_ping_strikes and
    grpc.http2.min_ping_interval_without_data_ms. A non-integer value is ignored (grpc
    core logs it and keeps its default). Any other argument tunes grpc core machinery
    this server does not have: returned as ignored. The limits not set by an argument
    are `base`'s (Http2Limits' defaults when None).
    """
    opts: dict[str, Any] = {"max_receive_message_length": max_receive,
                            "max_send_message_length": max_send}
    limits: dict[str, Any] = {}
    ignored: list[str] = []
    for key, value in args:
        spec = _CHANNEL_ARGUMENTS.get(key)
        if spec is None or not isinstance(value, int):
            ignored.append(f"{key}={value}")
            continue
        where, name, scale = spec
        if where == "server":
            opts[name] = UNLIMITED_MESSAGE if value < 0 else value
        elif name == "max_concurrent_streams":
            limits[name] = None if value < 0 else value
        elif name == "idle_timeout":
            limits[name] = 0.0 if value < 0 else value * scale
        else:
            limits[name] = value * scale
    if limits or base is not None:
        opts["limits"] = dataclasses.replace(base or Http2Limits(), **limits)
    return opts, ignored


class GrpcServer(Calls):
    """A gRPC server for unary methods on the running asyncio loop.

    Args:
        max_receive_message_length: bytes; larger requests get RESOURCE_EXHAUSTED.
        max_send_message_length: bytes; larger responses get RESOURCE_EXHAUSTED.
        limits: every HTTP/2 limit (limits.Http2Limits' defaults when None).
        table: the ConnectionTable to admit connections into (shared with other
            listeners of the process); by default one of this server's own, capped by
            the descriptor limit.
    """

    def __init__(self, max_receive_message_length: int = 4 * MiB,
                 max_send_message_length: int = 2**31 - 1,
                 limits: Http2Limits | None = None, table: ConnectionTable | None = None):
        self.limits = limits = limits or Http2Limits()
        self.max_receive = max_receive_message_length
        self.max_send = max_send_message_length
        one_message = min(self.max_receive, UNLIMITED_MESSAGE) + 5
        self.buffers = BufferBudget(max(limits.max_buffered_request_bytes, one_message))
        # one connection may hold a quarter of it (one message at least): a client cannot
        # take the whole budget over one connection
        self.connection_buffer_limit = max(self.buffers.limit // 4, one_message)
        self._own_table = table is None  # then this server sweeps it itself
        self.table = (table if table is not None
                      else ConnectionTable(default_max_connections()))
        self._sweeper: asyncio.Task | None = None
        self.stream_window = min(limits.initial_window_size, one_message)
        self.settings = {f.MAX_FRAME_SIZE: limits.max_frame_size,
                         f.INITIAL_WINDOW_SIZE: self.stream_window,
                         f.MAX_HEADER_LIST_SIZE: limits.max_header_list_size,
                         f.ENABLE_PUSH: 0}
        if limits.max_concurrent_streams is not None:
            self.settings[f.MAX_CONCURRENT_STREAMS] = limits.max_concurrent_streams
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self._generic: list = []
        self._methods: dict[bytes, object] = {}
        self._callbacks: dict[bytes, Any] = {}
        self._listeners: list[Listener] = []
        self.connections: set[H2Connection] = set()
        self.closing = False
        self.in_flight = 0
        self._idle: asyncio.Event | None = None
        self.unix_path = ""
        self._log_second = 0
        self._log_count = 0

    # -- registration (grpc.Server's names) ---------------------------------------
    def add_generic_rpc_handlers(self, handlers) -> None:
        self._generic.extend(handlers)
        self._methods.clear()

    def add_registered_method_handlers(self, service_name: str, method_handlers) -> None:
        for name, h in method_handlers.items():
            self._methods[f"/{service_name}/{name}".encode()] = h

    def add_callback_handlers(self, service_name: str, handlers: dict[str, Any]) -> None:
        """Methods answered through a callback (see calls.py): name -> a handler whose
        `unary_unary(request, context, reply)` returns at once."""
        for name, h in handlers.items():
            self._callbacks[f"/{service_name}/{name}".encode()] = h

    def callback(self, path: bytes):
        """The callback handler of a method, or None."""
        return self._callbacks.get(path)

    def handler(self, path: bytes, s):
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
    def _listen(self, sock) -> None:
        if self._own_table and self._sweeper is None:
            self._sweeper = self.loop.create_task(sweep_forever(self.table, self.loop))
        self._listeners.append(Listener(self.loop, sock, lambda: H2Connection(self),
                                        self.table, REFUSAL, "gRPC"))

    async def bind_tcp(self, host: str, port: int) -> int:
        self.loop = asyncio.get_running_loop()
        socks = bind_sockets(host, port)
        for sock in socks:
            self._listen(sock)
        return socks[0].getsockname()[1]

    async def bind_unix(self, path: str) -> None:
        self.loop = asyncio.get_running_loop()
        self.unix_path = path
        self._listen(bind_unix(path))

    def call_ended(self) -> None:
        self.in_flight -= 1
        if self._idle is not None and self.in_flight == 0:
            self._idle.set()

    def log_violation(self, fmt: str, *args) -> None:
        """One line per protocol violation, at most 10 a second (the rest counted)."""
        second = int(time.monotonic())
        if second != self._log_second:
            if self._log_count > _VIOLATION_LOGS_PER_SECOND:
                log.info("(%d more HTTP/2 connection errors in the last second)",
                         self._log_count - _VIOLATION_LOGS_PER_SECOND)
            self._log_second, self._log_count = second, 0
        self._log_count += 1
        if self._log_count <= _VIOLATION_LOGS_PER_SECOND:
            log.info(fmt, *args)

    async def stop(self, grace: float | None) -> None:
        """As grpc.aio's: refuse new calls, let calls in flight finish for `grace` s."""
        self.closing = True
        for lst in self._listeners:
            lst.close()
        for c in list(self.connections):
            c.goaway()
        if self.in_flight and grace:
            self._idle = asyncio.Event()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._idle.wait(), grace)
        for c in list(self.connections):
            for s in list(c.streams.values()):
                if not s.closed:
                    self.answer(s, grpc.StatusCode.CANCELLED.value[0], "server shutting down")
                c.abandon(s)
            c.close_now()
        if self._sweeper is not None:
            self._sweeper.cancel()
        await asyncio.sleep(0)  # the closes run
