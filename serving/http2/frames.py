"""HTTP/2 wire format: frame types, flags, settings, error codes, and the frames we send.

RFC 9113 section 4 and 6. Responses use no HPACK dynamic table: their few header fields
are literals without indexing (`encode_headers`), so the peer's table never grows on our
account and the common blocks are built once.
"""

from __future__ import annotations

import struct

from hpack.table import HeaderTable

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# frame types
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY = range(8)
WINDOW_UPDATE, CONTINUATION = 8, 9
# flags
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20
# settings
HEADER_TABLE_SIZE, ENABLE_PUSH, MAX_CONCURRENT_STREAMS = 1, 2, 3
INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE, MAX_HEADER_LIST_SIZE = 4, 5, 6
# error codes
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR = 0, 1, 2, 3
SETTINGS_TIMEOUT, STREAM_CLOSED, FRAME_SIZE_ERROR, REFUSED_STREAM = 4, 5, 6, 7
CANCEL, COMPRESSION_ERROR, CONNECT_ERROR, ENHANCE_YOUR_CALM = 8, 9, 10, 11

DEFAULT_WINDOW = 65535
DEFAULT_FRAME_SIZE = 16384
MAX_FRAME_SIZE_LIMIT = 16777215  # 2^24 - 1
MAX_WINDOW = 2**31 - 1

STATIC_TABLE = HeaderTable.STATIC_TABLE
FRAME_NAMES = {DATA: "DATA", HEADERS: "HEADERS", PRIORITY: "PRIORITY",
               RST_STREAM: "RST_STREAM", SETTINGS: "SETTINGS", PUSH_PROMISE: "PUSH_PROMISE",
               PING: "PING", GOAWAY: "GOAWAY", WINDOW_UPDATE: "WINDOW_UPDATE",
               CONTINUATION: "CONTINUATION"}
ERROR_NAMES = {NO_ERROR: "NO_ERROR", PROTOCOL_ERROR: "PROTOCOL_ERROR",
               INTERNAL_ERROR: "INTERNAL_ERROR", FLOW_CONTROL_ERROR: "FLOW_CONTROL_ERROR",
               STREAM_CLOSED: "STREAM_CLOSED", FRAME_SIZE_ERROR: "FRAME_SIZE_ERROR",
               REFUSED_STREAM: "REFUSED_STREAM", COMPRESSION_ERROR: "COMPRESSION_ERROR",
               ENHANCE_YOUR_CALM: "ENHANCE_YOUR_CALM"}


def frame(ftype: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    n = len(payload)
    return struct.pack(">BHBBI", n >> 16, n & 0xFFFF, ftype, flags, stream) + payload


def settings_frame(values: dict[int, int]) -> bytes:
    return frame(SETTINGS, 0, 0, b"".join(struct.pack(">HI", k, v) for k, v in values.items()))


def window_update(stream: int, increment: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, stream, struct.pack(">I", increment))


def rst_stream(stream: int, code: int) -> bytes:
    return frame(RST_STREAM, 0, stream, struct.pack(">I", code))


def goaway(last_stream: int, code: int, debug: bytes = b"") -> bytes:
    return frame(GOAWAY, 0, 0, struct.pack(">II", last_stream, code) + debug)


# -- HPACK encoding (literals without indexing; no dynamic table) -----------------------
def _int(value: int, prefix: int, first: int) -> bytes:
    limit = (1 << prefix) - 1
    if value < limit:
        return bytes([first | value])
    out = bytearray([first | limit])
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _str(s: bytes) -> bytes:
    return _int(len(s), 7, 0) + s


def encode_header(name: bytes, value: bytes) -> bytes:
    """One field as "literal without indexing" (static name index when there is one)."""
    for i, (n, v) in enumerate(STATIC_TABLE, 1):
        if n == name:
            if v == value:
                return _int(i, 7, 0x80)
            return _int(i, 4, 0) + _str(value)
    return b"\x00" + _str(name) + _str(value)


def encode_headers(headers: list[tuple[bytes, bytes]]) -> bytes:
    return b"".join(encode_header(n, v) for n, v in headers)
