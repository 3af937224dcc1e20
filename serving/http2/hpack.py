"""HPACK decoding (RFC 7541) with the header list size enforced while decoding.

Static and dynamic tables, table size updates, Huffman strings (through the `hpack`
package's decoder). A block's decoded size (RFC 9113 6.5.2: name, value and 32 bytes a
field) is counted field by field, and decoding stops as soon as it passes the limit we
advertised, so a small block of repeated references to a large dynamic-table entry (an
"HPACK bomb") costs at most the limit in memory and time, never its expansion.

A header block already seen on the connection while its dynamic table was unchanged is
answered from a small cache, which is every request after the first from a typical client
(grpc C-core, grpc-java, h2load, Go: all their request headers are indexed after the
first call). Only short blocks are cached, and only a bounded number of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hpack.huffman_table import decode_huffman

from baton.errors import BatonError
from baton.serving.http2.frames import STATIC_TABLE

_STATIC_LEN = len(STATIC_TABLE)
CACHED_BLOCK_BYTES = 512  # longer blocks are decoded every time
CACHED_BLOCKS = 128


class CompressionError(BatonError):
    """A header block that does not decode (connection error COMPRESSION_ERROR)."""


class HeaderListTooLarge(BatonError):
    """A header block that decodes past SETTINGS_MAX_HEADER_LIST_SIZE."""


class Decoder:
    """One connection's HPACK decoder.

    Args:
        max_list_size: the SETTINGS_MAX_HEADER_LIST_SIZE this side advertised.
        max_table_size: the SETTINGS_HEADER_TABLE_SIZE this side advertised.
    """

    def __init__(self, max_list_size: int = 65536, max_table_size: int = 4096):
        self.dynamic: list[tuple[bytes, bytes]] = []  # newest first
        self.size = 0
        self.max_size = max_table_size
        self.table_size = max_table_size  # the encoder's current choice (<= max_size)
        self.max_list_size = max_list_size
        self._cache: dict[bytes, Any] = {}

    def decode(self, block: bytes, convert: Callable[[list], Any] | None = None) -> Any:
        """The block's fields, or `convert(fields)`, which is cached with the block.

        Raises CompressionError, HeaderListTooLarge, or what `convert` raises (the
        table is updated either way, as RFC 7541 requires).
        """
        hit = self._cache.get(block)
        if hit is not None:
            return hit
        headers, changed = self._decode(block)
        out = convert(headers) if convert is not None else headers
        if changed:  # indices moved: a cached block may now mean other fields
            self._cache.clear()
        elif len(block) <= CACHED_BLOCK_BYTES:
            if len(self._cache) >= CACHED_BLOCKS:
                self._cache.clear()
            self._cache[block] = out
        return out

    def cached(self, block: bytes) -> Any:
        """What `decode` returned for this block while the table has not changed since,
        or None (nothing decoded, the table untouched)."""
        return self._cache.get(block)

    def _entry(self, index: int) -> tuple[bytes, bytes]:
        if 0 < index <= _STATIC_LEN:
            return STATIC_TABLE[index - 1]
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
        left = self.max_list_size  # decoded bytes still allowed
        try:
            while pos < end:
                c = b[pos]
                if c & 0x80:  # indexed field
                    idx, pos = _read_int(b, pos, 7)
                    field = self._entry(idx)
                    left -= len(field[0]) + len(field[1]) + 32
                    if left < 0:
                        raise HeaderListTooLarge(self._too_large())
                    out.append(field)
                    continue
                if c & 0x40:  # literal with incremental indexing
                    idx, pos = _read_int(b, pos, 6)
                    add = True
                elif c & 0x20:  # dynamic table size update
                    if out:  # RFC 7541 4.2: only at the start of a block
                        raise CompressionError("table size update after a field")
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
                    name, pos = _read_str(b, pos, left)
                value, pos = _read_str(b, pos, left - len(name))
                left -= len(name) + len(value) + 32
                if left < 0:
                    raise HeaderListTooLarge(self._too_large())
                out.append((name, value))
                if add:
                    self._add(name, value)
                    changed = True
        except IndexError:
            raise CompressionError("truncated header block") from None
        return out, changed

    def _too_large(self) -> str:
        return (f"header list larger than SETTINGS_MAX_HEADER_LIST_SIZE "
                f"({self.max_list_size} bytes)")


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


def _read_str(b: bytes, pos: int, left: int) -> tuple[bytes, int]:
    """A string literal; HeaderListTooLarge when it alone passes the `left` bytes."""
    huff = b[pos] & 0x80
    n, pos = _read_int(b, pos, 7)
    if pos + n > len(b):
        raise CompressionError("truncated string")
    s = b[pos:pos + n]
    if huff:
        if n * 8 // 30 > left:  # a Huffman code is 30 bits at most: too long already
            raise HeaderListTooLarge("header field larger than the header list limit")
        try:
            s = decode_huffman(s)
        except Exception as e:  # noqa: BLE001 - hpack's HPACKDecodingError and friends
            raise CompressionError(f"bad Huffman string: {e}") from None
    if len(s) > left:
        raise HeaderListTooLarge("header field larger than the header list limit")
    return s, pos + n
