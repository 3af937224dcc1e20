"""HTTP/2 wire format for the gRPC server: frame headers, HPACK, gRPC's message prefix.

Only what a gRPC server needs (RFC 9113, RFC 7541, gRPC's PROTOCOL-HTTP2.md). Header
blocks are decoded with a full HPACK decoder (static and dynamic tables, table size
updates, Huffman strings through the `hpack` package's decoder); a header block already
seen on the connection while its dynamic table was unchanged is answered from a cache,
which is every request after the first from a typical client (grpc C-core, grpc-java,
h2load, Go: all their request headers are indexed after the first call). Responses use
no dynamic table: their few headers are literals without indexing, built once.
"""

from __future__ import annotations

import struct

from hpack.huffman_table import decode_huffman
from hpack.table import HeaderTable

from baton.errors import BatonError

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
FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL, COMPRESSION_ERROR = 6, 7, 8, 9
ENHANCE_YOUR_CALM = 11

DEFAULT_WINDOW = 65535
DEFAULT_FRAME_SIZE = 16384
MAX_WINDOW = 2**31 - 1

_STATIC = HeaderTable.STATIC_TABLE
_STATIC_LEN = len(_STATIC)


class CompressionError(BatonError):
    """A header block that does not decode (connection error COMPRESSION_ERROR)."""


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
    for i, (n, v) in enumerate(_STATIC, 1):
        if n == name:
            if v == value:
                return _int(i, 7, 0x80)
            return _int(i, 4, 0) + _str(value)
    return b"\x00" + _str(name) + _str(value)


def encode_headers(headers: list[tuple[bytes, bytes]]) -> bytes:
    return b"".join(encode_header(n, v) for n, v in headers)


# -- HPACK decoding ---------------------------------------------------------------------
class Decoder:
    """One connection's HPACK decoder (RFC 7541), with a cache of whole header blocks."""

    def __init__(self, max_table_size: int = 4096):
        self.dynamic: list[tuple[bytes, bytes]] = []  # newest first
        self.size = 0
        self.max_size = max_table_size  # the limit this side announced
        self.table_size = max_table_size  # the encoder's current choice (<= max_size)
        self._cache: dict[bytes, list[tuple[bytes, bytes]]] = {}

    def decode(self, block: bytes) -> list[tuple[bytes, bytes]]:
        hit = self._cache.get(block)
        if hit is not None:
            return hit
        headers, changed = self._decode(block)
        if changed:  # indices moved: a cached block may now mean other fields
            self._cache.clear()
        else:
            if len(self._cache) >= 256:
                self._cache.clear()
            self._cache[block] = headers
        return headers

    def _entry(self, index: int) -> tuple[bytes, bytes]:
        if 0 < index <= _STATIC_LEN:
            return _STATIC[index - 1]
        i = index - _STATIC_LEN - 1
        if 0 <= i < len(self.dynamic):
            return self.dynamic[i]
        raise CompressionError(f"header index {index} out of range")

    def _add(self, name: bytes, value: bytes) -> None:
        n = len(name) + len(value) + 32
        if n > self.table_size:
            self.dynamic.clear()
            self.size = 0
            return
        self.dynamic.insert(0, (name, value))
        self.size += n
        self._evict()

    def _evict(self) -> None:
        while self.size > self.table_size and self.dynamic:
            n, v = self.dynamic.pop()
            self.size -= len(n) + len(v) + 32

    def _decode(self, b: bytes) -> tuple[list[tuple[bytes, bytes]], bool]:
        out: list[tuple[bytes, bytes]] = []
        changed = False
        pos, end = 0, len(b)
        try:
            while pos < end:
                c = b[pos]
                if c & 0x80:  # indexed field
                    idx, pos = _read_int(b, pos, 7)
                    out.append(self._entry(idx))
                    continue
                if c & 0x40:  # literal with incremental indexing
                    idx, pos = _read_int(b, pos, 6)
                    add = True
                elif c & 0x20:  # dynamic table size update
                    size, pos = _read_int(b, pos, 5)
                    if size > self.max_size:
                        raise CompressionError(f"table size {size} > {self.max_size}")
                    self.table_size = size
                    self._evict()
                    changed = True
                    continue
                else:  # literal without indexing / never indexed
                    idx, pos = _read_int(b, pos, 4)
                    add = False
                if idx:
                    name = self._entry(idx)[0]
                else:
                    name, pos = _read_str(b, pos)
                value, pos = _read_str(b, pos)
                out.append((name, value))
                if add:
                    self._add(name, value)
                    changed = True
        except IndexError:
            raise CompressionError("truncated header block") from None
        return out, changed


def _read_int(b: bytes, pos: int, prefix: int) -> tuple[int, int]:
    limit = (1 << prefix) - 1
    v = b[pos] & limit
    pos += 1
    if v < limit:
        return v, pos
    shift = 0
    while True:
        c = b[pos]
        pos += 1
        v += (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return v, pos
        if shift > 28:
            raise CompressionError("integer too large")


def _read_str(b: bytes, pos: int) -> tuple[bytes, int]:
    huff = b[pos] & 0x80
    n, pos = _read_int(b, pos, 7)
    if pos + n > len(b):
        raise CompressionError("truncated string")
    s = b[pos:pos + n]
    if huff:
        try:
            s = decode_huffman(s)
        except Exception as e:  # noqa: BLE001 - hpack's HPACKDecodingError and friends
            raise CompressionError(f"bad Huffman string: {e}") from None
    return s, pos + n
