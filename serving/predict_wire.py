"""PredictRequest and PredictResponse in protobuf's wire format, by hand: Predict's hot path.

A PredictRequest is walked once (model spec, inputs map, output filter), each input in
the usual form (float, double or string values) read by entry_wire from its cached head,
any other by tensor_wire; once a request of packed values only is read, its layout
(every byte but the packed input values) is kept, so a request of the same model spec, input names, dtypes, shapes and output filter,
which is what a client sends call after call, is read by comparing those literal bytes
and taking the values with np.frombuffer. The response is the outputs map around
tensor_wire's serialized TensorProtos and a serialized ModelSpec. Anything unusual
(varint inputs, repeated or merged fields, unknown fields) returns None and the
caller uses the protobuf message (tests/serving/test_tensor_wire.py).
"""

from __future__ import annotations

import numpy as np

from baton.serving.entry_wire import read_entry
from baton.serving.tensor_wire import (
    MASK64,
    decode_general,
    fast_tensor,
    read_varint,
    tensor_values,
    varint,
)


class PredictParts:
    """What Predict reads from a PredictRequest: the model spec, inputs, output filter."""

    __slots__ = ("name", "version", "label", "signature_name", "inputs", "output_filter")

    def __init__(self) -> None:
        self.name = self.signature_name = ""
        self.version: int | None = None
        self.label: str | None = None
        self.inputs: dict[str, np.ndarray] = {}
        self.output_filter: list[str] = []


def _fields(raw: bytes):
    """(field number, wire type, value or bytes) of a message's fields, in order."""
    pos, end = 0, len(raw)
    while pos < end:
        key, pos = read_varint(raw, pos)
        wire = key & 7
        if wire == 0:
            v, pos = read_varint(raw, pos)
            yield key >> 3, 0, v
        elif wire == 2:
            n, pos = read_varint(raw, pos)
            if pos + n > end:
                raise ValueError("truncated")
            yield key >> 3, 2, raw[pos:pos + n]
            pos += n
        else:
            raise ValueError(f"wire type {wire}")


def _parse_model_spec(raw: bytes) -> tuple:
    """(name, version, label, signature_name) of a serialized ModelSpec; () if unusual."""
    name = signature_name = ""
    version: int | None = None
    label: str | None = None
    for field, wire, v in _fields(raw):
        if wire != 2 or field not in (1, 2, 3, 4):
            return ()
        if field == 2:  # version: an Int64Value
            if label is not None:
                return ()  # both of the oneof on the wire: protobuf's rules decide
            value = 0
            for f, w, x in _fields(v):
                if (f, w) != (1, 0):
                    return ()
                value = x - (1 << 64) if x >= 1 << 63 else x
            version = value
        elif field == 1:
            name = v.decode()
        elif field == 3:
            signature_name = v.decode()
        else:
            if version is not None:
                return ()
            label = v.decode()
    return name, version, label, signature_name


_SPECS: dict[bytes, tuple] = {}  # serialized ModelSpec -> _parse_model_spec's answer


def _model_spec(raw: bytes, parts: PredictParts) -> bool:
    """A ModelSpec's fields into `parts` (the same bytes are parsed once)."""
    hit = _SPECS.get(raw)
    if hit is None:
        hit = _parse_model_spec(raw)
        if len(_SPECS) >= 4096:
            _SPECS.clear()
        _SPECS[raw] = hit
    if not hit or parts.version is not None or parts.label is not None:
        return False  # unusual, or a second ModelSpec to merge: protobuf's rules decide
    parts.name, parts.version, parts.label, parts.signature_name = hit
    return True


def _delimited(raw: bytes, pos: int, end: int) -> tuple[int, int, int]:
    """(key byte, start, stop) of the length-delimited field at raw[pos]; ValueError if
    it runs past `end` (a one-byte key: the fields read here are numbered 1 to 15)."""
    key = raw[pos]
    n = raw[pos + 1]
    pos += 2
    if n & 0x80:
        n, pos = read_varint(raw, pos - 1)
    if pos + n > end:
        raise ValueError("truncated field")
    return key, pos, pos + n


def _input(raw: bytes, pos: int, end: int, parts: PredictParts, regions: list) -> bool:
    """The inputs map entry in raw[pos:end] (key 1, TensorProto 2) into `parts`; its
    packed values' place appended to `regions` (None when not in the usual form)."""
    name, tensor = None, None
    while pos < end:
        key, pos, stop = _delimited(raw, pos, end)
        if key == 0x0A and name is None:
            name = raw[pos:stop].decode()
        elif key == 0x12 and tensor is None:
            tensor = (pos, stop)
        else:  # unknown, or a field given twice: protobuf merges (and checks) both
            return False
        pos = stop
    if tensor is None:
        return False
    name = name or ""
    fast = fast_tensor(raw, *tensor)
    if fast is not None:
        arr = tensor_values(raw, *fast)
        count = fast[1] // fast[2][3]
        exact = arr is not None and arr.size == count
        regions.append((name, *fast) if exact else None)
    else:
        arr = decode_general(raw[tensor[0]:tensor[1]])
        regions.append(None)
    if arr is None:
        return False
    parts.inputs[name] = arr
    return True


