"""The native gRPC server (serving/h2grpc.py) against grpcio's own clients.

Each case drives a GrpcServer on a background asyncio loop with real grpc channels (sync
and aio), so what is checked is what any TF Serving client sees: status codes, details,
metadata, deadlines, compression, flow control for large messages both ways, cancellation
and a graceful stop; and raw sockets that break the protocol get a GOAWAY and a closed
connection, not a hang.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time

import grpc
import pytest
from hpack import Encoder

from baton.serving import h2frames
from baton.serving.h2grpc import GrpcServer

SERVICE = "test.Echo"


def _ident(b):
    return b


class _Loop:
    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro, timeout=30):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture()
def served():
    events: dict = {"cancelled": threading.Event(), "started": threading.Event()}

    async def echo(request, context):
        md = dict(context.invocation_metadata())
        if request.startswith(b"abort:"):
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, request[6:].decode())
        if md.get("x-size"):
            return b"r" * int(md["x-size"])
        if md.get("x-raise"):
            raise RuntimeError("boom")
        if md.get("x-sleep"):
            events["started"].set()
            try:
                await asyncio.sleep(float(md["x-sleep"]))
            except asyncio.CancelledError:
                events["cancelled"].set()
                raise
        if md.get("x-code"):
            context.set_code(grpc.StatusCode.NOT_FOUND)
            context.set_details("set, not aborted")
            return b""
        return b"echo:" + request + b":" + context.peer().encode()

    def plain(request, context):  # a plain function handler, as grpcio's sync servers take
        return request[::-1]

    handlers = {"Echo": grpc.unary_unary_rpc_method_handler(echo, _ident, _ident),
                "Plain": grpc.unary_unary_rpc_method_handler(plain, _ident, _ident),
                "Stream": grpc.unary_stream_rpc_method_handler(echo, _ident, _ident)}
    server = GrpcServer(max_receive_message_length=4 << 20)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    lp = _Loop()
    port = lp.run(server.bind_tcp("127.0.0.1", 0))
    ch = grpc.insecure_channel(f"127.0.0.1:{port}", options=[
        ("grpc.max_receive_message_length", 64 << 20),
        ("grpc.max_send_message_length", 64 << 20)])
    yield lp, server, port, ch, events
    ch.close()
    lp.run(server.stop(0))
    lp.close()


def _call(ch, method="Echo", body=b"hi", **kw):
    return ch.unary_unary(f"/{SERVICE}/{method}", request_serializer=_ident,
                          response_deserializer=_ident)(body, **kw)


def _error(ch, method="Echo", body=b"hi", **kw) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as e:
        _call(ch, method, body, **kw)
    return e.value


def test_unary_call_metadata_and_peer(served):
    _, _, _, ch, _ = served
    out = _call(ch, body=b"abc", metadata=[("x-other", "1")])
    assert out.startswith(b"echo:abc:ipv4:127.0.0.1:")
    assert _call(ch, "Plain", b"abc") == b"cba"
    for i in range(50):  # the HPACK cache path: same headers, other bodies
        assert _call(ch, "Plain", str(i).encode()) == str(i).encode()[::-1]


def test_status_codes_and_details(served):
    _, _, _, ch, _ = served
    e = _error(ch, body="abort:bad 100% ünïcode\nline".encode())
    assert e.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert e.details() == "bad 100% ünïcode\nline"
    e = _error(ch, metadata=[("x-raise", "1")])
    assert e.code() == grpc.StatusCode.UNKNOWN and "boom" in e.details()
    e = _error(ch, metadata=[("x-code", "1")])
    assert (e.code(), e.details()) == (grpc.StatusCode.NOT_FOUND, "set, not aborted")
    e = _error(ch, "Nope")
    assert e.code() == grpc.StatusCode.UNIMPLEMENTED
    e = ch.unary_stream(f"/{SERVICE}/Stream", request_serializer=_ident,
                        response_deserializer=_ident)(b"x")
    with pytest.raises(grpc.RpcError) as err:
        list(e)
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_large_messages_both_ways_are_flow_controlled(served):
    _, _, _, ch, _ = served
    big = bytes(range(256)) * (3 << 12)  # 3 MiB request: several windows
    out = _call(ch, body=big)
    assert out[5:5 + len(big)] == big
    out = _call(ch, metadata=[("x-size", str(5 << 20))])  # 5 MiB response
    assert out == b"r" * (5 << 20)
    e = _error(ch, body=b"x" * (5 << 20))  # over the server's 4 MiB receive limit
    assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_gzip_request(served):
    _, _, _, ch, _ = served
    out = _call(ch, body=b"z" * 10000, compression=grpc.Compression.Gzip)
    assert out.startswith(b"echo:" + b"z" * 10000)


def test_deadline_and_cancellation(served):
    _, _, _, ch, events = served
    t = time.monotonic()
    e = _error(ch, metadata=[("x-sleep", "5")], timeout=0.3)
    assert e.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert time.monotonic() - t < 3
    assert events["cancelled"].wait(5)  # the handler was cancelled, not left running
    events["cancelled"].clear()
    events["started"].clear()
    fut = ch.unary_unary(f"/{SERVICE}/Echo", request_serializer=_ident,
                         response_deserializer=_ident).future(b"x", metadata=[("x-sleep", "5")])
    assert events["started"].wait(5)
    fut.cancel()  # RST_STREAM: the handler is cancelled
    assert events["cancelled"].wait(5)


def test_many_concurrent_calls_on_one_aio_channel(served):
    lp, _, port, _, _ = served

    async def run():
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            call = ch.unary_unary(f"/{SERVICE}/Plain", request_serializer=_ident,
                                  response_deserializer=_ident)
            return await asyncio.gather(*[call(str(i).encode()) for i in range(300)])

    out = asyncio.run(run())
    assert out == [str(i).encode()[::-1] for i in range(300)]


def test_stop_finishes_calls_in_flight_and_refuses_new_ones(served):
    lp, server, port, ch, events = served
    fut = ch.unary_unary(f"/{SERVICE}/Echo", request_serializer=_ident,
                         response_deserializer=_ident).future(b"x", metadata=[("x-sleep", "0.5")])
    assert events["started"].wait(5)
    stopping = asyncio.run_coroutine_threadsafe(server.stop(5), lp.loop)
    assert fut.result(10).startswith(b"echo:x")  # in flight: answered
    stopping.result(10)
    e = _error(ch, timeout=5)
    assert e.code() == grpc.StatusCode.UNAVAILABLE


PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
PROTOCOL_ERROR, FRAME_SIZE_ERROR, COMPRESSION_ERROR = 1, 6, 9


def _frame(ftype: int, flags: int, sid: int, payload: bytes) -> bytes:
    n = len(payload)
    return struct.pack(">BHBBI", n >> 16, n & 0xFFFF, ftype, flags, sid) + payload


def _until_closed(port: int, data: bytes) -> list[tuple[int, bytes]]:
    """Sends `data` and reads to EOF (a hang fails the 5 s timeout): the frames read."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(data)
        got = b""
        while chunk := s.recv(65536):  # socket.timeout if the server never closes
            got += chunk
    frames, pos = [], 0
    while pos + 9 <= len(got):
        n = int.from_bytes(got[pos:pos + 3], "big")
        frames.append((got[pos + 3], got[pos + 9:pos + 9 + n]))
        pos += 9 + n
    return frames


