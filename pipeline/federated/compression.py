"""Compressed model updates: what a client sends up instead of its float32 weights.

A client sends its *update*, the difference between the weights it trained and the global
weights it received, which the server adds back before aggregating. `none` sends it as it is
(float32); `fp16` halves it; `int8` quantizes each tensor to 8 bits with its own offset and
scale (affine over [min, max], 255 steps), a quarter of the bytes plus 8 per tensor.

Error feedback (Seide et al. 2014; Karimireddy et al. 2019, "EF-SGD"): what quantization drops
from an update is kept by the client as a residual and added to its next update, so the error
does not accumulate over rounds; a client that restarts loses only its residual.

Only floating-point weights can be compressed; `check` names a weight of another dtype.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

METHODS = ("none", "fp16", "int8")
_FLOATS = ("float16", "float32", "float64")


def check(weights: Sequence[np.ndarray], method: str, names: Sequence[str] = ()) -> list[str]:
    """Problems: a weight whose dtype the method cannot compress."""
    if method == "none":
        return []
    out = []
    for i, w in enumerate(weights):
        if np.asarray(w).dtype.name not in _FLOATS:
            name = names[i] if i < len(names) else f"#{i}"
            out.append(f"compression {method!r} applies to float weights; weight {name} is "
                       f"{np.asarray(w).dtype.name}")
    return out


def encode(update: Sequence[np.ndarray], method: str,
           residual: Sequence[np.ndarray] | None = None
           ) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
    """({array name: array} to send, the new residual). `residual`: the last one, or None."""
    if method not in METHODS:
        raise ValueError(f"compression must be one of {', '.join(METHODS)}. Received: {method!r}")
    out: dict[str, np.ndarray] = {}
    new_residual: list[np.ndarray] = []
    for i, u in enumerate(update):
        x: np.ndarray = np.asarray(u, np.float64 if np.asarray(u).dtype == np.float64
                                   else np.float32)
        if residual is not None:
            x = x + residual[i]
        if method == "none":
            out[f"{i}"] = x.astype(np.float32)
            sent = out[f"{i}"]
        elif method == "fp16":
            out[f"{i}"] = x.astype(np.float16)
            sent = out[f"{i}"].astype(np.float32)
        else:
            lo = float(x.min()) if x.size else 0.0
            hi = float(x.max()) if x.size else 0.0
            scale = (hi - lo) / 255.0 or 1.0
            q = np.clip(np.rint((x - lo) / scale), 0, 255).astype(np.uint8)
            out[f"{i}"] = q
            out[f"{i}.offset_scale"] = np.array([lo, scale], np.float32)
            sent = q.astype(np.float32) * np.float32(scale) + np.float32(lo)
        new_residual.append((x - sent).astype(np.float32))
    return out, new_residual


def decode(arrays: dict[str, Any], count: int) -> list[np.ndarray]:
    """The float32 update of `count` tensors from what `encode` sent."""
    out = []
    for i in range(count):
        a = np.asarray(arrays[f"{i}"])
        if a.dtype == np.uint8:
            lo, scale = np.asarray(arrays[f"{i}.offset_scale"], np.float32)
            out.append(a.astype(np.float32) * scale + lo)
        else:
            out.append(a.astype(np.float32))
    return out


def payload_bytes(arrays: dict[str, Any]) -> int:
    """The arrays' own bytes (the wire adds framing; the proxy measures that)."""
    return int(sum(np.asarray(a).nbytes for a in arrays.values()))