class _Layout:
    """A PredictRequest's bytes but its packed input values: a request of the same model
    spec, input names, dtypes and shapes and output filter is these literals around
    values of these lengths, and is read by comparing the literals."""

    __slots__ = ("size", "literals", "regions", "spec", "output_filter")

    def __init__(self, raw: bytes, parts: PredictParts, regions: list):
        self.size = len(raw)
        self.regions = sorted(regions, key=lambda r: r[1])
        self.literals = []
        at = 0
        for _, offset, size, _, _ in self.regions:
            self.literals.append((at, raw[at:offset]))
            at = offset + size
        self.literals.append((at, raw[at:]))
        self.spec = (parts.name, parts.version, parts.label, parts.signature_name)
        self.output_filter = list(parts.output_filter)

    def read(self, raw: bytes) -> PredictParts | None:
        if len(raw) != self.size:
            return None
        for at, literal in self.literals:
            if not raw.startswith(literal, at):
                return None
        parts = PredictParts()
        parts.name, parts.version, parts.label, parts.signature_name = self.spec
        parts.output_filter = list(self.output_filter)
        inputs = parts.inputs
        for name, offset, size, spec, dims in self.regions:
            inputs[name] = np.frombuffer(raw, spec[1], size // spec[3], offset).astype(
                spec[2]).reshape(dims)
        return parts


_LAYOUTS: list[_Layout] = []  # the most recent first
MAX_LAYOUTS = 16


def parse_predict_request(raw: bytes) -> PredictParts | None:
    """A serialized PredictRequest's parts, its inputs decoded by decode_tensor; None
    for anything that form does not cover (the caller parses the message instead)."""
    for layout in _LAYOUTS:
        parts = layout.read(raw)
        if parts is not None:
            return parts
    parts = PredictParts()
    regions: list = []
    inputs = parts.inputs
    pos, end = 0, len(raw)
    try:
        while pos < end:
            key, pos, stop = _delimited(raw, pos, end)
            if key == 0x12:  # an inputs map entry: in the usual form, or walked
                entry = read_entry(raw, pos, stop)
                if entry is not None:
                    inputs[entry[0]] = entry[1]
                    regions.append(entry[2])
                elif not _input(raw, pos, stop, parts, regions):
                    return None
            elif key == 0x0A:
                if not _model_spec(raw[pos:stop], parts):
                    return None
            elif key == 0x1A:
                parts.output_filter.append(raw[pos:stop].decode())
            else:
                return None
            pos = stop
    except (ValueError, IndexError, UnicodeDecodeError):
        return None
    if regions and None not in regions and len({r[0] for r in regions}) == len(regions):
        _LAYOUTS.insert(0, _Layout(raw, parts, regions))
        del _LAYOUTS[MAX_LAYOUTS:]
    return parts



def model_spec(name: str, version: int, signature_name: str) -> bytes:
    """A serialized ModelSpec with name, version (an Int64Value, set even when 0) and
    signature_name, as Predict's response sets them."""
    out = []
    if name:
        n = name.encode()
        out += [b"\x0a", varint(len(n)), n]
    inner = b"\x08" + varint(version & MASK64) if version else b""
    out += [b"\x12", varint(len(inner)), inner]
    if signature_name:
        s = signature_name.encode()
        out += [b"\x1a", varint(len(s)), s]
    return b"".join(out)


def predict_response(outputs: list[tuple[str, bytes]], spec: bytes) -> bytes:
    """A serialized PredictResponse: the outputs map (name, serialized TensorProto) and
    the serialized model_spec."""
    out = []
    for name, tensor in outputs:
        key = _KEYS.get(name)
        if key is None:
            if len(_KEYS) >= 4096:
                _KEYS.clear()
            k = name.encode()
            key = _KEYS[name] = b"\x0a" + varint(len(k)) + k + b"\x12"
        size = varint(len(tensor))
        out += [b"\x0a", varint(len(key) + len(size) + len(tensor)), key, size, tensor]
    out += [b"\x12", varint(len(spec)), spec]
    return b"".join(out)


_KEYS: dict[str, bytes] = {}  # output name -> its map entry's key field and value tag
