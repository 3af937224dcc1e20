"""Baton's output goes through `logging`, under the `baton` logger; one handler formats it.

Libraries do not configure logging, applications do: every module logs to
`logging.getLogger("baton.<package>...")`, and only the edge (the `baton` CLI, `baton task`
in a pod, `baton serve`) calls `configure` once. The handler it installs writes the lines a
person reads at a terminal exactly as before (`  [train] epoch 3/10 ...`), or, with
`BATON_LOG_FORMAT=json`, one JSON object per line with time, level, logger and the record's
context (stage, task), which is what log routers in a cluster (Fluent Bit, Vector, Cloud
Logging agents) parse into fields. Progress bars that redraw one terminal line are a UI, not
log records, and stay on their stream.

The `baton` logger does not propagate: TensorFlow's absl handler on the root logger would
print every line twice.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
from collections.abc import Mapping
from typing import Any, TextIO

ROOT = "baton"
FORMATS = ("text", "json")
CONTEXT_FIELDS = ("stage", "pipeline", "run_id", "task")  # `extra=` keys the formatters show


def get(name: str) -> logging.Logger:
    """The logger for `name` under `baton` (`get("pipeline.runner")` -> baton.pipeline.runner)."""
    return logging.getLogger(name if name == ROOT or name.startswith(ROOT + ".")
                             else f"{ROOT}.{name}")


class TextFormatter(logging.Formatter):
    """The CLI's lines: the message itself; a stage's lines indented under its name. A
    long-running server's lines (`timestamps=True`) start with the time and the logger."""

    def __init__(self, timestamps: bool = False) -> None:
        super().__init__()
        self.timestamps = timestamps

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        stage = getattr(record, "stage", None)
        text = f"  [{stage}] {message}" if stage else message
        if self.timestamps:
            text = f"{self.formatTime(record)} {record.name} {text}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (RFC 3339, UTC), level, logger, message, context."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC)
            .isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in CONTEXT_FIELDS:
            value = getattr(record, key, None)
            if value is not None:
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class _Handler(logging.StreamHandler):
    """Writes to the given stream, or to whatever sys.stderr is at the time of each record
    (so a test's captured stderr, or a redirected one, receives the lines)."""

    def __init__(self, stream: TextIO | None) -> None:
        super().__init__(stream or sys.stderr)
        self._fixed = stream

    def emit(self, record: logging.LogRecord) -> None:
        if self._fixed is None:
            self.stream = sys.stderr
        super().emit(record)


LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def settings_from_env(environ: Mapping[str, str]) -> tuple[str, str]:
    """(format, level) from BATON_LOG_FORMAT and BATON_LOG_LEVEL, for an edge to pass to
    `configure`; ValueError naming the variable and what it holds when either is not valid."""
    fmt = environ.get("BATON_LOG_FORMAT", "text").strip().lower() or "text"
    level = environ.get("BATON_LOG_LEVEL", "INFO").strip().upper() or "INFO"
    if fmt not in FORMATS:
        raise ValueError(f"BATON_LOG_FORMAT must be one of {', '.join(FORMATS)}. "
                         f"Received: {fmt!r}")
    if level not in LEVELS:
        raise ValueError(f"BATON_LOG_LEVEL must be {', '.join(LEVELS[:-1])} or {LEVELS[-1]}. "
                         f"Received: {level!r}")
    return fmt, level


def configure(fmt: str = "text", level: str | int = "INFO",
              stream: TextIO | None = None, timestamps: bool = False) -> logging.Logger:
    """Install the one handler on the `baton` logger (replacing an earlier one).

    Args:
        fmt: "text" (the CLI's lines) or "json" (one object per line, for log routers).
        level: a logging level name or number.
        stream: where to write; None means sys.stderr as it is when each line is written.
        timestamps: text lines start with the time and the logger (a server's log).
    """
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}. Received: {fmt!r}")
    logger = logging.getLogger(ROOT)
    for old in [h for h in logger.handlers if isinstance(h, _Handler)]:
        logger.removeHandler(old)
    handler = _Handler(stream)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter(timestamps))
    logger.addHandler(handler)
    logger.setLevel(level if isinstance(level, int) else str(level).upper())
    logger.propagate = False
    return logger
