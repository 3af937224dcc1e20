"""A connection error's GOAWAY reaches a peer that is still sending.

Was: the server wrote the GOAWAY and closed the socket at once. A flooding peer still had
bytes on the way, so the kernel answered RST and dropped what it had not yet sent: under
load (CI, load ~10) a SETTINGS flood's acks queued behind the congestion window and the
GOAWAY saying "more than 1000 frames that do no work" never arrived. Now the connection
half-closes after the GOAWAY, drops what still arrives and closes when the peer does or
after `Http2Limits.linger` seconds (1 s; baton.serving.http2.connection).
"""

from __future__ import annotations

import socket
import struct
import time

import pytest
from h2_raw import (
    ENHANCE_YOUR_CALM,
    FRAME_SIZE_ERROR,
    GOAWAY,
    PREFACE,
    SETTINGS,
    Peer,
    ServerProcess,
    frame,
)

from baton.serving.http2 import Http2Limits

LINGER_SECONDS = Http2Limits().linger

# a frame over SETTINGS_MAX_FRAME_SIZE: refused from its 9-byte header alone
_BAD = frame(0x42, 0, 0, b"x" * 20000)[:9]
_JUNK = b"\0" * 16384


@pytest.fixture()
def server(request):
    s = ServerProcess(**getattr(request, "param", {}))
    s.call()
    yield s
    s.stop()


def _read_to_end(sock: socket.socket, timeout: float) -> tuple[bytes, str]:
    """Everything the server sent, and how it ended: "fin", "reset" or "timeout"."""
    sock.settimeout(timeout)
    got = b""
    try:
        while chunk := sock.recv(1 << 16):
            got += chunk
    except ConnectionResetError:
        return got, "reset"
    except TimeoutError:
        return got, "timeout"
    return got, "fin"


def _goaway(data: bytes) -> tuple[int, bytes] | None:
    pos = 0
    while len(data) - pos >= 9:
        n = int.from_bytes(data[pos:pos + 3], "big")
        if data[pos + 3] == GOAWAY:
            payload = data[pos + 9:pos + 9 + n]
            return struct.unpack(">II", payload[:8])[1], payload[8:]
        pos += 9 + n
    return None


def test_the_goaway_reaches_a_peer_that_goes_on_sending_and_the_close_is_clean(server):
    peer = Peer(server.port)
    peer.sock.sendall(_BAD)
    t0 = time.monotonic()
    sent = 0
    while time.monotonic() - t0 < min(0.5, LINGER_SECONDS / 2):  # the peer goes on
        peer.sock.sendall(_JUNK)  # was: EPIPE / ECONNRESET once the server had closed
        sent += len(_JUNK)
    data, end = _read_to_end(peer.sock, timeout=10)
    assert sent > 0
    assert _goaway(data) is not None, data[-64:]
    code, debug = _goaway(data)
    assert code == FRAME_SIZE_ERROR and b"frame of 20000 bytes" in debug, debug
    assert end == "fin", end  # a FIN after the GOAWAY, not a reset
    peer.close()


def test_a_settings_flood_from_a_slow_reader_gets_every_ack_and_the_goaway(server):
    """CI's failure made certain: the peer's small receive window keeps the acks in the
    server's send queue when it closes. Was: 151 of 9,154 bytes arrived, no GOAWAY."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
    sock.connect(("127.0.0.1", server.port))
    sock.sendall(PREFACE + frame(SETTINGS, 0, 0) + frame(SETTINGS, 0, 0) * 5000)
    t0 = time.monotonic()
    while time.monotonic() - t0 < min(0.3, LINGER_SECONDS / 3):
        sock.sendall(b"\0" * 4096)  # the flood goes on
    data, end = _read_to_end(sock, timeout=10)
    sock.close()
    found = _goaway(data)
    assert found is not None, (len(data), end)
    assert found[0] == ENHANCE_YOUR_CALM and b"no work" in found[1], found


def test_a_peer_that_never_stops_sending_is_cut_off_after_the_linger(server):
    peer = Peer(server.port)
    peer.sock.sendall(_BAD)
    t0 = time.monotonic()
    with pytest.raises(OSError):  # the server closes: the sends fail (RST)
        while time.monotonic() - t0 < LINGER_SECONDS + 20:
            peer.sock.sendall(_JUNK)
    held = time.monotonic() - t0
    assert held < LINGER_SECONDS + 10, held
    data, _ = _read_to_end(peer.sock, timeout=1)
    peer.close()
    # the server still answers, and its linger left nothing behind
    assert server.call() == b"ko"  # the echo service reverses


def test_the_server_stops_at_once_beside_a_lingering_connection(server):
    peer = Peer(server.port)
    peer.sock.sendall(_BAD)
    assert _goaway(peer.sock.recv(1 << 16) + _read_to_end(peer.sock, 0.2)[0])
    t0 = time.monotonic()
    rc, err = server.stop()
    assert rc == 0, err
    assert time.monotonic() - t0 < 10
    peer.close()


@pytest.mark.parametrize("server", [{"limits": {"linger": 30.0}, "max_connections": 2}],
                         indirect=True)
def test_an_eviction_at_the_connection_cap_ends_a_linger_at_once(server):
    """A lingering socket must not hold a descriptor past its place in the table."""
    server.channel.close()
    lingering = Peer(server.port)
    lingering.sock.sendall(_BAD)
    assert _goaway(lingering.sock.recv(1 << 16) + _read_to_end(lingering.sock, 0.2)[0])
    # linger 30 s: the socket is still open (a FIN came, the server reads what we send)
    lingering.sock.sendall(_JUNK)
    other = Peer(server.port)
    other.send(frame(SETTINGS, 0, 0, b""))
    # a third connection at the cap of 2: the lingering one (idle) is evicted and closed
    t0 = time.monotonic()
    third = Peer(server.port)
    with pytest.raises(OSError):
        while time.monotonic() - t0 < 20:
            lingering.sock.sendall(_JUNK)
            time.sleep(0.01)
    assert time.monotonic() - t0 < 15  # not the 30 s linger
    for p in (lingering, other, third):
        p.close()


def test_the_linger_is_a_checked_limit():
    with pytest.raises(ValueError, match=r"Http2Limits.linger .*linger=-1"):
        Http2Limits(linger=-1)
