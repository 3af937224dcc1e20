"""Bytes for what crosses between a client and the server, without pickle.

Analyzer accumulators (moments, extremes, token counts, quantile sketches), analyzer values and
label counts travel inside Flower messages. Unpickling bytes from the other side would let a
client run code on the server (or the server on every client), so they are JSON with numpy
arrays as `.npy` (allow_pickle=False) and bytes base64-encoded. Supported: None, bool, int,
float, str, bytes, lists and tuples, dicts (str, int or bytes keys), numpy arrays and scalars
(object arrays of bytes too), and graphs.quantile_sketch.QuantileSketch.
"""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import numpy as np


def field(record: Any, key: str = "blob") -> bytes:
    """The bytes stored under `key` of a Flower ConfigRecord."""
    return bytes(record[key])


def dumps(value: Any) -> bytes:
    return json.dumps(_enc(value), separators=(",", ":")).encode()


def loads(data: bytes) -> Any:
    return _dec(json.loads(data.decode()))


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def _enc(v: Any) -> Any:
    from baton.graphs.quantile_sketch import QuantileSketch

    if v is None or isinstance(v, bool | str):
        return v
    if isinstance(v, int | float) and not isinstance(v, np.generic):
        return v
    if isinstance(v, bytes):
        return {"b": _b64(v)}
    if isinstance(v, np.generic):
        return _enc(np.asarray(v))
    if isinstance(v, np.ndarray):
        if v.dtype == object:
            return {"obj": [_enc(x) for x in v.reshape(-1).tolist()], "shape": list(v.shape)}
        buf = io.BytesIO()
        np.save(buf, v, allow_pickle=False)
        return {"nd": _b64(buf.getvalue())}
    if isinstance(v, list | tuple):
        return {"tuple" if isinstance(v, tuple) else "list": [_enc(x) for x in v]}
    if isinstance(v, dict):
        return {"dict": [[_enc(k), _enc(x)] for k, x in v.items()]}
    if isinstance(v, QuantileSketch):
        return {"sketch": [v.size, _enc(v.values), _enc(v.weights)]}
    raise TypeError(f"cannot encode {type(v).__name__} for the wire")


def _dec(v: Any) -> Any:
    if not isinstance(v, dict):
        return v
    ((tag, body),) = ((k, x) for k, x in v.items() if k != "shape")
    if tag == "b":
        return base64.b64decode(body)
    if tag == "nd":
        return np.load(io.BytesIO(base64.b64decode(body)), allow_pickle=False)
    if tag == "obj":
        out = np.empty(len(body), dtype=object)
        out[:] = [_dec(x) for x in body]
        return out.reshape(v["shape"])
    if tag == "list":
        return [_dec(x) for x in body]
    if tag == "tuple":
        return tuple(_dec(x) for x in body)
    if tag == "dict":
        return {_dec(k): _dec(x) for k, x in body}
    if tag == "sketch":
        from baton.graphs.quantile_sketch import QuantileSketch

        s = QuantileSketch(int(body[0]))
        s.values, s.weights = _dec(body[1]), _dec(body[2])
        return s
    raise ValueError(f"unknown wire tag {tag!r}")
