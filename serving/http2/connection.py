"""One HTTP/2 connection: its life, frames in, and where they go.

Input is buffered linearly: bytes of an unfinished frame are kept as a list of chunks and
joined once the frame is whole, so a frame arriving a byte at a time costs its length,
never its length squared. A frame's length is checked against SETTINGS_MAX_FRAME_SIZE,
and what its type allows (receive.py), as soon as its 9-byte header is in, before its
payload is buffered. A connection error is one GOAWAY with the code and a short reason,
one log line (rate-limited by the server), and the connection closed after a linger
(below); a bug in handling a frame is the same with INTERNAL_ERROR, never a traceback per
connection.

The linger: a peer that broke the protocol is often still sending (a flood). Closing a
socket with unread input makes the kernel answer RST and drop what it has not yet
transmitted, so the GOAWAY that says why could be lost; under load a flood's replies queue
behind the congestion window and it was. So after a connection error the connection is
over at once (no frame is read, nothing more is written, its calls are cancelled), the
GOAWAY is followed by a FIN, what still arrives is dropped, and the socket closes when the
peer closes or after `limits.linger` (1 s): Go's HTTP/2 server waits likewise (goAwayTimeout),
as nginx does with lingering_close.

When the peer does not read, our writes pause our reading (pause_writing), so nothing it
provokes piles up in memory. Idle connections (no open stream) are closed by the
ConnectionTable's sweep after `idle_timeout` (GOAWAY "idle"); one whose preface is not
complete after `handshake_timeout` is closed by its own timer.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Any

from baton.serving.connections import close_when_drained
from baton.serving.http2 import frames as f
from baton.serving.http2.hpack import Decoder
from baton.serving.http2.limits import WindowCounter
from baton.serving.http2.receive import H2ConnectionError, Receiver
from baton.serving.http2.send import Sender
from baton.serving.http2.stream import Stream

log = logging.getLogger("baton.serving.http2")
DEADLINE_EXCEEDED = 4
_UNARY_HEAD = bytes((f.HEADERS, f.END_HEADERS))  # a unary call's frames, as _unary reads
_UNARY_TAIL = bytes((f.DATA, f.END_STREAM))


class H2Connection(Receiver, Sender, asyncio.Protocol):
    """One HTTP/2 connection of a GrpcServer (which dispatches its requests)."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.limits = lim = server.limits
        self.loop = server.loop
        self.transport = None
        self.peer = ""
        self._parts: list[bytes] = []  # an unfinished frame (or preface), in chunks
        self._held = 0
        self._need = 24  # bytes wanted before parsing again
        self.preface = False
        self.settings_seen = False
        self.decoder = Decoder(lim.max_header_list_size)
        self.streams: dict[int, Stream] = {}
        self.last_sid = 0
        self.send_window = f.DEFAULT_WINDOW
        self.peer_initial_window = f.DEFAULT_WINDOW
        self.peer_frame_size = f.DEFAULT_FRAME_SIZE
        self.recv_window = lim.connection_window  # we open it at once (connection_made)
        self.stream_window = server.stream_window  # our SETTINGS_INITIAL_WINDOW_SIZE
        self.recv_unacked = 0
        self.headers_sid = 0  # a header block waiting for CONTINUATION
        self.headers_parts: list[bytes] = []
        self.headers_size = 0
        self.headers_flags = 0
        self.headers_self_dependent = False
        self.continuations = 0
        self.goaway_sent = False
        self.waiting: list[Stream] = []  # streams with data blocked on the window
        self.held = 0  # bytes of this connection's unfinished messages
        self.recently_closed: collections.deque[int] = collections.deque(maxlen=32)
        self.handshake_timer: asyncio.TimerHandle | None = None
        self.resets = WindowCounter(lim.max_resets, lim.reset_window)
        self.ping_strikes = 0
        self.last_ping = -1e18
        self.worked = True  # a response went out since the last PING
        self.idle_frames = 0
        self.idle_timeout = lim.idle_timeout  # for the ConnectionTable
        self.lingering: Any = None  # the transport of a failed connection, until it closes
        self._linger_timer: asyncio.TimerHandle | None = None

    # -- connection ------------------------------------------------------------------
    def connection_made(self, transport):
        self.transport = transport
        self.server.table.add(self)
        self.server.connections.add(self)
        name = transport.get_extra_info("peername")
        if isinstance(name, tuple):
            host = name[0]
            self.peer = (f"ipv6:[{host}]:{name[1]}" if ":" in host
                         else f"ipv4:{host}:{name[1]}")
        else:
            self.peer = f"unix:{name or self.server.unix_path}"
        transport.write(f.settings_frame(self.server.settings) + f.window_update(
            0, self.limits.connection_window - f.DEFAULT_WINDOW))
        if self.limits.handshake_timeout:
            self.handshake_timer = self.loop.call_later(self.limits.handshake_timeout,
                                                        self._handshake_expired)
        if self.server.closing:
            self.goaway()

    def _handshake_expired(self) -> None:
        """No complete client preface in time: a connection that only holds a slot."""
        self.handshake_timer = None
        if self.transport is None:
            return
        if self.preface:  # an HTTP/2 peer that never sent SETTINGS: tell it why
            self.fail(f.PROTOCOL_ERROR, "handshake timed out: no SETTINGS")
        else:  # not (yet) HTTP/2: a GOAWAY would mean nothing to it
            log.debug("HTTP/2 connection from %s closed: no preface within %ss", self.peer,
                      self.limits.handshake_timeout)
            self._close()

    def connection_lost(self, exc):
        if self.handshake_timer is not None:
            self.handshake_timer.cancel()
            self.handshake_timer = None
        if self._linger_timer is not None:
            self._linger_timer.cancel()
            self._linger_timer = None
        self.lingering = None
        self.server.table.discard(self)
        self.server.connections.discard(self)
        for s in list(self.streams.values()):
            self.abandon(s)
        self.streams.clear()
        self.waiting = []
        self._parts = []
        self.headers_parts = []
        self.transport = None

    def pause_writing(self):
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self):
        if self.transport is not None:
            self.transport.resume_reading()

    def _close(self) -> None:
        if self.transport is not None:
            self._close_within(self.transport, self.limits.drain_timeout)
        self._parts = []
        self._held = 0

    def _close_within(self, transport: Any, stall: float) -> None:
        close_when_drained(transport, self.loop, stall, self.peer)

    def fail(self, code: int, why: str) -> None:
        """A connection error: GOAWAY with the code and reason, one log line, close."""
        self.server.log_violation("HTTP/2 connection from %s closed: %s (%s)", self.peer,
                                  f.ERROR_NAMES.get(code, code), why)
        if self.transport is not None:
            self.transport.write(f.goaway(self.last_sid, code, why.encode()[:200]))
            self._linger()

    def _linger(self) -> None:
        """Ends the connection but keeps its socket until the peer has the GOAWAY (the
        module docstring says why): FIN after it, input dropped, closed when the peer
        closes or after `limits.linger` seconds."""
        transport, self.transport = self.transport, None  # every path sees it closed
        if self.handshake_timer is not None:
            self.handshake_timer.cancel()
            self.handshake_timer = None
        for s in list(self.streams.values()):
            self.abandon(s)
        self.waiting = []
        self._parts = []
        self._held = 0
        self.lingering = transport
        try:
            if transport.can_write_eof():  # TLS cannot half-close; the wait alone helps
                transport.write_eof()
            transport.resume_reading()  # paused by a peer that did not read: drain it
        except (OSError, RuntimeError):
            transport.close()
            return
        if not self.limits.linger:
            self._close_within(transport, 0)
            return
        self._linger_timer = self.loop.call_later(self.limits.linger, self._close_within,
                                                  transport, 0)

    def close_now(self) -> None:
        """Closes the socket now, lingering or not (the server stops)."""
        for transport in (self.transport, self.lingering):
            if transport is not None:
                transport.close()

    def goaway(self, debug: bytes = b"") -> None:
        """Graceful: the streams opened so far finish, new ones are refused."""
        if not self.goaway_sent and self.transport is not None:
            self.goaway_sent = True
            self.transport.write(f.goaway(self.last_sid, f.NO_ERROR, debug))
            if not self.streams:
                self._close()

    def close_idle(self) -> None:
        """Idle for too long, or evicted at the connection cap: GOAWAY, then close (a
        lingering connection at once: its descriptor must not outlive its place)."""
        if self.lingering is not None:
            self._close_within(self.lingering, 0)
            return
        self.goaway(b"idle")
        self._close()

    # -- the ConnectionTable's hooks: progress, active, receiving, check_receive ---------
    @property
    def progress(self) -> int:
        return self.last_sid

    def active(self) -> bool:
        return bool(self.streams)

    def receiving(self) -> bool:
        return any(not s.remote_closed for s in self.streams.values())

    def check_receive(self, seconds: float) -> None:
        """Requests still arriving `request_timeout` after the sweep first saw them, with
        no new stream since: answered DEADLINE_EXCEEDED and reset (a client cannot hold
        a stream, and its buffered bytes, by never ending its request)."""
        limit = self.limits.request_timeout
        if not limit or seconds <= limit:
            return
        for s in [s for s in self.streams.values() if not s.remote_closed]:
            self.server.answer(s, DEADLINE_EXCEEDED, f"the request did not arrive within "
                                                     f"{limit:g} s")

    def maybe_close(self) -> None:
        if self.goaway_sent and not self.streams and self.transport is not None:
            self._close()

    def useful_work(self) -> None:
        self.worked = True
        self.idle_frames = 0

    # -- frames in -------------------------------------------------------------------
    def data_received(self, data: bytes):
        if self.transport is None:
            return None
        if not self._held and data[3:5] == _UNARY_HEAD and self._unary(data):
            return None
        if self._held:
            self._parts.append(data)
            self._held += len(data)
            if self._held < self._need:
                return None
            data = b"".join(self._parts)
            self._parts = []
            self._held = 0
        if not self.preface:
            if len(data) < 24:
                if not f.PREFACE.startswith(data):
                    return self.fail(f.PROTOCOL_ERROR, "not HTTP/2")
                self._parts, self._held, self._need = [data], len(data), 24
                return None
            if data[:24] != f.PREFACE:
                return self.fail(f.PROTOCOL_ERROR, "not HTTP/2")
            self.preface = True
            data = data[24:]
        pos, n = 0, len(data)
        limit = self.limits.max_frame_size
        while True:
            if n - pos < 9:
                self._need = 9
                break
            length = (data[pos] << 16) | (data[pos + 1] << 8) | data[pos + 2]
            ftype = data[pos + 3]
            end = pos + 9 + length
            if length > limit:
                return self.fail(f.FRAME_SIZE_ERROR, f"frame of {length} bytes, "
                                                     f"SETTINGS_MAX_FRAME_SIZE is {limit}")
            if end > n:
                self._need = 9 + length
                try:  # refuse what can be refused before its payload is buffered
                    self._check_length(ftype, length)
                except H2ConnectionError as e:
                    return self.fail(e.code, str(e))
                break
            flags = data[pos + 4]
            sid = int.from_bytes(data[pos + 5:pos + 9], "big") & 0x7FFFFFFF
            payload = data[pos + 9:end]
            pos = end
            try:
                if self.headers_sid and ftype != f.CONTINUATION:
                    raise H2ConnectionError(f.PROTOCOL_ERROR, f"{f.FRAME_NAMES.get(ftype, ftype)}"
                                           " inside a header block")
                if not self.settings_seen and ftype != f.SETTINGS:
                    raise H2ConnectionError(f.PROTOCOL_ERROR, "the first frame is not "
                                                             "SETTINGS")
                self._frame(ftype, flags, sid, payload)
            except H2ConnectionError as e:
                return self.fail(e.code, str(e))
            except Exception as e:  # noqa: BLE001 - a bug must not cost the whole server
                log.debug("HTTP/2 frame handling failed", exc_info=True)
                return self.fail(f.INTERNAL_ERROR, f"{f.FRAME_NAMES.get(ftype, ftype)} "
                                                   f"frame: {type(e).__name__}: {e}")
            if self.transport is None or self.transport.is_closing():
                self._parts = []
                return None
        if pos < n:
            self._parts, self._held = [data[pos:]], n - pos
        return None


    def _unary(self, data: bytes) -> bool:
        """A read that is exactly one whole unary call of a callback method (HEADERS
        with END_HEADERS only, a header block seen before, DATA with END_STREAM only
        carrying one uncompressed message): every rule the general path applies is
        checked first and nothing changes unless all hold (else False: the general path
        reads it). It is what a client repeating a call sends, as h2load and grpc
        clients do, and costs half the general path.
        """
        hl = (data[0] << 16) | (data[1] << 8) | data[2]
        d = 9 + hl
        n = len(data)
        if n < d + 14 or data[d + 3:d + 5] != _UNARY_TAIL or not self.settings_seen \
                or self.headers_sid or self.goaway_sent:
            return False
        dl = (data[d] << 16) | (data[d + 1] << 8) | data[d + 2]
        sid = int.from_bytes(data[5:9], "big") & 0x7FFFFFFF
        lim = self.limits
        if (d + 9 + dl != n or hl > lim.max_frame_size or dl > lim.max_frame_size
                or not sid & 1 or sid <= self.last_sid
                or int.from_bytes(data[d + 5:d + 9], "big") & 0x7FFFFFFF != sid
                or dl > self.recv_window or dl > self.stream_window
                or data[d + 9] or int.from_bytes(data[d + 10:d + 14], "big") != dl - 5
                or dl - 5 > self.server.max_receive):
            return False
        cap = lim.max_concurrent_streams
        if cap is not None and len(self.streams) >= cap:
            return False
        request = self.decoder.cached(data[9:d])
        if (request is None or request.timeout is not None or request.method != b"POST"
                or request.content_length not in (-1, dl)
                or not request.content_type.startswith(b"application/grpc")):
            return False
        handler = self.server.callback(request.path)
        if handler is None:
            return False
        self.last_sid = sid
        self.recv_window -= dl
        s = Stream(self, sid, request, self.peer_initial_window, self.stream_window - dl)
        s.remote_closed = True
        self.streams[sid] = s
        self._consumed(dl)
        self.server.start(s, handler, True, data[d + 14:])
        return True

    # -- streams ending ----------------------------------------------------------------
    def abandon(self, s: Stream) -> None:
        """The client reset the stream, or the connection is gone: its call is cancelled."""
        self.end_stream(s)
        if s.task is not None and not s.task.done():
            s.task.cancel()

    def release(self, s: Stream) -> None:
        """Gives back the stream's buffered bytes and its place among calls in flight."""
        if s.closed:
            self.recently_closed.append(s.sid)
        if s.held:
            self.server.buffers.give(s.held)
            self.held -= s.held
            s.held = 0
        s.body = bytearray()
        if s.counted:
            s.counted = False
            self.server.call_ended()
