"""The native gRPC server (serving/http2) against grpcio's own clients.

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

from baton.serving.http2 import GrpcServer, Http2Limits, channel_options
from baton.serving.http2.hpack import CompressionError, Decoder

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


def _handlers(events: dict) -> dict:

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

    return {"Echo": grpc.unary_unary_rpc_method_handler(echo, _ident, _ident),
            "Plain": grpc.unary_unary_rpc_method_handler(plain, _ident, _ident),
            "Stream": grpc.unary_stream_rpc_method_handler(echo, _ident, _ident)}


@pytest.fixture()
def served(request):
    """(loop, server, port, channel, events); `limits` by indirect parametrization."""
    events: dict = {"cancelled": threading.Event(), "started": threading.Event()}
    limits = getattr(request, "param", None)
    server = GrpcServer(max_receive_message_length=4 << 20, limits=limits)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        SERVICE, _handlers(events)),))
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
    (PREFACE + _frame(4, 0, 0, b"") + _frame(6, 0, 0, b"1234"),
     FRAME_SIZE_ERROR),  # PING of 4 bytes
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
    assert Decoder().decode(answer[0]) == [(b":status", b"405")]


def test_hpack_decoder_matches_hpack_encoder():
    enc, dec = Encoder(), Decoder()
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
    with pytest.raises(CompressionError):
        dec.decode(b"\xff\xff\xff\x0f")  # an index far out of range


# -- limits: handshake timeout, early message size refusal, concurrent streams -----------

def _frames_until(s: socket.socket, done) -> list[tuple[int, int, int, bytes]]:
    """Reads (type, flags, stream, payload) frames until `done(frames)` (socket.timeout
    if never) or EOF."""
    got, frames = b"", []
    while not done(frames):
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
        frames, pos = [], 0
        while pos + 9 <= len(got):
            n = int.from_bytes(got[pos:pos + 3], "big")
            if pos + 9 + n > len(got):
                break
            frames.append((got[pos + 3], got[pos + 4],
                           int.from_bytes(got[pos + 5:pos + 9], "big") & 0x7FFFFFFF,
                           got[pos + 9:pos + 9 + n]))
            pos += 9 + n
    return frames


def _request_headers(method="Echo", end_stream=False, sid=1, enc=None) -> bytes:
    block = (enc or Encoder()).encode([
        (":method", "POST"), (":scheme", "http"), (":authority", "x"),
        (":path", f"/{SERVICE}/{method}"), ("content-type", "application/grpc"),
        ("te", "trailers")])
    return _frame(1, 4 | (1 if end_stream else 0), sid, block)


def _settings_of(frames) -> dict[int, int]:
    (payload,) = [p for t, f, sid, p in frames if t == 4 and not f & 1][:1]
    return {k: v for k, v in (struct.unpack_from(">HI", payload, i)
                              for i in range(0, len(payload), 6))}


def test_handshake_timeout_is_ten_seconds_by_default():
    assert GrpcServer().limits.handshake_timeout == 10.0


@pytest.mark.parametrize("served", [Http2Limits(handshake_timeout=0.3)], indirect=True)
@pytest.mark.parametrize("data, goaway", [
    (b"", False),  # connects and says nothing
    (PREFACE[:10], False),  # a partial preface, then silence: closed, no frame
    (PREFACE, True),  # the magic but never SETTINGS: GOAWAY PROTOCOL_ERROR
])
def test_a_connection_that_never_completes_its_preface_is_closed(served, data, goaway):
    _, server, port, ch, _ = served
    t = time.monotonic()
    frames = _until_closed(port, data)  # socket.timeout (5 s) if never closed
    assert time.monotonic() - t < 3
    assert [t for t, _ in frames if t != 4 and t != 8] == ([7] if goaway else [])
    if goaway:
        assert _goaway_code(frames) == PROTOCOL_ERROR
    assert _call(ch, "Plain", b"ok") == b"ko"


@pytest.mark.parametrize("served", [Http2Limits(handshake_timeout=0.2)], indirect=True)
def test_a_completed_handshake_is_not_timed_out(served):
    _, server, port, _, _ = served
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(PREFACE[:5])
        time.sleep(0.05)
        s.sendall(PREFACE[5:] + _frame(4, 0, 0, b""))
        time.sleep(0.5)  # idle past the handshake timeout: a kept-alive connection
        s.sendall(_frame(6, 0, 0, b"12345678"))
        frames = _frames_until(s, lambda fs: any(t == 6 for t, *_ in fs))
    assert (6, 1, 0, b"12345678") in frames  # PING ACK
    assert not any(t == 7 for t, *_ in frames)


def test_a_message_declared_over_the_limit_is_refused_when_its_prefix_arrives(served):
    _, server, port, ch, _ = served
    assert server.max_receive == 4 << 20
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        prefix = b"\x00" + (100 << 20).to_bytes(4, "big")  # declares 100 MiB
        s.sendall(PREFACE + _frame(4, 0, 0, b"") + _request_headers()
                  + _frame(0, 0, 1, prefix + b"x" * 1000))  # no END_STREAM: more to come
        frames = _frames_until(s, lambda fs: any(t == 3 and sid == 1 for t, _, sid, _ in fs))
    (trailers,) = [p for t, f, sid, p in frames if t == 1 and sid == 1 and f & 1]
    fields = dict(Decoder().decode(trailers))
    assert fields[b"grpc-status"] == b"8"  # RESOURCE_EXHAUSTED, before the data
    assert fields[b"grpc-message"] == f"Received message larger than max ({100 << 20} vs. " \
        f"{4 << 20})".encode()
    assert [p for t, f, sid, p in frames if t == 3 and sid == 1] == [b"\x00\x00\x00\x00"]
    e = _error(ch, body=b"x" * (5 << 20))  # grpcio's client sees the same
    assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert e.details() == f"Received message larger than max ({5 << 20} vs. {4 << 20})"


def test_max_concurrent_streams_is_advertised_and_enforced(served):
    _, server, port, _, _ = served
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(PREFACE + _frame(4, 0, 0, b""))
        frames = _frames_until(s, lambda fs: any(t == 4 for t, *_ in fs))
    assert _settings_of(frames)[3] == 1000  # SETTINGS_MAX_CONCURRENT_STREAMS

    limited = GrpcServer(limits=Http2Limits(max_concurrent_streams=2))
    limited.add_generic_rpc_handlers(server._generic)
    lp = _Loop()
    try:
        lport = lp.run(limited.bind_tcp("127.0.0.1", 0))
        with socket.create_connection(("127.0.0.1", lport), timeout=5) as s:
            enc = Encoder()
            s.sendall(PREFACE + _frame(4, 0, 0, b"")
                      + b"".join(_request_headers(sid=i, enc=enc) for i in (1, 3, 5)))
            frames = _frames_until(s, lambda fs: any(t == 3 for t, *_ in fs))
            assert _settings_of(frames)[3] == 2
            assert [(sid, p) for t, _, sid, p in frames if t == 3] == [
                (5, b"\x00\x00\x00\x07")]  # REFUSED_STREAM: 1 and 3 are open
            body = b"\x00" + (2).to_bytes(4, "big") + b"ab"
            s.sendall(_frame(0, 1, 1, body))  # 1 completes: a slot frees
            frames = _frames_until(s, lambda fs: any(t == 1 and f & 1 and sid == 1
                                                     for t, f, sid, _ in fs))
            s.sendall(_request_headers("Plain", sid=7, enc=enc) + _frame(0, 1, 7, body))
            frames = _frames_until(s, lambda fs: any(t == 1 and f & 1 and sid == 7
                                                     for t, f, sid, _ in fs))
            assert not [sid for t, _, sid, _ in frames if t == 3]  # 7 was accepted
            assert (0, 0, 7, b"\x00\x00\x00\x00\x02ba") in frames
        with grpc.insecure_channel(f"127.0.0.1:{lport}") as ch:  # clients keep to it
            futures = [_call_future(ch, str(i).encode()) for i in range(20)]
            assert [f.result(10) for f in futures] == [str(i).encode()[::-1]
                                                      for i in range(20)]
    finally:
        lp.run(limited.stop(0))
        lp.close()


def _call_future(ch, body):
    return ch.unary_unary(f"/{SERVICE}/Plain", request_serializer=_ident,
                          response_deserializer=_ident).future(body)


def test_channel_options_map_grpc_core_arguments():
    opts, ignored = channel_options(
        [("grpc.max_concurrent_streams", 7), ("grpc.max_receive_message_length", 1000),
         ("grpc.max_send_message_length", -1), ("grpc.so_reuseaddr", 1),
         ("grpc.max_connection_age_ms", "soon"), ("grpc.max_metadata_size", 8192),
         ("grpc.max_connection_idle_ms", 1500), ("grpc.http2.max_ping_strikes", 5),
         ("grpc.http2.min_ping_interval_without_data_ms", 10000)], 64 << 20, 64 << 20)
    assert opts == {"max_receive_message_length": 1000, "max_send_message_length": 2**32 - 1,
                    "limits": Http2Limits(max_concurrent_streams=7, max_header_list_size=8192,
                                          idle_timeout=1.5, max_ping_strikes=5,
                                          min_ping_interval=10.0)}
    assert ignored == ["grpc.so_reuseaddr=1", "grpc.max_connection_age_ms=soon"]
    opts, ignored = channel_options([("grpc.max_concurrent_streams", -1),
                                     ("grpc.max_connection_idle_ms", -1),
                                     ("grpc.max_receive_message_length", "big")], 5, 6)
    assert opts == {"max_receive_message_length": 5, "max_send_message_length": 6,
                    "limits": Http2Limits(max_concurrent_streams=None, idle_timeout=0.0)}
    assert ignored == ["grpc.max_receive_message_length=big"]
    assert channel_options([], 5, 6) == ({"max_receive_message_length": 5,
                                          "max_send_message_length": 6}, [])
    base = Http2Limits(idle_timeout=9.0)
    assert channel_options([], 5, 6, base)[0]["limits"] is not None
    assert channel_options([], 5, 6, base)[0]["limits"].idle_timeout == 9.0
    unlimited = GrpcServer(limits=Http2Limits(max_concurrent_streams=None))
    assert 3 not in unlimited.settings and unlimited.limits.max_concurrent_streams is None
