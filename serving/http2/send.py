"""The sending half of an HTTP/2 connection: responses within the peer's windows.

A response is HEADERS, DATA and trailing HEADERS; when it fits both send windows (the
stream's and the connection's) and the peer's frame size, which is every small call,
it goes out in one write. Otherwise the HEADERS go now and the DATA waits for
WINDOW_UPDATEs (`waiting`), then the trailers follow. A stream ends here exactly once:
`end_stream` removes it, gives back what it holds (`H2Connection.release`) and, once a
GOAWAY was sent and nothing is left, closes the connection.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from baton.serving.http2 import frames as f
from baton.serving.http2.stream import Stream

_HEAD = struct.Struct(">IBI")  # a frame header: length << 8 | type, flags, stream


class Sender:
    """Mixin of H2Connection, which provides the attributes and hooks declared here."""

    transport: Any
    streams: dict[int, Stream]
    waiting: list[Stream]
    send_window: int
    peer_frame_size: int
    useful_work: Callable[[], None]  # a response went out: the flood counters restart
    worked: bool
    idle_frames: int
    release: Callable[[Stream], None]  # gives back what a stream holds
    maybe_close: Callable[[], None]  # closes after a GOAWAY once no stream is left

    def send_response(self, s: Stream, headers: bytes, data: bytes, trailers: bytes) -> None:
        """Sends a whole response (`trailers` empty: `headers` alone ends the stream)."""
        if s.closed:
            return
        if not trailers or len(data) <= min(s.send_window, self.send_window,
                                            self.peer_frame_size):
            self.send_window -= len(data)
            s.send_window -= len(data)
            self._write_end(s, headers, data, trailers)
            return
        # large: the headers now, the data as the windows open, then the trailers
        self.useful_work()
        self.transport.write(f.frame(f.HEADERS, f.END_HEADERS, s.sid, headers))
        s.pending = data
        s.trailers = trailers
        self.waiting.append(s)
        self.flush_waiting()

    def send_trailers(self, s: Stream, trailers: bytes) -> None:
        """Ends a stream whose headers went out already (drops data still waiting)."""
        s.pending = None
        self._write_end(s, b"", b"", trailers)

    def flush_waiting(self) -> None:
        if self.transport is None:
            return
        still = []
        write = self.transport.write
        for s in self.waiting:
            if s.closed or s.pending is None:
                continue
            data = s.pending
            while data and self.send_window > 0 and s.send_window > 0:
                k = min(len(data), self.send_window, s.send_window, self.peer_frame_size)
                write(f.frame(f.DATA, 0, s.sid, data[:k]))
                data = data[k:]
                self.send_window -= k
                s.send_window -= k
            if data:
                s.pending = data
                still.append(s)
            else:
                s.pending = None
                self._write_end(s, b"", b"", s.trailers)
        self.waiting = still

    def _write_end(self, s: Stream, headers: bytes, data: bytes, trailers: bytes) -> None:
        """Writes what is given and ends the stream (END_STREAM on the last frame)."""
        self.end_stream(s)
        if self.transport is None:
            return
        sid = s.sid
        if trailers and headers and data:  # a whole response: three frames, two packs
            out = b"".join((_HEAD.pack(len(headers) << 8 | f.HEADERS, f.END_HEADERS, sid),
                            headers, _HEAD.pack(len(data) << 8 | f.DATA, 0, sid), data,
                            _HEAD.pack(len(trailers) << 8 | f.HEADERS,
                                       f.END_HEADERS | f.END_STREAM, sid), trailers))
        elif trailers:
            out = (f.frame(f.HEADERS, f.END_HEADERS, sid, headers) if headers else b"")
            if data:
                out += f.frame(f.DATA, 0, sid, data)
            out += f.frame(f.HEADERS, f.END_HEADERS | f.END_STREAM, sid, trailers)
        else:  # trailers-only, or a non-gRPC answer
            out = f.frame(f.HEADERS, f.END_HEADERS | f.END_STREAM, sid, headers)
        self.worked = True  # useful_work(), inline: once per response
        self.idle_frames = 0
        self.transport.write(out)
        if not s.remote_closed:
            # RFC 9113 8.1: a response before the request ended; the rest is not wanted
            self.transport.write(f.rst_stream(sid, f.NO_ERROR))
        self.maybe_close()

    def end_stream(self, s: Stream) -> None:
        """The stream leaves the connection: timers stop, what it holds is given back."""
        if s.closed:
            return
        s.closed = True
        if s.timer is not None:
            s.timer.cancel()
            s.timer = None
        self.streams.pop(s.sid, None)
        self.release(s)
