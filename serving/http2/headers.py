"""Request header sections checked as RFC 9113 8.2 and 8.3 require, parsed once.

A malformed request (an upper-case or non-token field name, NUL/CR/LF or surrounding
whitespace in a value, a connection-specific field, `te` other than "trailers", an
unknown, repeated or misplaced pseudo-header, a missing `:method`, `:scheme` or `:path`)
is a stream error PROTOCOL_ERROR. The parsed result is cached with the header block by
the HPACK decoder, so a client repeating its headers pays for the checks once.
"""

from __future__ import annotations

import re

from baton.errors import BatonError

_NAME = re.compile(rb"[!#$%&'*+\-.^_`|~0-9a-z]+")
_BAD_VALUE = re.compile(rb"[\x00\r\n]|^[ \t]|[ \t]$")
_CONNECTION_SPECIFIC = frozenset({b"connection", b"proxy-connection", b"keep-alive",
                                  b"transfer-encoding", b"upgrade"})
_PSEUDO = frozenset({b":method", b":scheme", b":authority", b":path"})
# fields the gRPC layer reads itself: not handed to handlers as invocation metadata
_RESERVED = frozenset({b"content-type", b"te", b"grpc-timeout", b"grpc-encoding",
                       b"grpc-accept-encoding", b"user-agent", b"content-length"})


class MalformedHeaders(BatonError):
    """A header section RFC 9113 8.2/8.3 calls malformed (stream error PROTOCOL_ERROR)."""


class Request:
    """A request's header section: the fields a gRPC call needs, and the metadata."""

    __slots__ = ("fields", "method", "path", "content_type", "timeout", "encoding",
                 "content_length", "_metadata")

    def __init__(self, fields: list[tuple[bytes, bytes]]):
        self.fields = fields
        self.method = self.path = self.content_type = b""
        self.timeout: bytes | None = None
        self.encoding = b"identity"
        self.content_length = -1
        self._metadata: tuple | None = None

    def metadata(self) -> tuple:
        """Invocation metadata as grpc gives it: str values, bytes for `-bin` keys."""
        if self._metadata is None:
            out = []
            for k, v in self.fields:
                if k[:1] == b":" or k in _RESERVED:
                    continue
                key = k.decode("latin-1")
                out.append((key, v if key.endswith("-bin") else v.decode("latin-1")))
            self._metadata = tuple(out)
        return self._metadata


def _check_field(name: bytes, value: bytes) -> None:
    if _NAME.fullmatch(name) is None:
        raise MalformedHeaders(f"invalid header field name {name[:64]!r}")
    if _BAD_VALUE.search(value) is not None:
        raise MalformedHeaders(f"invalid value of header field {name.decode('latin-1')!r}")
    if name in _CONNECTION_SPECIFIC:
        raise MalformedHeaders(f"connection-specific header field {name.decode()!r}")
    if name == b"te" and value != b"trailers":
        raise MalformedHeaders("te header field other than 'trailers'")


def parse_request(fields: list[tuple[bytes, bytes]]) -> Request:
    """A request's header section (the first HEADERS of a stream)."""
    r = Request(fields)
    pseudo_done = False
    seen: set[bytes] = set()
    scheme = False
    for name, value in fields:
        if name[:1] == b":":
            if pseudo_done:
                raise MalformedHeaders(f"pseudo-header {name.decode('latin-1')!r} after "
                                       "a regular field")
            if name not in _PSEUDO:
                raise MalformedHeaders(f"unknown pseudo-header {name[:64]!r}")
            if name in seen:
                raise MalformedHeaders(f"repeated pseudo-header {name.decode()!r}")
            seen.add(name)
            if _BAD_VALUE.search(value) is not None:
                raise MalformedHeaders(f"invalid value of {name.decode()!r}")
            if name == b":method":
                r.method = value
            elif name == b":path":
                r.path = value
            elif name == b":scheme":
                scheme = True
            continue
        pseudo_done = True
        _check_field(name, value)
        if name == b"content-type":
            r.content_type = value
        elif name == b"grpc-timeout":
            r.timeout = value
        elif name == b"grpc-encoding":
            r.encoding = value
        elif name == b"content-length":
            if not value.isdigit() or r.content_length >= 0:
                raise MalformedHeaders("invalid or repeated content-length")
            r.content_length = int(value)
    if not r.method or (r.method != b"CONNECT" and (not scheme or not r.path)):
        raise MalformedHeaders("request without :method, :scheme or :path")
    return r


def check_trailers(fields: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """A request's trailer section: regular fields only."""
    for name, value in fields:
        if name[:1] == b":":
            raise MalformedHeaders("pseudo-header in trailers")
        _check_field(name, value)
    return fields