def _goaway_code(frames) -> int:
    codes = [struct.unpack(">II", p[:8])[1] for t, p in frames if t == 7]
    assert codes, f"no GOAWAY in {frames}"
    return codes[-1]


@pytest.mark.parametrize("data, code", [
    (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", PROTOCOL_ERROR),  # HTTP/1.1, not a preface
    (PREFACE[:10] + b"XX" + PREFACE[12:], PROTOCOL_ERROR),
    (PREFACE + _frame(4, 0, 0, b"\x00\x03\x00"), FRAME_SIZE_ERROR),  # SETTINGS of 3 bytes
    (PREFACE + _frame(4, 0, 0, b"") + _frame(0, 1, 0, b"x"), PROTOCOL_ERROR),  # DATA, stream 0
    (PREFACE + _frame(4, 0, 0, b"") + _frame(1, 5, 1, b"\xff\xff\xff\x0f"),
     COMPRESSION_ERROR),  # a header index far out of range
    (PREFACE + _frame(4, 0, 0, b"") + _frame(1, 5, 2, b"\x83\x86\x84"),
     PROTOCOL_ERROR),  # an even (server-side) stream id
    (PREFACE + _frame(6, 0, 0, b"1234"), FRAME_SIZE_ERROR),  # PING of 4 bytes
])
def test_broken_protocol_gets_goaway_and_close(served, data, code):
    _, _, port, ch, _ = served
    frames = _until_closed(port, data)
    assert _goaway_code(frames) == code
    assert _call(ch, "Plain", b"ok") == b"ko"  # the server still serves others


def test_headers_without_grpc_content_type_get_http_status(served):
    _, _, port, _, _ = served
    block = Encoder().encode([(":method", "GET"), (":scheme", "http"), (":authority", "x"),
                              (":path", f"/{SERVICE}/Plain")])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(PREFACE + _frame(4, 0, 0, b"") + _frame(1, 5, 1, block))  # END_STREAM
        got = b""
        while True:  # until the server's HEADERS on stream 1 (socket.timeout if never)
            got += s.recv(65536)
            frames, pos = [], 0
            while pos + 9 <= len(got):
                n = int.from_bytes(got[pos:pos + 3], "big")
                if pos + 9 + n > len(got):
                    break
                frames.append((got[pos + 3], int.from_bytes(got[pos + 5:pos + 9], "big"),
                               got[pos + 9:pos + 9 + n]))
                pos += 9 + n
            answer = [p for t, sid, p in frames if t == 1 and sid == 1]
            if answer:
                break
    assert h2frames.Decoder().decode(answer[0]) == [(b":status", b"405")]


def test_hpack_decoder_matches_hpack_encoder():
    enc, dec = Encoder(), h2frames.Decoder()
    blocks = [
        [(":method", "POST"), (":path", "/a/B"), ("content-type", "application/grpc"),
         ("te", "trailers"), ("x-custom", "v" * 300)],
        [(":method", "POST"), (":path", "/a/B"), ("content-type", "application/grpc")],
        [(":method", "POST"), (":path", "/a/C"), ("grpc-timeout", "99m")],
    ]
    for _ in range(3):
        for hs in blocks:
            block = enc.encode(hs, huffman=True)
            assert dec.decode(block) == [(k.encode(), v.encode()) for k, v in hs]
    enc.header_table_size = 0  # a table size update: entries evicted, cache cleared
    block = enc.encode(blocks[1])
    assert dec.decode(block) == [(k.encode(), v.encode()) for k, v in blocks[1]]
    assert dec.size == 0
    with pytest.raises(h2frames.CompressionError):
        dec.decode(b"\xff\xff\xff\x0f")  # an index far out of range
