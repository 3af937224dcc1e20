"""A REST client that pipelines requests and does not read its answers.

Was: every pipelined request was answered into the transport's buffer whether or not the
peer read, so a client sending GETs and never reading grew `baton serve` by about 60 MiB
a second (582 -> 1476 MiB in 15 s against the benchmark MLP). Now an answer waits while
the transport says the peer is not reading (pause_writing); the queue behind it pauses
reading at MAX_PIPELINE; a peer that takes none of its answers for DRAIN_TIMEOUT seconds
is reset; and a close (idle, refused) no longer waits for ever on a peer that never reads.
"""

from __future__ import annotations

import socket
import time

import pytest
from rest_loop_server import RestServer

from baton.serving import http as http_mod
from baton.serving.server import new_event_loop

ANSWER = b"a" * (16 << 10)
GET = b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n"


class _Rest(RestServer):
    """Answers 16 KiB at once, on uvloop or asyncio (BATON_SERVING_UVLOOP)."""

    def __init__(self):
        super().__init__(answer=ANSWER, new_loop=new_event_loop)

    def buffered(self) -> int:
        """Bytes of answers waiting in the server's transports."""
        return self.on_loop(lambda: sum(c.transport.get_write_buffer_size()
                                        for c in self.state.connections
                                        if c.transport is not None))


@pytest.fixture(params=["1", "0"], ids=["uvloop", "asyncio"])
def rest(request, monkeypatch):
    monkeypatch.setenv("BATON_SERVING_UVLOOP", request.param)
    r = _Rest()
    yield r
    r.close()


def _pipeline(port: int, n: int) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    s.sendall(GET * n)
    return s


def _read_answers(s: socket.socket, n: int, per_tick: int = 0, tick: float = 0.1) -> int:
    """Reads until `n` answers came (per_tick bytes every tick when given); how many did."""
    s.settimeout(10)
    buf, got = b"", 0
    head = b"HTTP/1.1 200"
    while got < n:
        if per_tick:
            time.sleep(tick)
        taken = 0
        while not per_tick or taken < per_tick:
            chunk = s.recv(65536)
            if not chunk:
                return got
            buf += chunk
            taken += len(chunk)
            got += buf.count(head)
            buf = buf[buf.rfind(head) + len(head):] if head in buf else buf[-len(head):]
            if got >= n:
                break
    return got


def test_answers_wait_for_a_peer_that_does_not_read_and_none_is_lost(rest):
    s = _pipeline(rest.port, 1000)  # 16 MiB of answers asked for
    time.sleep(1.0)
    assert rest.buffered() < 1 << 20, rest.buffered()  # was: ~16 MiB
    assert _read_answers(s, 1000) == 1000  # then read: every answer, in turn
    s.close()


def test_a_peer_that_takes_nothing_is_reset_after_the_drain_timeout(rest, monkeypatch):
    monkeypatch.setattr(http_mod, "DRAIN_TIMEOUT", 0.3)
    s = _pipeline(rest.port, 1000)
    paused = lambda: [c for c in rest.state.connections if c._write_paused]  # noqa: E731
    deadline = time.monotonic() + 10
    while not rest.on_loop(paused):  # answers wait: the peer reads nothing
        assert time.monotonic() < deadline
        time.sleep(0.02)
    while rest.on_loop(lambda: len(rest.state.connections)):
        assert time.monotonic() < deadline, "a peer that reads nothing keeps its connection"
        time.sleep(0.05)
    with pytest.raises(ConnectionResetError):
        s.settimeout(10)
        while s.recv(1 << 20):
            pass
    s.close()


def test_a_slow_reader_gets_every_answer(rest, monkeypatch):
    """Progress, not time: taking some answers within every DRAIN_TIMEOUT is enough."""
    monkeypatch.setattr(http_mod, "DRAIN_TIMEOUT", 0.3)
    s = _pipeline(rest.port, 300)  # 4.8 MiB, read at about 2.5 MiB a second
    t0 = time.monotonic()
    assert _read_answers(s, 300, per_tick=256 << 10) == 300
    assert time.monotonic() - t0 > 3 * 0.3
    s.close()


def test_an_idle_close_of_a_peer_that_never_reads_gives_its_descriptor_back(rest,
                                                                           monkeypatch):
    monkeypatch.setattr(http_mod, "DRAIN_TIMEOUT", 0.3)
    s = _pipeline(rest.port, 3)  # answered into the kernel's and our buffers
    time.sleep(0.3)
    conns = rest.on_loop(lambda: list(rest.state.connections))
    assert len(conns) == 1
    transport = conns[0].transport

    def idle_close():
        rest.table.discard(conns[0])
        conns[0].busy = False
        conns[0].queue.clear()
        conns[0].close_idle()
    rest.on_loop(idle_close)
    deadline = time.monotonic() + 10
    while not rest.on_loop(transport.is_closing) or rest.on_loop(
            lambda: transport.get_extra_info("socket") is not None
            and transport.get_write_buffer_size() > 0):
        assert time.monotonic() < deadline, "the socket still waits on a peer that never reads"
        time.sleep(0.05)
    s.close()
