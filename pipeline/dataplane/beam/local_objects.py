"""Objects the driver lends to DoFns that happen to run in its own process.

The transform's DoFns carry what they need to rebuild their TensorFlow graphs (the function's
source, the analyzer values) and trace the user's function again in `setup`, because a worker
may be another process or machine. With the in-process FnApiRunner that worker *is* the
driver, which has just traced the very same graph: tracing it again cost ~0.1 s per DoFn on a
census-like function (a third of the transform's fixed cost at 1M rows). So the driver lends
the traced object under a fresh random key, the DoFn pickles only the key, and `setup` asks
`borrow(key)`: the object in the driver's process, None anywhere else (the DoFn then traces
as before). The key is random per loan (never a stale object of an earlier pipeline), and an
object is only lent to the process that registered it: a forked child sees the parent's
dict, but not TensorFlow's runtime behind the object, so it traces for itself.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
from collections.abc import Iterator
from typing import Any

_LOCK = threading.Lock()
_OBJECTS: dict[str, tuple[int, Any]] = {}  # key -> (pid of the lender, object)


@contextlib.contextmanager
def lend(obj: Any) -> Iterator[str]:
    """A key under which `obj` can be borrowed in this process until the block ends."""
    key = secrets.token_hex(16)
    with _LOCK:
        _OBJECTS[key] = (os.getpid(), obj)
    try:
        yield key
    finally:
        with _LOCK:
            _OBJECTS.pop(key, None)


def borrow(key: str | None) -> Any | None:
    """The object lent under `key` by this process, else None (another process, a loan that
    ended, or no key)."""
    if key is None:
        return None
    with _LOCK:
        entry = _OBJECTS.get(key)
    if entry is None or entry[0] != os.getpid():
        return None
    return entry[1]
