"""RFC 9113's rules, frame by frame, against the native gRPC server (serving/http2).

Each case sends raw frames no client library would send and checks the answer the RFC
prescribes: a connection error (GOAWAY with its code, the connection closed), a stream
error (RST_STREAM with its code, the connection going on), or the frame ignored. After
every case a real grpc call on another connection must still be answered. The cases
follow RFC 9113's sections (and h2spec's list of them): frame sizes, padding, stream
states and identifiers, flow control, SETTINGS, PING, PRIORITY, CONTINUATION, header
validation (8.2, 8.3) and HPACK (RFC 7541).
"""

from __future__ import annotations

import asyncio
import struct
import threading
import time

import grpc
import h2_echo_server
import pytest
from h2_raw import (
    ACK,
    COMPRESSION_ERROR,
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    FLOW_CONTROL_ERROR,
    FRAME_SIZE_ERROR,
    GOAWAY,
    HEADERS,
    PADDED,
    PING,
    PREFACE,
    PRIORITY,
    PRIORITY_FLAG,
    PROTOCOL_ERROR,
    PUSH_PROMISE,
    RST_STREAM,
    SERVICE,
    SETTINGS,
    STREAM_CLOSED,
    WINDOW_UPDATE,
    Peer,
    call,
    frame,
    headers,
    message,
    request_block,
    settings,
)
from hpack import Decoder, Encoder

from baton.serving.http2 import GrpcServer, Http2Limits


def _ident(b):
    return b


