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
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if isinstance(exc, KeyError):
            text = f"no raw column {exc.args[0]!r}" if exc.args else text
        kind = "" if isinstance(exc, OutputError) else f"{type(exc).__name__}: "
        raise StageError(f"{self.where}: {kind}{text}{line}") from None
