"""What each frame type does to an HTTP/2 connection and its streams (RFC 9113 6).

Stream ids and states (idle, open, half-closed remote, closed) decide what a frame may
do: a frame that breaks a rule of the connection's state (an idle stream's DATA, an id
that goes back, a bad window or SETTINGS value, malformed HPACK) is a connection error,
one that concerns a stream only (a malformed request, DATA after END_STREAM, a
self-dependency) a stream error. Header blocks are gathered from CONTINUATION frames as
a list, within the header list size and the CONTINUATION budget, and decoded once.
Frames that do no work count against a budget that each response restarts; PINGs have
grpc core's strikes; client resets of open streams their own budget (limits.py).
"""

from __future__ import annotations

import collections
import logging
import struct
from collections.abc import Callable
from typing import Any

from baton.serving.http2 import frames as f
from baton.serving.http2.headers import MalformedHeaders, check_trailers, parse_request
from baton.serving.http2.hpack import CompressionError, Decoder, HeaderListTooLarge
from baton.serving.http2.limits import Http2Limits, WindowCounter
from baton.serving.http2.stream import Stream

log = logging.getLogger("baton.serving.http2")

_FIXED_SIZE = {f.PRIORITY: 5, f.RST_STREAM: 4, f.PING: 8, f.WINDOW_UPDATE: 4}
_FRAMING = 261  # what padding and priority fields may add to a header block fragment


class ConnectionError_(Exception):  # noqa: N801, N818 - an HTTP/2 connection error
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def _unpad(payload: bytes, fixed: int = 0) -> bytes:
    """A PADDED frame's payload without its pad length, `fixed` header bytes kept."""
    if not payload:
        raise ConnectionError_(f.PROTOCOL_ERROR, "PADDED frame without a pad length")
    pad = payload[0]
    if pad + fixed >= len(payload):  # RFC 9113 6.1: padding as long as the payload
        raise ConnectionError_(f.PROTOCOL_ERROR, f"padding of {pad} bytes in a frame of "
                                                 f"{len(payload)}")
    return payload[1:len(payload) - pad]