@pytest.fixture(scope="module")
def port():
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    # a 64 KiB message limit: each stream's receive window is 64 KiB and 5 bytes
    server = GrpcServer(max_receive_message_length=65536,
                        limits=Http2Limits(max_concurrent_streams=100))
    handlers = {"Echo": grpc.unary_unary_rpc_method_handler(h2_echo_server.echo, _ident,
                                                            _ident),
                "Plain": grpc.unary_unary_rpc_method_handler(h2_echo_server.plain, _ident,
                                                             _ident)}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE,
                                                                          handlers),))
    server.add_callback_handlers(SERVICE, {"Fast": grpc.unary_unary_rpc_method_handler(
        lambda request, context, reply: reply(b"fast:" + request))})
    p = asyncio.run_coroutine_threadsafe(server.bind_tcp("127.0.0.1", 0), loop).result(10)
    yield p
    asyncio.run_coroutine_threadsafe(server.stop(0), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def _still_serving(port: int) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        out = ch.unary_unary(f"/{SERVICE}/Plain", request_serializer=_ident,
                             response_deserializer=_ident)(b"ok", timeout=10)
    assert out == b"ko"


def _block(fields) -> bytes:
    return Encoder().encode(fields)


OPEN = headers(1)  # stream 1 open (no END_STREAM): a request whose body is to come
REQUEST = [(":method", "POST"), (":scheme", "http"), (":authority", "x"),
           (":path", f"/{SERVICE}/Echo"), ("content-type", "application/grpc")]

# (name, frames after the preface and an empty SETTINGS, GOAWAY code)
CONNECTION_ERRORS = [
    ("frame over SETTINGS_MAX_FRAME_SIZE", frame(DATA, 0, 1, b"x" * 16385), FRAME_SIZE_ERROR),
    ("DATA on stream 0", frame(DATA, 0, 0, b"x"), PROTOCOL_ERROR),
    ("DATA on an idle stream", frame(DATA, 0, 1, b"x"), PROTOCOL_ERROR),
    ("HEADERS on stream 0", headers(0), PROTOCOL_ERROR),
    ("HEADERS on an even stream", headers(2), PROTOCOL_ERROR),
    ("stream id lower than the last", headers(5) + headers(3), PROTOCOL_ERROR),
    ("PADDED DATA without a pad length", OPEN + frame(DATA, PADDED, 1, b""), PROTOCOL_ERROR),
    ("PADDED HEADERS without a pad length", frame(HEADERS, PADDED | END_HEADERS, 1, b""),
     PROTOCOL_ERROR),
    ("padding as long as the frame", OPEN + frame(DATA, PADDED, 1, b"\x05abcd"),
     PROTOCOL_ERROR),
    ("PADDED PRIORITY HEADERS too short", frame(HEADERS, PADDED | PRIORITY_FLAG | END_HEADERS,
                                                1, b"\x00\x00\x00"), PROTOCOL_ERROR),
    ("DATA over the stream window", OPEN  # 65541 bytes: the 64 KiB message, prefixed
     + frame(DATA, 0, 1, b"\0\0\1\0\0" + b"x" * 16379) + frame(DATA, 0, 1, b"x" * 16384) * 3
     + frame(DATA, 0, 1, b"x" * 6), FLOW_CONTROL_ERROR),
    ("WINDOW_UPDATE of 0 on the connection", frame(WINDOW_UPDATE, 0, 0, b"\0\0\0\0"),
     PROTOCOL_ERROR),
    ("connection window over 2^31-1", frame(WINDOW_UPDATE, 0, 0, b"\x7f\xff\xff\xff"),
     FLOW_CONTROL_ERROR),
    ("WINDOW_UPDATE of 3 bytes", frame(WINDOW_UPDATE, 0, 0, b"\0\0\1"), FRAME_SIZE_ERROR),
    ("WINDOW_UPDATE on an idle stream", frame(WINDOW_UPDATE, 0, 9, b"\0\0\0\1"),
     PROTOCOL_ERROR),
    ("RST_STREAM on stream 0", frame(RST_STREAM, 0, 0, b"\0\0\0\x08"), PROTOCOL_ERROR),
    ("RST_STREAM on an idle stream", frame(RST_STREAM, 0, 7, b"\0\0\0\x08"), PROTOCOL_ERROR),
    ("RST_STREAM of 3 bytes", OPEN + frame(RST_STREAM, 0, 1, b"\0\0\x08"), FRAME_SIZE_ERROR),
    ("SETTINGS on a stream", frame(SETTINGS, 0, 1, b""), PROTOCOL_ERROR),
    ("SETTINGS ACK with a payload", frame(SETTINGS, ACK, 0, b"\0\1\0\0\0\0"),
     FRAME_SIZE_ERROR),
    ("SETTINGS of 5 bytes", frame(SETTINGS, 0, 0, b"\0\1\0\0\0"), FRAME_SIZE_ERROR),
    ("SETTINGS_ENABLE_PUSH 2", settings(enable_push=2), PROTOCOL_ERROR),
    ("SETTINGS_INITIAL_WINDOW_SIZE 2^31", settings(initial_window_size=2**31),
     FLOW_CONTROL_ERROR),
    ("SETTINGS_MAX_FRAME_SIZE 16383", settings(max_frame_size=16383), PROTOCOL_ERROR),
    ("SETTINGS_MAX_FRAME_SIZE 2^24", settings(max_frame_size=2**24), PROTOCOL_ERROR),
    ("PING of 7 bytes", frame(PING, 0, 0, b"1234567"), FRAME_SIZE_ERROR),
    ("PING on a stream", frame(PING, 0, 1, b"12345678"), PROTOCOL_ERROR),
    ("PRIORITY on stream 0", frame(PRIORITY, 0, 0, b"\0\0\0\1\x10"), PROTOCOL_ERROR),
    ("PUSH_PROMISE from a client", frame(PUSH_PROMISE, END_HEADERS, 1, b"\0\0\0\2"),
     PROTOCOL_ERROR),
    ("CONTINUATION without HEADERS", frame(CONTINUATION, END_HEADERS, 1, b""),
     PROTOCOL_ERROR),
    ("a frame inside a header block", headers(1, end_headers=False)
     + frame(PING, 0, 0, b"12345678"), PROTOCOL_ERROR),
    ("CONTINUATION on another stream", headers(1, end_headers=False)
     + frame(CONTINUATION, END_HEADERS, 3, b""), PROTOCOL_ERROR),
    ("GOAWAY of 4 bytes", frame(GOAWAY, 0, 0, b"\0\0\0\0"), FRAME_SIZE_ERROR),
    ("HPACK index out of range", frame(HEADERS, END_HEADERS, 1, b"\xff\xff\xff\x0f"),
     COMPRESSION_ERROR),
    ("HPACK table size over the limit", frame(HEADERS, END_HEADERS, 1, b"\x3f\xe2\x1f"),
     COMPRESSION_ERROR),
    ("HPACK table size update after a field", frame(HEADERS, END_HEADERS, 1, b"\x82\x20"),
     COMPRESSION_ERROR),
    ("HPACK string longer than the block", frame(HEADERS, END_HEADERS, 1, b"\x00\x05ab"),
     COMPRESSION_ERROR),
]


@pytest.mark.parametrize("name, frames, code", CONNECTION_ERRORS,
                         ids=[c[0] for c in CONNECTION_ERRORS])
def test_connection_error(port, name, frames, code):
    peer = Peer(port)
    peer.send(frames)
    got, debug = peer.goaway()
    assert got == code, (name, got, debug)
    peer.until_closed()
    assert peer.eof
    _still_serving(port)


def test_headers_on_a_closed_stream(port):
    peer = Peer(port)
    peer.send(call(1))
    peer.read_until(lambda fs: any(t == HEADERS and s == 1 and f & END_STREAM
                                   for t, f, s, _ in fs))
    peer.send(headers(1))
    assert peer.goaway()[0] == STREAM_CLOSED


def test_the_first_frame_must_be_settings(port):
    peer = Peer(port, preface=False)
    peer.send(PREFACE + frame(PING, 0, 0, b"12345678"))
    assert peer.goaway()[0] == PROTOCOL_ERROR


# (name, frames after the preface and an empty SETTINGS, stream, RST_STREAM code)
STREAM_ERRORS = [
    ("DATA after END_STREAM", headers(1, block=request_block("Echo", extra=[
        ("x-sleep", "1")]), end_stream=False) + frame(DATA, END_STREAM, 1, message(b"a"))
     + frame(DATA, 0, 1, b"x"), 1, STREAM_CLOSED),
    ("WINDOW_UPDATE of 0 on a stream", OPEN + frame(WINDOW_UPDATE, 0, 1, b"\0\0\0\0"), 1,
     PROTOCOL_ERROR),
    ("stream window over 2^31-1", OPEN + frame(WINDOW_UPDATE, 0, 1, b"\x7f\xff\xff\xff"), 1,
     FLOW_CONTROL_ERROR),
    ("PRIORITY of 4 bytes", frame(PRIORITY, 0, 3, b"\0\0\0\1"), 3, FRAME_SIZE_ERROR),
    ("PRIORITY on itself", frame(PRIORITY, 0, 3, b"\0\0\0\3\x10"), 3, PROTOCOL_ERROR),
    ("HEADERS depending on itself", frame(HEADERS, PRIORITY_FLAG | END_HEADERS, 1,
                                          b"\0\0\0\1\x10" + request_block()), 1,
     PROTOCOL_ERROR),
    ("upper-case field name", headers(1, _block(REQUEST + [("X-Up", "1")])), 1,
     PROTOCOL_ERROR),
    ("connection-specific field", headers(1, _block(REQUEST + [("connection", "close")])), 1,
     PROTOCOL_ERROR),
    ("te other than trailers", headers(1, _block(REQUEST + [("te", "gzip")])), 1,
     PROTOCOL_ERROR),
    ("a value with a line feed", headers(1, _block(REQUEST + [("x-a", "1\n2")])), 1,
     PROTOCOL_ERROR),
    ("a value with leading space", headers(1, _block(REQUEST + [("x-a", " 1")])), 1,
     PROTOCOL_ERROR),
    ("pseudo-header after a field", headers(1, _block(REQUEST[1:] + [(":method", "POST")])),
     1, PROTOCOL_ERROR),
    ("unknown pseudo-header", headers(1, _block(REQUEST + [(":status", "200")])), 1,
     PROTOCOL_ERROR),
    ("repeated :path", headers(1, _block(REQUEST[:4] + [(":path", "/a/b")] + REQUEST[4:])),
     1, PROTOCOL_ERROR),
    ("no :method", headers(1, _block(REQUEST[1:])), 1, PROTOCOL_ERROR),
    ("empty :path", headers(1, _block(REQUEST[:3] + [(":path", "")] + REQUEST[4:])), 1,
     PROTOCOL_ERROR),
    ("trailers with a pseudo-header", OPEN + frame(DATA, 0, 1, message(b"a"))
     + frame(HEADERS, END_HEADERS | END_STREAM, 1, _block([(":path", "/x")])), 1,
     PROTOCOL_ERROR),
    ("trailers without END_STREAM", OPEN + frame(DATA, 0, 1, message(b"a"))
     + frame(HEADERS, END_HEADERS, 1, _block([("x-t", "1")])), 1, PROTOCOL_ERROR),
    ("content-length not the DATA's", headers(1, _block(REQUEST + [("content-length", "99")]))
     + frame(DATA, END_STREAM, 1, message(b"a")), 1, PROTOCOL_ERROR),
]


@pytest.mark.parametrize("name, frames, sid, code", STREAM_ERRORS,
                         ids=[c[0] for c in STREAM_ERRORS])
def test_stream_error(port, name, frames, sid, code):
    peer = Peer(port)
    peer.send(frames)
    assert peer.rst(sid) == code, name
    # the connection goes on: a call on it is answered
    peer.send(call(11))
    peer.read_until(lambda fs: any(t == HEADERS and s == 11 and f & END_STREAM
                                   for t, f, s, _ in fs))
    assert not any(t == GOAWAY for t, *_ in peer.frames)
    peer.close()


@pytest.mark.parametrize("name, frames", [
    ("unknown frame type", frame(0x42, 0, 0, b"ignored") + frame(0x42, 0, 1, b"")),
    ("unknown setting", frame(SETTINGS, 0, 0, b"\x00\x99\x00\x00\x00\x01")),
    ("PRIORITY on an idle stream", frame(PRIORITY, 0, 9, b"\0\0\0\1\x10")),
    ("WINDOW_UPDATE on a closed stream", call(1) + frame(WINDOW_UPDATE, 0, 1, b"\0\0\0\1")),
    ("padded HEADERS and DATA", frame(HEADERS, PADDED | END_HEADERS, 1,
                                      b"\x03" + request_block() + b"\0\0\0")
     + frame(DATA, PADDED | END_STREAM, 1, b"\x02" + message(b"p") + b"\0\0")),
    ("a header block in CONTINUATION frames", frame(HEADERS, 0, 1, request_block()[:3])
     + frame(CONTINUATION, 0, 1, request_block()[3:6])
     + frame(CONTINUATION, END_HEADERS, 1, request_block()[6:])
     + frame(DATA, END_STREAM, 1, message(b"c"))),
])
def test_frames_that_are_accepted(port, name, frames):
    peer = Peer(port)
    peer.send(frames + frame(PING, 0, 0, b"pingpong") + call(21))
    peer.read_until(lambda fs: any(t == HEADERS and s == 21 and f & END_STREAM
                                   for t, f, s, _ in fs))
    assert (PING, ACK, 0, b"pingpong") in peer.frames
    assert not any(t in (GOAWAY, RST_STREAM) for t, *_ in peer.frames), peer.summary()
    if name.startswith(("padded", "a header block")):
        answered = [p for t, _, s, p in peer.frames if t == DATA and s == 1]
        assert answered and answered[0].startswith(b"\0\0\0\0")
    peer.close()


def test_settings_are_acknowledged_and_applied(port):
    peer = Peer(port)
    # a smaller initial window: a response larger than it waits for WINDOW_UPDATE
    peer.send(settings(initial_window_size=10)
              + headers(1, request_block("Echo", extra=[("x-size", "100")]))
              + frame(DATA, END_STREAM, 1, message(b"")))
    peer.read_until(lambda fs: sum(1 for t, f, *_ in fs if t == SETTINGS and f & ACK) >= 1
                    and any(t == DATA and s == 1 for t, _, s, _ in fs))
    assert [len(p) for t, _, s, p in peer.frames if t == DATA and s == 1] == [10]
    peer.send(frame(WINDOW_UPDATE, 0, 1, struct.pack(">I", 1000)))
    peer.read_until(lambda fs: any(t == HEADERS and s == 1 and f & END_STREAM
                                   for t, f, s, _ in fs))
    assert sum(len(p) for t, _, s, p in peer.frames if t == DATA and s == 1) == 105
    peer.close()


def test_goaway_from_the_client_closes_gracefully(port):
    peer = Peer(port)
    peer.send(frame(GOAWAY, 0, 0, b"\0\0\0\0\0\0\0\0"))
    assert peer.goaway()[0] == 0
    peer.until_closed()
    assert peer.eof


def _unary_read(sid: int, body: bytes, enc: Encoder, extra=()) -> bytes:
    """One call of the callback method Fast as one read: what the fast path takes."""
    return (frame(HEADERS, END_HEADERS, sid, request_block("Fast", enc, extra))
            + frame(DATA, END_STREAM, sid, message(body)))


def _answers(peer: Peer, sid: int) -> list:
    peer.read_until(lambda fs: any(t == HEADERS and s == sid and f & END_STREAM
                                   for t, f, s, _ in fs))
    return [(t, f, p) for t, f, s, p in peer.frames if s == sid]


@pytest.fixture()
def fast_path_calls(monkeypatch):
    from baton.serving.http2.connection import H2Connection

    taken = []
    unary = H2Connection._unary

    def counted(self, data):
        ok = unary(self, data)
        taken.append(ok)
        return ok

    monkeypatch.setattr(H2Connection, "_unary", counted)
    return taken


def test_the_unary_fast_path_answers_as_the_general_path(port, fast_path_calls):
    peer = Peer(port)
    enc = Encoder()
    for sid in (1, 3):  # the block that indexes the fields, then the indexed one
        peer.send(_unary_read(sid, b"a", enc))  # (each decoded: the general path)
        first = _answers(peer, sid)
    for sid in (5, 7):  # the indexed block again: the fast path
        peer.send(_unary_read(sid, b"a", enc))
        assert _answers(peer, sid) == first
    # the same call in two reads: the general path, the same answer
    block = request_block("Fast", enc)
    peer.send(frame(HEADERS, END_HEADERS, 9, block))
    time.sleep(0.05)
    peer.send(frame(DATA, END_STREAM, 9, message(b"a")))
    assert _answers(peer, 9) == first
    assert fast_path_calls.count(True) == 2
    assert first[1][2] == message(b"fast:a")


@pytest.mark.parametrize("name, frames, check", [
    ("a stream id that goes back", lambda enc: _unary_read(9, b"x", enc)
     + _unary_read(7, b"x", enc), "goaway"),
    ("a message over the limit", lambda enc: frame(HEADERS, END_HEADERS, 9,
                                                   request_block("Fast", enc))
     + frame(DATA, END_STREAM, 9, b"\0" + (1 << 20).to_bytes(4, "big") + b"x" * 100),
     "exhausted"),
    ("content-length that disagrees", lambda enc: _unary_read(
        9, b"xy", enc, extra=[("content-length", "6")]), "rst"),
    ("a compressed message without grpc-encoding", lambda enc: frame(
        HEADERS, END_HEADERS, 9, request_block("Fast", enc))
     + frame(DATA, END_STREAM, 9, b"\1\0\0\0\1x"), "unimplemented"),
])
def test_the_unary_fast_path_keeps_the_rules(port, name, frames, check):
    peer = Peer(port)
    enc = Encoder()
    extra = [("content-length", "6")] if check == "rst" else []
    for sid in (1, 3):  # the block is cached: the fast path is open
        peer.send(_unary_read(sid, b"w", enc, extra))
        _answers(peer, sid)
    if check == "goaway":
        peer.send(_unary_read(9, b"x", enc))
        _answers(peer, 9)
        peer.send(_unary_read(7, b"x", enc))
        assert peer.goaway()[0] == PROTOCOL_ERROR
        return
    peer.send(frames(enc))
    if check == "rst":
        assert peer.rst(9) == PROTOCOL_ERROR
        return
    trailers = [p for t, f, p in _answers(peer, 9) if t == HEADERS and f & END_STREAM]
    fields = dict(Decoder().decode(trailers[-1]))
    assert fields["grpc-status"] == ("8" if check == "exhausted" else "12"), fields
