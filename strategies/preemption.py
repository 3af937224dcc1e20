"""SIGTERM as a request to stop training at the next step boundary (preemption), not a death.

A scheduler's SIGTERM (Kubernetes eviction, a spot reclaim, `kill`) is a grace period: the
process should save what it has and exit 143, so a rerun resumes from the backup. Inside
`stop_on_sigterm(callback)` a SIGTERM only calls `callback` (the training loop checks the flag it
sets at the next chunk) and is remembered in `request.seen`; the previous handler comes back on
exit. Handlers can only be installed from the main thread; elsewhere this is a no-op.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any


@dataclasses.dataclass
class StopRequest:
    seen: bool = False
    install: Callable[[], None] = lambda: None  # re-install (TensorFlow may replace handlers)


@contextlib.contextmanager
def stop_on_sigterm(callback: Callable[[], None]) -> Iterator[StopRequest]:
    """While inside, SIGTERM calls `callback` instead of the previous handler."""
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return

    def handler(signum: int, frame: Any) -> None:
        request.seen = True
        callback()

    def install() -> None:
        signal.signal(signal.SIGTERM, handler)

    request.install = install
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield request
    finally:
        signal.signal(signal.SIGTERM, previous)
