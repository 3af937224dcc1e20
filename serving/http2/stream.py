"""One HTTP/2 stream of a gRPC call: its request as it arrives, its windows, its state.

States (RFC 9113 5.1) as flags: a stream in `H2Connection.streams` is open;
`remote_closed` once the client's END_STREAM came (half-closed remote); `closed` once we
answered or reset it (it leaves `streams` then). `counted` is true while the call is
counted in the server's calls in flight, `held` the bytes of its unfinished message
charged to the server's request buffer budget: both are given back exactly once, in
`H2Connection.release`, whichever way the stream ends.
"""

from __future__ import annotations

import asyncio
from typing import Any

from baton.serving.http2.headers import Request


class Stream:
    __slots__ = ("conn", "sid", "request", "body", "recv_window", "recv_unacked",
                 "send_window", "remote_closed", "closed", "deadline", "timer", "task",
                 "cancelled", "pending", "trailers", "counted", "held")

    def __init__(self, conn: Any, sid: int, request: Request, send_window: int,
                 recv_window: int):
        self.conn = conn
        self.sid = sid
        self.request = request
        self.body = bytearray()
        self.recv_window = recv_window  # what the client may still send us
        self.recv_unacked = 0  # consumed, not yet returned by WINDOW_UPDATE
        self.send_window = send_window
        self.remote_closed = False
        self.closed = False  # answered, reset or abandoned
        self.deadline: float | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.task: asyncio.Future | None = None
        self.cancelled = False
        self.pending: bytes | None = None  # response DATA waiting for window
        self.trailers = b""  # sent after `pending`
        self.counted = False
        self.held = 0

    def metadata(self) -> tuple:
        return self.request.metadata()
