"""Request bodies parsed as TF Serving's REST API parses them (rapidjson), fast.

TF Serving parses a body with rapidjson's iterative parser, NaN and Infinity allowed,
stopping at the end of the first value (json_tensor.cc ParseJson: kParseIterativeFlag |
kParseNanAndInfFlag | kParseStopWhenDoneFlag). So a 500,000-deep document parses (no
recursion), text after the root value is ignored, and a malformed body is refused with
rapidjson's own words: "JSON Parse error: Invalid value. at offset: 0".

`loads` tries, in order: orjson (RFC 8259, the common body, fastest), json.loads (adds
NaN/Infinity, C speed) and this module's iterative parser, which accepts everything
rapidjson accepts with those flags and words its errors as rapidjson does. The three give
the same values where they all accept a body; only the last one runs for bodies the
others refuse, so its Python speed is paid only by unusual requests.

`debug_string` is JsonValueToDebugString: a value in rapidjson's pretty form (objects
indented, arrays on one line), cut after 256 characters, as error messages quote it.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import math
import re
from typing import Any

import orjson

from baton.errors import BatonError
from baton.serving.status import invalid

_WS = re.compile(r"[ \t\n\r]*")
_OPENS = re.compile(r"\[+")
scanstring = json.decoder.scanstring  # type: ignore[attr-defined] # the C string scanner


def _skip(text: str, i: int, pattern: re.Pattern = _WS) -> int:
    """The index after the run of `pattern` (whitespace) at text[i]."""
    m = pattern.match(text, i)
    return m.end() if m else i
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]*)?([eE][-+]?[0-9]*)?")
_LITERALS = (("true", True), ("false", False), ("null", None), ("NaN", math.nan),
             ("Infinity", math.inf), ("-Infinity", -math.inf))
# rapidjson's error texts (error/en.h GetParseError_En)
EMPTY = "The document is empty."
INVALID_VALUE = "Invalid value."
MISS_NAME = "Missing a name for object member."
MISS_COLON = "Missing a colon after a name of object member."
MISS_COMMA_CURLY = "Missing a comma or '}' after an object member."
MISS_COMMA_SQUARE = "Missing a comma or ']' after an array element."
_STRING_ERRORS = (("Unterminated string", "Missing a closing quotation mark in string."),
                  ("Invalid \\uXXXX", "Incorrect hex digit after \\u escape in string."),
                  ("Invalid \\escape", "Invalid escape character in string."),
                  ("Invalid control character", "Invalid encoding in string."))
INT64_MIN, UINT64_MAX = -(2 ** 63), 2 ** 64 - 1


class ParseError(BatonError):
    """A body that is not JSON, with rapidjson's message and the offset it stopped at."""

    def __init__(self, message: str, offset: int):
        super().__init__(message)
        self.message, self.offset = message, offset


def loads(body: bytes) -> Any:
    """The body's JSON value; INVALID_ARGUMENT with TF Serving's message if malformed."""
    if not body:
        raise invalid("JSON Parse error: The document is empty")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        pass
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise invalid(f"JSON Parse error: Invalid encoding in string. at offset: {e.start}"
                      ) from None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        pass
    try:
        return parse(text)
    except ParseError as e:
        raise invalid(f"JSON Parse error: {e.message} at offset: {e.offset}") from None


def _number(text: str, i: int) -> tuple[Any, int]:
    m = _NUMBER.match(text, i)
    if m is None or m.end() == i or m.group(0) == "-":
        raise ParseError(INVALID_VALUE, i)
    frac, exp = m.group(1), m.group(2)
    if frac is not None and len(frac) == 1:
        raise ParseError("Miss fraction part in number.", m.end())
    if exp is not None and not exp.lstrip("eE+-"):
        raise ParseError("Miss exponent in number.", m.end())
    token = m.group(0)
    if frac is None and exp is None:
        value: Any = int(token)
        if INT64_MIN <= value <= UINT64_MAX:
            return value, m.end()
        try:  # rapidjson stores an integer no 64-bit type holds as a double
            return float(value), m.end()
        except OverflowError:
            raise ParseError("Number too big to be stored in double.", i) from None
    value = float(token)
    if math.isinf(value):
        raise ParseError("Number too big to be stored in double.", i)
    return value, m.end()


def _value(text: str, i: int) -> tuple[Any, int]:
    """A scalar at text[i] (string, number or literal) and the index after it."""
    c = text[i] if i < len(text) else ""
    if c == '"':
        try:
            return scanstring(text, i + 1, True)
        except json.JSONDecodeError as e:
            why = next((r for k, r in _STRING_ERRORS if e.msg.startswith(k)),
                       "Invalid encoding in string.")
            raise ParseError(why, e.pos) from None
    if c == "-" or c.isdigit():
        if text.startswith("-Infinity", i):
            return -math.inf, i + 9
        return _number(text, i)
    for word, value in _LITERALS:
        if text.startswith(word, i):
            return value, i + len(word)
    raise ParseError(INVALID_VALUE, i)


MAX_DEPTH = 1 << 20  # deeper documents are refused (upstream's tests nest 500,000 deep)