class Receiver:
    """Mixin of H2Connection, which provides the attributes and hooks declared here."""

    server: Any
    limits: Http2Limits
    loop: Any
    transport: Any
    peer: str
    decoder: Decoder
    streams: dict[int, Stream]
    last_sid: int
    send_window: int
    peer_initial_window: int
    peer_frame_size: int
    recv_window: int
    recv_unacked: int
    stream_window: int
    headers_sid: int
    headers_parts: list[bytes]
    headers_size: int
    headers_flags: int
    headers_self_dependent: bool
    continuations: int
    goaway_sent: bool
    settings_seen: bool
    handshake_timer: Any
    waiting: list[Stream]
    recently_closed: collections.deque[int]
    resets: WindowCounter
    ping_strikes: int
    last_ping: float
    worked: bool
    idle_frames: int
    goaway: Callable[..., None]
    abandon: Callable[[Stream], None]
    maybe_close: Callable[[], None]
    flush_waiting: Callable[[], None]

    def _idle_frame(self, what: str) -> None:
        self.idle_frames += 1
        if self.idle_frames > self.limits.max_idle_frames:
            raise ConnectionError_(f.ENHANCE_YOUR_CALM,
                                   f"more than {self.limits.max_idle_frames} frames that do "
                                   f"no work between two responses (last: {what})")


    def _check_length(self, ftype: int, length: int) -> None:
        """Errors a frame's length alone shows (its payload still to come)."""
        if ftype == f.DATA:
            if length > self.recv_window:
                raise ConnectionError_(f.FLOW_CONTROL_ERROR,
                                       f"DATA of {length} bytes, window {self.recv_window}")
        elif ftype == f.HEADERS or ftype == f.CONTINUATION:
            if self.headers_size + length > self.limits.max_header_list_size + _FRAMING:
                raise ConnectionError_(f.ENHANCE_YOUR_CALM, "header block larger than "
                                       "SETTINGS_MAX_HEADER_LIST_SIZE")
        elif ftype in _FIXED_SIZE or ftype == f.SETTINGS:
            self._check_fixed(ftype, length)
        elif ftype > f.CONTINUATION and length > f.DEFAULT_FRAME_SIZE:
            raise ConnectionError_(f.ENHANCE_YOUR_CALM, f"unknown frame type {ftype} of "
                                                        f"{length} bytes")

    @staticmethod
    def _check_fixed(ftype: int, length: int) -> None:
        want = _FIXED_SIZE.get(ftype)
        if want is not None and length != want and ftype != f.PRIORITY:
            raise ConnectionError_(f.FRAME_SIZE_ERROR,
                                   f"{f.FRAME_NAMES[ftype]} of {length} bytes, not {want}")
        if ftype == f.SETTINGS and (length % 6 or length > 600):
            raise ConnectionError_(f.FRAME_SIZE_ERROR, f"SETTINGS of {length} bytes")

    def _frame(self, ftype: int, flags: int, sid: int, payload: bytes) -> None:
        if ftype == f.DATA:
            self._data(flags, sid, payload)
        elif ftype == f.HEADERS:
            self._headers(flags, sid, payload)
        elif ftype == f.CONTINUATION:
            self._continuation(flags, sid, payload)
        elif ftype == f.WINDOW_UPDATE:
            self._window_update(sid, payload)
        elif ftype == f.RST_STREAM:
            self._rst_stream(sid, payload)
        elif ftype == f.SETTINGS:
            self._settings(flags, sid, payload)
        elif ftype == f.PING:
            self._ping(flags, sid, payload)
        elif ftype == f.PRIORITY:
            self._priority(sid, payload)
        elif ftype == f.GOAWAY:
            if sid or len(payload) < 8:
                raise ConnectionError_(f.PROTOCOL_ERROR if sid else f.FRAME_SIZE_ERROR,
                                       "malformed GOAWAY")
            self.goaway()
        elif ftype == f.PUSH_PROMISE:
            raise ConnectionError_(f.PROTOCOL_ERROR, "PUSH_PROMISE from a client")
        else:  # unknown frame types are ignored (RFC 9113 5.5), within the budget
            self._idle_frame(f"type {ftype}")

    def _stream_error(self, sid: int, code: int, why: str) -> None:
        """RST_STREAM: the stream ends, the connection goes on."""
        log.debug("HTTP/2 stream %d of %s reset: %s (%s)", sid, self.peer,
                  f.ERROR_NAMES.get(code, code), why)
        s = self.streams.get(sid)
        if s is not None:
            self.abandon(s)
        if self.transport is not None:
            self.transport.write(f.rst_stream(sid, code))
        self._idle_frame("a stream error")

    def _closed_or_idle(self, sid: int, what: str) -> None:
        """A frame for a stream we do not have: idle (never opened) is a connection
        error; closed (we answered or reset it) is ignored, within the budget."""
        if sid > self.last_sid or not sid & 1:
            raise ConnectionError_(f.PROTOCOL_ERROR, f"{what} on idle stream {sid}")
        self._idle_frame(f"{what} on a closed stream")

    # -- DATA --------------------------------------------------------------------------
    def _data(self, flags: int, sid: int, payload: bytes) -> None:
        n = len(payload)  # the padding counts against the windows too
        if not sid:
            raise ConnectionError_(f.PROTOCOL_ERROR, "DATA on stream 0")
        if n > self.recv_window:
            raise ConnectionError_(f.FLOW_CONTROL_ERROR,
                                   f"DATA of {n} bytes, connection window {self.recv_window}")
        self.recv_window -= n
        if flags & f.PADDED:
            payload = _unpad(payload)
        s = self.streams.get(sid)
        if s is None or s.closed:
            self._consumed(n)
            return self._closed_or_idle(sid, "DATA")
        if s.remote_closed:
            self._consumed(n)
            return self._stream_error(sid, f.STREAM_CLOSED, "DATA after END_STREAM")
        if n > s.recv_window:
            raise ConnectionError_(f.FLOW_CONTROL_ERROR, f"DATA of {n} bytes on stream "
                                                         f"{sid}, window {s.recv_window}")
        s.recv_window -= n
        end = flags & f.END_STREAM
        if payload:
            self.server.receive(self, s, payload)
        elif not end:
            self._idle_frame("empty DATA")
        self._consumed(n)
        if s.closed:
            return None
        if end:
            s.remote_closed = True
            return self._request_complete(s)
        s.recv_unacked += n
        if s.recv_unacked >= self.stream_window // 2:
            # credit for what was consumed, as far as the message may still grow
            room = self.server.max_receive + 5 - len(s.body) - s.recv_window
            grant = min(s.recv_unacked, room)
            s.recv_unacked = 0
            if grant > 0:
                s.recv_window += grant
                self.transport.write(f.window_update(sid, grant))
        return None

    def _consumed(self, n: int) -> None:
        """Returns connection window for bytes taken into a message or discarded."""
        self.recv_unacked += n
        if self.recv_unacked >= self.limits.connection_window // 2:
            self.recv_window += self.recv_unacked
            if self.transport is not None:
                self.transport.write(f.window_update(0, self.recv_unacked))
            self.recv_unacked = 0

    # -- header blocks -----------------------------------------------------------------
    def _headers(self, flags: int, sid: int, payload: bytes) -> None:
        if not sid or not sid & 1:
            raise ConnectionError_(f.PROTOCOL_ERROR, f"HEADERS on stream {sid}")
        if flags & f.PADDED:
            payload = _unpad(payload, 5 if flags & f.PRIORITY_FLAG else 0)
        self_dependent = False
        if flags & f.PRIORITY_FLAG:
            if len(payload) < 5:
                raise ConnectionError_(f.FRAME_SIZE_ERROR, "HEADERS too short for PRIORITY")
            self_dependent = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF == sid
            payload = payload[5:]
        if len(payload) > self.limits.max_header_list_size:
            raise ConnectionError_(f.ENHANCE_YOUR_CALM, "header block larger than "
                                                        "SETTINGS_MAX_HEADER_LIST_SIZE")
        if flags & f.END_HEADERS:
            self._header_block(sid, flags, payload, self_dependent)
            return
        self.headers_sid, self.headers_flags = sid, flags
        self.headers_parts, self.headers_size = [payload], len(payload)
        self.headers_self_dependent = self_dependent
        self.continuations = 0

    def _continuation(self, flags: int, sid: int, payload: bytes) -> None:
        if not self.headers_sid or sid != self.headers_sid:
            raise ConnectionError_(f.PROTOCOL_ERROR, "CONTINUATION without a header block")
        self.continuations += 1
        if self.continuations > self.limits.max_continuation_frames:
            raise ConnectionError_(f.ENHANCE_YOUR_CALM, f"a header block in more than "
                                   f"{self.limits.max_continuation_frames} CONTINUATION "
                                   "frames")
        self.headers_size += len(payload)
        if self.headers_size > self.limits.max_header_list_size:
            raise ConnectionError_(f.ENHANCE_YOUR_CALM, "header block larger than "
                                                        "SETTINGS_MAX_HEADER_LIST_SIZE")
        self.headers_parts.append(payload)
        if flags & f.END_HEADERS:
            block = b"".join(self.headers_parts)
            self.headers_parts, self.headers_sid, self.headers_size = [], 0, 0
            self._header_block(sid, self.headers_flags, block, self.headers_self_dependent)

    def _decode(self, block: bytes, convert):
        try:
            return self.decoder.decode(block, convert)
        except CompressionError as e:
            raise ConnectionError_(f.COMPRESSION_ERROR, str(e)) from None
        except HeaderListTooLarge as e:
            raise ConnectionError_(f.ENHANCE_YOUR_CALM, str(e)) from None

    def _header_block(self, sid: int, flags: int, block: bytes, self_dependent: bool) -> None:
        s = self.streams.get(sid)
        if s is not None:  # trailers: the request's end
            try:
                self._decode(block, check_trailers)
            except MalformedHeaders as e:
                return self._stream_error(sid, f.PROTOCOL_ERROR, str(e))
            if s.remote_closed:
                return self._stream_error(sid, f.STREAM_CLOSED, "HEADERS after END_STREAM")
            if not flags & f.END_STREAM:
                return self._stream_error(sid, f.PROTOCOL_ERROR, "trailers without "
                                                                 "END_STREAM")
            s.remote_closed = True
            return self._request_complete(s)
        if sid <= self.last_sid:
            if sid in self.recently_closed:  # RFC 9113 5.1, "closed"
                raise ConnectionError_(f.STREAM_CLOSED, f"HEADERS on closed stream {sid}")
            # RFC 9113 5.1.1: stream ids increase
            raise ConnectionError_(f.PROTOCOL_ERROR, f"stream id {sid} after {self.last_sid}")
        self.last_sid = sid
        try:
            request = self._decode(block, parse_request)
        except MalformedHeaders as e:
            return self._stream_error(sid, f.PROTOCOL_ERROR, f"malformed request: {e}")
        if self_dependent:
            return self._stream_error(sid, f.PROTOCOL_ERROR, "stream depends on itself")
        cap = self.limits.max_concurrent_streams
        if self.goaway_sent or (cap is not None and len(self.streams) >= cap):
            # RFC 9113 5.1.2: beyond the advertised limit, REFUSED_STREAM (retryable)
            self._idle_frame("a refused stream")
            self.transport.write(f.rst_stream(sid, f.REFUSED_STREAM))
            return None
        s = Stream(self, sid, request, self.peer_initial_window, self.stream_window)
        self.streams[sid] = s
        if flags & f.END_STREAM:
            s.remote_closed = True
            self._request_complete(s)
        return None

    def _request_complete(self, s: Stream) -> None:
        cl = s.request.content_length
        if cl >= 0 and cl != len(s.body):
            # RFC 9113 8.1.1: content-length that disagrees with the DATA is malformed
            return self._stream_error(s.sid, f.PROTOCOL_ERROR, "content-length mismatch")
        self.server.dispatch(self, s)
        return None

    # -- control frames ----------------------------------------------------------------
    def _window_update(self, sid: int, payload: bytes) -> None:
        self._check_fixed(f.WINDOW_UPDATE, len(payload))
        inc = int.from_bytes(payload, "big") & 0x7FFFFFFF
        if sid == 0:
            if not inc:
                raise ConnectionError_(f.PROTOCOL_ERROR, "WINDOW_UPDATE of 0")
            self.send_window += inc
            if self.send_window > f.MAX_WINDOW:
                raise ConnectionError_(f.FLOW_CONTROL_ERROR, "connection window overflow")
        else:
            s = self.streams.get(sid)
            if s is None:
                return self._closed_or_idle(sid, "WINDOW_UPDATE")
            if not inc:
                return self._stream_error(sid, f.PROTOCOL_ERROR, "WINDOW_UPDATE of 0")
            s.send_window += inc
            if s.send_window > f.MAX_WINDOW:
                return self._stream_error(sid, f.FLOW_CONTROL_ERROR, "window overflow")
        if self.waiting:
            self.flush_waiting()
        return None

    def _rst_stream(self, sid: int, payload: bytes) -> None:
        self._check_fixed(f.RST_STREAM, len(payload))
        if not sid:
            raise ConnectionError_(f.PROTOCOL_ERROR, "RST_STREAM on stream 0")
        s = self.streams.get(sid)
        if s is None:
            return self._closed_or_idle(sid, "RST_STREAM")
        s.cancelled = True
        self.abandon(s)
        self.maybe_close()
        if not self.resets.spend():
            raise ConnectionError_(f.ENHANCE_YOUR_CALM,
                                   f"more than {self.limits.max_resets} stream resets in "
                                   f"{self.limits.reset_window:g} s")
        return None

    def _settings(self, flags: int, sid: int, payload: bytes) -> None:
        if sid:
            raise ConnectionError_(f.PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & f.ACK:
            if payload:
                raise ConnectionError_(f.FRAME_SIZE_ERROR, "SETTINGS ACK with a payload")
            return
        self._check_fixed(f.SETTINGS, len(payload))
        if self.settings_seen:
            self._idle_frame("SETTINGS")
        for i in range(0, len(payload), 6):
            key, value = struct.unpack_from(">HI", payload, i)
            if key == f.INITIAL_WINDOW_SIZE:
                if value > f.MAX_WINDOW:
                    raise ConnectionError_(f.FLOW_CONTROL_ERROR, "initial window too large")
                delta = value - self.peer_initial_window
                self.peer_initial_window = value
                for s in self.streams.values():
                    s.send_window += delta
                    if s.send_window > f.MAX_WINDOW:
                        raise ConnectionError_(f.FLOW_CONTROL_ERROR, "window overflow")
            elif key == f.MAX_FRAME_SIZE:
                if not f.DEFAULT_FRAME_SIZE <= value <= f.MAX_FRAME_SIZE_LIMIT:
                    raise ConnectionError_(f.PROTOCOL_ERROR, f"max frame size {value}")
                self.peer_frame_size = value
            elif key == f.ENABLE_PUSH and value > 1:
                raise ConnectionError_(f.PROTOCOL_ERROR, f"enable push {value}")
        self.transport.write(f.frame(f.SETTINGS, f.ACK, 0))
        if not self.settings_seen:
            self.settings_seen = True
            if self.handshake_timer is not None:  # the client's preface is complete
                self.handshake_timer.cancel()
                self.handshake_timer = None
        if self.waiting:
            self.flush_waiting()

    def _ping(self, flags: int, sid: int, payload: bytes) -> None:
        self._check_fixed(f.PING, len(payload))
        if sid:
            raise ConnectionError_(f.PROTOCOL_ERROR, "PING on a stream")
        if flags & f.ACK:
            return self._idle_frame("PING ACK")  # we send no PING
        now = self.loop.time()
        if not self.worked and now - self.last_ping < self.limits.min_ping_interval:
            self.ping_strikes += 1
            if self.ping_strikes > self.limits.max_ping_strikes:
                raise ConnectionError_(f.ENHANCE_YOUR_CALM, "too_many_pings")
        else:
            self.ping_strikes = 0
        self.worked = False
        self.last_ping = now
        self.transport.write(f.frame(f.PING, f.ACK, 0, payload))
        return None

    def _priority(self, sid: int, payload: bytes) -> None:
        if not sid:
            raise ConnectionError_(f.PROTOCOL_ERROR, "PRIORITY on stream 0")
        if len(payload) != 5:  # RFC 9113 6.3: a stream error
            return self._stream_error(sid, f.FRAME_SIZE_ERROR, "PRIORITY of "
                                                               f"{len(payload)} bytes")
        if int.from_bytes(payload[:4], "big") & 0x7FFFFFFF == sid:
            return self._stream_error(sid, f.PROTOCOL_ERROR, "stream depends on itself")
        self._idle_frame("PRIORITY")  # priorities are ignored (RFC 9113 5.3.2)
        return None

