"""How a process ended, told as the kubelet and the training operator tell it: the exit code
(128+N for a signal), `signal SIGKILL` or `code 143` in words, whether the operator retries it,
and the termination message a command left.
"""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path

MESSAGE_LIMIT = 4096  # characters of a termination message kept (the kubelet keeps 4096 bytes)


def read_message(path: Path | None) -> str:
    """A command's termination message, stripped and capped at MESSAGE_LIMIT; "" if it left
    none (or it cannot be read: the exit code still tells what happened)."""
    if path is None:
        return ""
    try:
        return path.read_text(errors="replace").strip()[:MESSAGE_LIMIT]
    except OSError:
        return ""


def exit_code(returncode: int) -> int:
    """Popen's -N for "killed by signal N" becomes the kubelet's 128+N (SIGKILL -> 137)."""
    return 128 - returncode if returncode < 0 else returncode


def describe(returncode: int) -> str:
    """`signal SIGKILL` for Popen's -9, `code 143` for an exit code."""
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return f"signal {signal.Signals(-returncode).name}"
    return f"code {returncode}"


def is_retryable(code: int) -> bool:
    """The operator's IsRetryableExitCode: 128 and above (signals, e.g. preemption) are retried."""
    return code >= 128
