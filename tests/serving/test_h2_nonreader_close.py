"""A peer that never reads cannot keep a closed connection's descriptor; one that reads
slowly gets the whole of its answer.

`transport.close()` waits for the write buffer to drain, for ever when the peer does not
read (its receive window stays full); the ConnectionTable has already forgotten the
connection (idle sweep, eviction), so such sockets were outside the connection cap: a
client asking for a large answer and never reading kept one descriptor per connection
for as long as it liked, after the linger (connection error) as after an idle close.
In-process and deterministic: the test waits until the answer sits in the server's
write buffer, then ends the connection as the server would.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time

import grpc
import pytest
from h2_raw import (
    DATA,
    END_HEADERS,
    END_STREAM,
    HEADERS,
    PREFACE,
    WINDOW_UPDATE,
    frame,
    message,
    request_block,
    settings,
)

from baton.serving.connections import ConnectionTable
from baton.serving.http2 import GrpcServer, Http2Limits
from baton.serving.http2 import frames as f
from baton.serving.server import new_event_loop

LINGER = 0.3


async def _big(request, context):
    return b"r" * (16 << 20)  # more than any kernel send buffer takes


async def _stuck_connection(server, rcvbuf: int = 2048):
    """A connection whose peer asked for 16 MiB, opened its windows and reads nothing."""
    port = await server.bind_tcp("127.0.0.1", 0)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, ("127.0.0.1", port))
    await loop.sock_sendall(sock, PREFACE + settings(initial_window_size=2**31 - 1)
                            + frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 2**31 - 1 - 65535))
                            + frame(HEADERS, END_HEADERS, 1, request_block("Big"))
                            + frame(DATA, END_STREAM, 1, message(b"x")))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        conns = [c for c in server.connections if c.transport is not None
                 and not c.streams and c.transport.get_write_buffer_size()]
        if conns:
            return sock, conns[0]
        await asyncio.sleep(0.02)
    raise AssertionError("the answer never filled the server's write buffer")


def _server(drain_timeout: float = LINGER):
    server = GrpcServer(limits=Http2Limits(linger=LINGER, drain_timeout=drain_timeout),
                        table=ConnectionTable(8))
    handlers = {"Big": grpc.unary_unary_rpc_method_handler(_big, lambda b: b, lambda b: b)}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Echo",
                                                                           handlers),))
    return server


@pytest.mark.parametrize("uvloop", ["1", "0"])
@pytest.mark.parametrize("end", ["connection error", "idle close", "eviction"])
def test_a_non_reading_peer_loses_its_descriptor_within_the_linger(monkeypatch, uvloop, end):
    monkeypatch.setenv("BATON_SERVING_UVLOOP", uvloop)
    loop = new_event_loop()

    async def scenario():
        server = _server()
        sock, conn = await _stuck_connection(server)
        try:
            if end == "connection error":
                conn.fail(f.PROTOCOL_ERROR, "test")
            elif end == "idle close":
                server.table.discard(conn)
                conn.close_idle()
            else:
                conn.fail(f.PROTOCOL_ERROR, "test")  # lingering, then evicted
                server.table.discard(conn)
                conn.close_idle()
            t0 = time.monotonic()
            while conn in server.connections and time.monotonic() - t0 < LINGER + 5:
                await asyncio.sleep(0.05)
            assert conn not in server.connections, (
                f"{end}: the socket is still open {time.monotonic() - t0:.1f} s later "
                f"(linger {LINGER} s), {conn.lingering or conn.transport} buffering "
                f"{(conn.lingering or conn.transport).get_write_buffer_size()} bytes")
        finally:
            sock.close()
            await server.stop(0)

    try:
        loop.run_until_complete(scenario())
    finally:
        loop.close()


@pytest.mark.parametrize("uvloop", ["1", "0"])
def test_a_slow_reader_gets_its_whole_answer_after_an_idle_close(monkeypatch, uvloop):
    """The drain check counts progress, not time: a peer that takes some of its answer
    within every drain_timeout (here 0.3 s) is never reset, however long it takes."""
    monkeypatch.setenv("BATON_SERVING_UVLOOP", uvloop)
    loop = new_event_loop()

    async def scenario():
        server = _server(drain_timeout=LINGER)
        sock, conn = await _stuck_connection(server, rcvbuf=65536)
        got, t0 = 0, time.monotonic()
        try:
            server.table.discard(conn)
            conn.close_idle()
            chunk = b"?"
            while chunk:  # 512 KiB every 0.1 s: about 3 s for the 16 MiB
                await asyncio.sleep(0.1)
                tick = 0
                while chunk and tick < 512 << 10:
                    try:
                        chunk = await asyncio.wait_for(loop.sock_recv(sock, 65536), 5)
                    except ConnectionResetError:
                        raise AssertionError(f"reset after {got} bytes, "
                                             f"{time.monotonic() - t0:.1f} s") from None
                    got += len(chunk)
                    tick += len(chunk)
        finally:
            sock.close()
            await server.stop(0)
        return got, time.monotonic() - t0

    try:
        got, seconds = loop.run_until_complete(scenario())
    finally:
        loop.close()
    assert got > 16 << 20, got  # the answer, its frames and the GOAWAY, then a FIN
    assert seconds > 3 * LINGER  # it took many drain windows
