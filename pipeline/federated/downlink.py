"""The global model going down, compressed: a delta against the copy each client holds.

With `compression: fp16 | int8` the server does not send the float32 global weights to a
client that already holds an earlier global model: it sends `global - copy`, encoded like the
updates (compression.encode), where `copy` is exactly what that client reconstructed from the
last message (the server computes the same float32 sum the client does). The next delta is
taken against that reconstruction, so what quantization dropped goes down with the next delta
(error feedback on the server's side): a client's copy stays within one quantization step of
the last global model it was sent, and the error does not build up over rounds.

The `downlink` entry of a train or evaluate message's config says what its arrays are:

- `full`: the float32 weights; the client replaces its copy with them (its first message,
  or any message the server has no confirmed copy for that client);
- `delta`: `global - copy`, encoded; `base` is the digest of the copy it applies to;
- `copy`: no arrays at all: the client's copy already stands for this very global model
  (round r's evaluate message carries the model that round r+1's train message sends again).

The client answers with the digest of the copy it now holds. The server keeps a copy for a
client only when that digest is the one it computed itself; no answer, an error, another
digest or a restarted server leave it with none, and the next message is `full`. A client
whose copy is not the message's `base` (its state was lost) refuses the message as stale, and
the server sends it the full weights within the same round.

Flower-free; the ServerApp and the ClientApp call it (flower_server, flower_client).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from baton.errors import BatonError
from baton.pipeline.federated import compression

MODES = ("full", "delta", "copy")


class Stale(BatonError):
    """The message is a delta (or a reference) against a copy this client does not hold."""


def digest(weights: Sequence[np.ndarray]) -> str:
    """What identifies a list of weights: sha256 of each tensor's dtype, shape and bytes."""
    h = hashlib.sha256()
    for w in weights:
        a = np.ascontiguousarray(w)
        h.update(f"{a.dtype.str}{a.shape};".encode())
        h.update(a.tobytes())
    return h.hexdigest()[:32]


def apply(copy: Sequence[np.ndarray], sent: Mapping[str, Any]) -> list[np.ndarray]:
    """The copy plus the decoded delta: what both sides compute, bit for bit."""
    delta = compression.decode(dict(sent), len(copy))
    return [np.asarray(c) + d for c, d in zip(copy, delta, strict=True)]


@dataclasses.dataclass(frozen=True)
class Copy:
    """What a client holds: its weights, their digest, and the global model they stand for."""

    weights: list[np.ndarray]
    digest: str
    of: str


class ServerCopies:
    """The server's record of each client's copy: confirmed ones, and those in flight."""

    def __init__(self, method: str) -> None:
        if method not in compression.METHODS or method == "none":
            raise ValueError(f"downlink compression must be fp16 or int8. Received: {method!r}")
        self.method = method
        self.held: dict[int, Copy] = {}
        self.pending: dict[int, Copy] = {}

    def prepare(self, node: int, weights: Sequence[np.ndarray], of: str | None = None
                ) -> tuple[dict[str, str], dict[str, np.ndarray]]:
        """(config entries, arrays by name) of the message carrying `weights` to `node`.
        `of`: digest(weights), when the caller has it already."""
        of = of or digest(weights)
        held = self.held.pop(node, None)  # used once: kept again only when the answer confirms
        if held is None:
            exact = [np.asarray(w) for w in weights]
            self.pending[node] = Copy(exact, of, of)
            return {"downlink": "full"}, {str(i): w for i, w in enumerate(exact)}
        if held.of == of:
            self.pending[node] = held
            return {"downlink": "copy", "base": held.digest}, {}
        delta = [np.asarray(w) - c for w, c in zip(weights, held.weights, strict=True)]
        sent, _ = compression.encode(delta, self.method)
        recon = apply(held.weights, sent)
        self.pending[node] = Copy(recon, digest(recon), of)
        return {"downlink": "delta", "base": held.digest}, sent

    def confirm(self, node: int, answered: str | None) -> bool:
        """The client answered that it holds `answered` (None: no usable answer)."""
        sent = self.pending.pop(node, None)
        if sent is not None and answered == sent.digest:
            self.held[node] = sent
            return True
        self.held.pop(node, None)
        return False

    def forget(self, node: int) -> None:
        self.held.pop(node, None)
        self.pending.pop(node, None)


def receive(config: Mapping[str, Any], arrays: Mapping[str, Any],
            copy: Sequence[np.ndarray] | None) -> list[np.ndarray]:
    """The client's side: the global weights a message stands for, from its arrays and the
    client's copy (None: it has none). Raises Stale when the copy is not the message's base."""
    mode = str(config.get("downlink", "full"))
    if mode not in MODES:
        raise ValueError(f"downlink must be one of {', '.join(MODES)}. Received: {mode!r}")
    if mode == "full":
        return [np.asarray(arrays[str(i)]) for i in range(len(arrays))]
    base = str(config.get("base", ""))
    held = digest(copy) if copy is not None else None
    if held != base:
        raise Stale(f"downlink {mode!r} against copy {base!r}; this client holds "
                    f"{held or 'no copy'}")
    assert copy is not None
    if mode == "copy":
        return [np.asarray(c) for c in copy]
    return apply(copy, arrays)