def parse(text: str) -> Any:
    """rapidjson's iterative parse (see the module docstring): no recursion at any depth.

    Runs of brackets (a deeply nested document is mostly that) are opened and closed in
    tight loops; nesting deeper than MAX_DEPTH is refused instead of growing without bound.
    """
    n = len(text)
    i = _skip(text, 1 if text.startswith("\ufeff") else 0)
    if i >= n:
        raise ParseError(EMPTY, i)
    conts: list = []  # the open containers, outermost first
    keys: list = []  # for each, the pending member name of an object, None for an array
    while True:
        c = text[i] if i < n else ""
        if c == "[":
            j = _skip(text, i, _OPENS)  # the run of "[" that starts here
            if len(conts) + j - i > MAX_DEPTH:
                raise ParseError(f"Nesting deeper than {MAX_DEPTH} levels.", i)
            conts.extend([] for _ in range(j - i))
            keys.extend(itertools.repeat(None, j - i))
            i = _skip(text, j)
            if i < n and text[i] == "]":
                keys.pop()
                value, i = conts.pop(), i + 1
            else:
                continue
        elif c == "{":
            if len(conts) >= MAX_DEPTH:
                raise ParseError(f"Nesting deeper than {MAX_DEPTH} levels.", i)
            i = _skip(text, i + 1)
            if i < n and text[i] == "}":
                value, i = {}, i + 1
            else:
                key, i = _key(text, i)
                conts.append({})
                keys.append(key)
                continue
        else:
            value, i = _value(text, i)
        # attach the value; close every container it completes
        while True:
            if not conts:
                return value  # kParseStopWhenDoneFlag: what follows the root is not read
            container, key = conts[-1], keys[-1]
            if key is None:
                container.append(value)
            else:
                container.setdefault(key, value)  # rapidjson's FindMember finds the first
            c = text[i] if i < n else ""
            if c in " \t\n\r":
                i = _skip(text, i)
                c = text[i] if i < n else ""
            if c == ",":
                i = _skip(text, i + 1)
                if key is not None:
                    keys[-1], i = _key(text, i)
                break
            if c == ("]" if key is None else "}"):
                conts.pop()
                keys.pop()
                value, i = container, i + 1
                while i < n and text[i] == "]" and keys and keys[-1] is None:
                    keys.pop()  # a run of "]" closing arrays in arrays
                    parent = conts.pop()
                    parent.append(value)
                    value, i = parent, i + 1
                continue
            raise ParseError(MISS_COMMA_SQUARE if key is None else MISS_COMMA_CURLY, i)


def _key(text: str, i: int) -> tuple[str, int]:
    """An object member's name and the index of its value."""
    if i >= len(text) or text[i] != '"':
        raise ParseError(MISS_NAME, i)
    key, i = _value(text, i)
    i = _skip(text, i)
    if i >= len(text) or text[i] != ":":
        raise ParseError(MISS_COLON, i)
    return key, _skip(text, i + 1)


MAX_DEBUG_CHARS = 256


def debug_string(value: Any) -> str:
    """rapidjson's PrettyWriter output of `value` (kFormatSingleLineArray), stopped once
    MAX_DEBUG_CHARS are written; iterative, so any depth is safe."""
    out: list[str] = []
    size = 0
    # work items: a value to write, or a literal string
    todo: list[tuple[bool, Any, int]] = [(True, value, 0)]
    while todo and size < MAX_DEBUG_CHARS:
        is_value, v, depth = todo.pop()
        if not is_value:
            piece = v
        elif isinstance(v, dict):
            if not v:
                piece = "{}"
            else:
                pad = "    " * (depth + 1)
                items: list[tuple[bool, Any, int]] = []
                for j, (k, x) in enumerate(v.items()):
                    items.append((False, ("{\n" if j == 0 else ",\n") + pad + json.dumps(k)
                                  + ": ", depth))
                    items.append((True, x, depth + 1))
                items.append((False, "\n" + "    " * depth + "}", depth))
                todo.extend(reversed(items))
                continue
        elif isinstance(v, list):
            if not v:
                piece = "[]"
            else:
                items = []
                for j, x in enumerate(v):
                    items.append((False, "[" if j == 0 else ", ", depth))
                    items.append((True, x, depth))
                items.append((False, "]", depth))
                todo.extend(reversed(items))
                continue
        elif v is True or v is False or v is None:
            piece = json.dumps(v)
        elif isinstance(v, float):
            piece = repr(v) if math.isfinite(v) else ("NaN" if math.isnan(v) else
                                                      "Infinity" if v > 0 else "-Infinity")
        elif isinstance(v, str):
            piece = json.dumps(v, ensure_ascii=False)
        else:
            piece = str(v)
        out.append(piece)
        size += len(piece)
    return "".join(out)


def json_type(value: Any) -> str:
    """JsonTypeString: rapidjson's type name of a value."""
    if value is None:
        return "Null"
    if value is True:
        return "True"
    if value is False:
        return "False"
    if isinstance(value, dict):
        return "Object"
    if isinstance(value, list):
        return "Array"
    if isinstance(value, str):
        return "String"
    return "Number"


def is_double(value: Any) -> bool:
    """rapidjson's IsDouble for a parsed number: a float token, or an integer no 64-bit
    type holds (rapidjson stores those as doubles)."""
    return type(value) is float or (type(value) is int
                                    and not INT64_MIN <= value <= UINT64_MAX)


def is_b64(v: Any) -> bool:
    """IsValBase64Object: an object whose only key is "b64", holding a string."""
    return type(v) is dict and len(v) == 1 and type(v.get("b64")) is str


def b64decode(v: dict) -> bytes:
    """The bytes of a `{"b64": ...}` object (absl::Base64Unescape: padding optional)."""
    text = v["b64"]
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise invalid("Unable to base64 decode") from None
