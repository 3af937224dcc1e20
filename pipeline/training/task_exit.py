"""How one `baton task` ends: its exit code and its one line, said for a person and left for
the launcher.

A failure Baton understands (a BatonError) is one line; a dead peer is transient (exit 129,
retried); anything else is a bug whose traceback stays. The line is also written atomically to
BATON_ERROR_FILE (when set), which the local launcher reads once the task has exited, so it
reports the task's own words rather than "exited with 1". pipeline.commands.task calls these.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from baton import logs
from baton.errors import EXIT_FAILED, EXIT_TRANSIENT

PERMANENT, TRANSIENT = EXIT_FAILED, EXIT_TRANSIENT


def read_error(error_file: Path | None) -> str:
    try:
        return error_file.read_text().strip() if error_file else "exited with 1 (its log says why)"
    except OSError:
        return "exited with 1 (its log says why)"


def failed(exc: Exception, task_name: str, error_file: Path | None) -> int:
    """The exit code for `exc`, said the way a person can act on it.

    A BatonError is a failure Baton understands (the user's model function rejected its
    params, a bad reference, a bad config value): its message names the cause, so it is the one
    line, as the one-process run reports it, and a traceback would only bury it. A dead peer is
    expected news: one line, retried. Anything else is a bug: its traceback stays.
    """
    from baton.errors import BatonError

    if isinstance(exc, BatonError):
        return permanent(task_name, str(exc), error_file)
    first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    if is_transient(exc):
        say(f"{task_name}: transient error ({type(exc).__name__}): {first}")
        return TRANSIENT
    message = f"permanent error ({type(exc).__name__}): {first}"
    if logs.json_output():  # one record, the traceback as its `exception` field
        logs.get("task").error(f"{task_name}: {message}", exc_info=exc)
    else:
        import traceback

        sys.stdout.write(traceback.format_exc())
        say(f"{task_name}: {message}")
    leave_error(error_file, f"{message} (a bug: the traceback is in this task's output)")
    return PERMANENT


def permanent(task_name: str, message: str, error_file: Path | None) -> int:
    """Say `message` as this task's one error line, leave it for the launcher; exit 1."""
    logs.get("task").error(f"{task_name}: error: {message}" if task_name else f"error: {message}")
    leave_error(error_file, message)
    return PERMANENT


def leave_error(error_file: Path | None, message: str) -> None:
    """Write `message` to `error_file` atomically (a temporary file, then a rename), so the
    launcher, which reads it once this process has exited, never sees half of it. Best effort:
    a message that cannot be written must not change the exit code, which still tells."""
    if error_file is None:
        return
    tmp = error_file.with_name(f".{error_file.name}.{os.getpid()}.tmp")
    try:
        error_file.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(message.strip() + "\n")
        tmp.replace(error_file)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def is_transient(exc: BaseException) -> bool:
    """Errors a restart can cure: a dead or unreachable peer, a broken connection.

    Everything else (bad config, a bug: ValueError, AttributeError...) is permanent, so the
    operator does not restart a job that can only fail again.
    """
    import tensorflow as tf

    transient = (
        tf.errors.UnavailableError,
        tf.errors.AbortedError,
        tf.errors.DeadlineExceededError,
        tf.errors.CancelledError,
        tf.errors.InternalError,
        tf.errors.UnknownError,
    )
    return isinstance(exc, transient + (ConnectionError, TimeoutError))


def say(text: str) -> None:
    """A line of this task's progress, through the `baton.task` logger (baton.logs): in a pod,
    BATON_LOG_FORMAT=json makes it a record a log router can parse."""
    logs.get("task").info(text)
