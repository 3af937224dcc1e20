"""Errors of a preprocessing_fn as stage errors that name the function, the step and the line.

Used where the step runs: by the transform stage's driver (tracing, building the transform)
and by the Beam DoFns (an analyzer phase, building the transform inside the last pipeline,
applying), so a failure reads the same wherever it happened.
"""

from __future__ import annotations

from typing import Any

from baton.errors import StageError


class UserErrors:
    """Turns an exception from the user's function (or a baton.tft refusal) into a StageError
    naming the function, the step and the user's line."""

    def __init__(self, where: str) -> None:
        self.where = where

    def __enter__(self) -> None:
        return None

    def __exit__(self, et: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is None or isinstance(exc, StageError | KeyboardInterrupt):
            return
        from baton.graphs.tft.module import OutputError
        from baton.graphs.user_refs import user_line

        line = "" if isinstance(exc, OutputError) else user_line(exc)  # about outputs: no line
        text = _summary(exc)
        if isinstance(exc, KeyError):
            text = f"no raw column {exc.args[0]!r}" if exc.args else text
        kind = "" if isinstance(exc, OutputError) else f"{type(exc).__name__}: "
        raise StageError(f"{self.where}: {kind}{text}{line}") from None


def _summary(exc: BaseException) -> str:
    """The exception's first line; for TensorFlow's "Graph execution error:" (whose first line
    says nothing), the kernel's own message and the node it ran in."""
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    if not lines:
        return type(exc).__name__
    if not lines[0].startswith("Graph execution error"):
        return lines[0]
    node = next((ln.split()[3] for ln in lines if ln.startswith("Detected at node ")
                 and len(ln.split()) > 3), None)
    causes = [ln.strip() for ln in lines[1:] if not ln.startswith((" ", "\t"))
              and not ln.startswith(("Detected at node", "Node:", "[["))]
    if not causes:
        return lines[0]
    return f"{causes[-1]} (node {node})" if node else causes[-1]
