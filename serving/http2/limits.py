"""Every cap, timeout and budget of the HTTP/2 server, with its default and why.

A hostile client must not be able to take more than a bounded share of memory, CPU or
descriptors, nor slow other clients down. The defaults follow the maintained servers
where they agree: grpc core (ping strikes, the metadata size it advertises, idle
connections), Netty (the RST_STREAM budget that answered CVE-2023-44487, "rapid reset")
and nghttp2 (the CONTINUATION budget that answered CVE-2024-27316). docs/serving.md
lists them with the flags and channel arguments that change them.
"""

from __future__ import annotations

import dataclasses
import time

from baton.serving.connections import DRAIN_TIMEOUT

MiB = 1 << 20


@dataclasses.dataclass(frozen=True)
class Http2Limits:
    """Limits of one gRPC server (all connections alike).

    Attributes:
        max_concurrent_streams: SETTINGS_MAX_CONCURRENT_STREAMS, per connection; a stream
            opened beyond it is reset REFUSED_STREAM (clients retry it). None: no limit,
            none advertised.
        max_frame_size: SETTINGS_MAX_FRAME_SIZE we advertise (the RFC's default, as grpc
            core): a larger frame is a FRAME_SIZE_ERROR before its payload is read, so an
            unfinished frame holds 16 KiB of a connection's memory at most.
        initial_window_size: SETTINGS_INITIAL_WINDOW_SIZE, each stream's receive window
            (at most the message limit and its 5-byte prefix).
        connection_window: the connection's receive window. DATA beyond either window is a
            FLOW_CONTROL_ERROR. WINDOW_UPDATE returns credit only for bytes consumed (moved
            into a message, or discarded for a closed stream), and a stream's only while
            its message may still grow: no stream is ever granted more than the message
            limit.
        max_header_list_size: SETTINGS_MAX_HEADER_LIST_SIZE (RFC 9113 6.5.2: names,
            values and 32 bytes a field), enforced while decoding; it also bounds the
            compressed block (HEADERS plus CONTINUATION bytes). Either over: GOAWAY
            ENHANCE_YOUR_CALM, the block is never decoded past the limit. 16 KiB is
            grpc core's hard metadata limit (what TF Serving accepts); Huffman strings
            decode at about 2 MB/s in Python, so it also bounds a block's decoding time.
        max_continuation_frames: CONTINUATION frames one header block may take (nghttp2's
            default); more: GOAWAY ENHANCE_YOUR_CALM.
        max_resets: client RST_STREAMs of streams still open on our side allowed per
            `reset_window` seconds (Netty's 200 per 30 s); more: GOAWAY
            ENHANCE_YOUR_CALM and the connection closes (rapid reset).
        reset_window: see max_resets.
        max_ping_strikes: as grpc core: a PING that comes less than
            `min_ping_interval` after the previous one, with no response data sent in
            between, is a strike; more strikes than this: GOAWAY ENHANCE_YOUR_CALM
            "too_many_pings" (grpc clients back their keepalive off on it).
        min_ping_interval: see max_ping_strikes (grpc core's 5 minutes).
        max_idle_frames: frames that make no progress (SETTINGS after the first,
            PRIORITY, empty DATA, DATA/WINDOW_UPDATE/RST_STREAM for closed streams, refused
            streams, unknown types) allowed between two responses; more: GOAWAY
            ENHANCE_YOUR_CALM (a flood of cheap frames costs CPU and, unread, memory).
        max_buffered_request_bytes: request bytes held by all connections in messages
            not yet complete, one connection holding a quarter of it at most; a DATA
            frame that would pass either gets its call answered RESOURCE_EXHAUSTED and
            the stream reset. Both are raised to the message limit when smaller, so one
            message of the maximum size always fits.
        handshake_timeout: seconds for a new connection to send the preface and its
            SETTINGS; then it is closed. 0: no limit.
        idle_timeout: seconds a connection with no open stream is kept; then GOAWAY and
            close (grpc's max_connection_idle). 0: kept for ever.
        request_timeout: seconds a request may keep arriving (its END_STREAM not come)
            while no new stream opens on the connection; then DEADLINE_EXCEEDED and the
            stream reset. 0: no limit.
        linger: seconds a connection closed for a protocol error keeps its socket after
            the GOAWAY, dropping what the peer still sends, unless the peer closes first
            (Go's goAwayTimeout, nginx's lingering_close): closed at once with unread
            input, the kernel resets it and may discard the GOAWAY. An eviction at the
            connection cap ends it at once. 0: no linger. A peer that has not read its
            answers by the end of the linger is reset.
        drain_timeout: after a graceful close (idle, evicted at the connection cap, after a
            GOAWAY), answers still unsent are given to the peer as long as it takes some
            of them every this many seconds; a peer that takes none for that long is
            reset (grpc core's keepalive_timeout: a peer silent for 20 s is dead). Without
            it, close() waits for ever on a peer that never reads, holding a descriptor
            the connection cap no longer counts. 0: reset at once.
    """

    max_concurrent_streams: int | None = 1000
    max_frame_size: int = 16384
    initial_window_size: int = 1 * MiB
    connection_window: int = 16 * MiB
    max_header_list_size: int = 16 * 1024
    max_continuation_frames: int = 8
    max_resets: int = 200
    reset_window: float = 30.0
    max_ping_strikes: int = 2
    min_ping_interval: float = 300.0
    max_idle_frames: int = 1000
    max_buffered_request_bytes: int = 256 * MiB
    handshake_timeout: float = 10.0
    idle_timeout: float = 60.0
    request_timeout: float = 60.0
    linger: float = 1.0
    drain_timeout: float = DRAIN_TIMEOUT

    def __post_init__(self) -> None:
        checks = {
            "max_frame_size": 16384 <= self.max_frame_size <= 16777215,
            "initial_window_size": 0 <= self.initial_window_size <= 2**31 - 1,
            "connection_window": 65535 <= self.connection_window <= 2**31 - 1,
            "max_header_list_size": self.max_header_list_size >= 1024,
            "max_continuation_frames": self.max_continuation_frames >= 0,
            "max_resets": self.max_resets >= 0,
            "max_buffered_request_bytes": self.max_buffered_request_bytes > 0,
            "linger": 0 <= self.linger <= 60,
            "drain_timeout": self.drain_timeout >= 0,
        }
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"Http2Limits.{name} is out of range. "
                                 f"Received: {name}={getattr(self, name)!r}")


class WindowCounter:
    """At most `limit` events in any window of `seconds` that starts at the first one
    (Netty's RST_STREAM budget): cheap, and a burst at the limit is allowed."""

    __slots__ = ("limit", "seconds", "count", "start")

    def __init__(self, limit: int, seconds: float):
        self.limit = limit
        self.seconds = seconds
        self.count = 0
        self.start = 0.0

    def spend(self) -> bool:
        """Counts one event; False when it is over the budget."""
        now = time.monotonic()
        if now - self.start > self.seconds:
            self.start = now
            self.count = 0
        self.count += 1
        return self.count <= self.limit


class BufferBudget:
    """Bytes of unfinished request messages held by every connection of a server."""

    __slots__ = ("limit", "used")

    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0

    def take(self, n: int) -> bool:
        if self.used + n > self.limit:
            return False
        self.used += n
        return True

    def give(self, n: int) -> None:
        self.used -= n
