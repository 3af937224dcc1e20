"""Baton's output goes through `logging`, under the `baton` logger; one handler formats it.

Libraries do not configure logging, applications do: every module logs to
`logging.getLogger("baton.<package>...")`, and only the edge (the `baton` CLI, `baton task`
in a pod, `baton serve`) calls `configure` once. The handler it installs writes the lines a
person reads at a terminal exactly as before (`  [train] epoch 3/10 ...`), or, with
`BATON_LOG_FORMAT=json`, one JSON object per line with time, level, logger and the record's
context (stage, task) plus any other `extra=` field (the run summary's `stages`, a progress
record's `done`/`total`), which is what log routers in a cluster (Fluent Bit, Vector, Cloud
Logging agents) parse into fields.

In JSON mode everything a Baton process writes to stderr is such a record: the same handler
also goes on the root logger (third-party records, e.g. Beam's `apitools not found` warning or
TensorFlow's Python logger, come out as JSON; the root's level is left as it is) and Python's
warnings are captured into logging. The callers that otherwise draw for a terminal ask
`json_output()`: progress bars become a record at most every 5 s, the run summary table one
`summary` record, the local launcher's lines and its children's relayed lines records (a
child's line that is already a JSON record is passed on as that object, with `task` added).
stdout keeps a command's result (`baton run`'s run directory), which scripts read. In text mode
the root logger is left alone and progress bars that redraw one terminal line stay a UI on
their stream.

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
RELAYED = "relayed"  # `extra={RELAYED: {...}}`: a JSON record from a child, written as it came
# What every LogRecord has; any other attribute came from `extra=` and is a JSON field.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message", "asctime"}


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
    """One JSON object per line: time (RFC 3339, UTC), level, logger, message, context, and
    every other `extra=` field. A record carrying `extra={"relayed": obj}` (a child process's
    own JSON record, passed on by its supervisor) is written as `obj` with the context added."""

    def format(self, record: logging.LogRecord) -> str:
        relayed = getattr(record, RELAYED, None)
        if isinstance(relayed, dict):
            passed: dict[str, Any] = dict(relayed)
            for key in CONTEXT_FIELDS:
                value = getattr(record, key, None)
                if value is not None:
                    passed.setdefault(key, value)
            return json.dumps(passed, default=str)
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
        for key, value in record.__dict__.items():
            if key not in _STANDARD and key not in out and not key.startswith("_"):
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

    With "json" the same handler also goes on the root logger and Python's warnings are
    captured, so third-party records are JSON too; with "text" the root logger is left alone
    (only a handler an earlier `configure("json")` put there is taken off).

    Args:
        fmt: "text" (the CLI's lines) or "json" (one object per line, for log routers).
        level: a logging level name or number.
        stream: where to write; None means sys.stderr as it is when each line is written.
        timestamps: text lines start with the time and the logger (a server's log).
    """
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}. Received: {fmt!r}")
    logger = logging.getLogger(ROOT)
    root = logging.getLogger()
    for target in (logger, root):
        for old in [h for h in target.handlers if isinstance(h, _Handler)]:
            target.removeHandler(old)
    handler = _Handler(stream)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter(timestamps))
    logger.addHandler(handler)
    logger.setLevel(level if isinstance(level, int) else str(level).upper())
    logger.propagate = False
    if fmt == "json":
        root.addHandler(handler)  # the root's level stays: the same third-party records, as JSON
        logging.captureWarnings(True)
    elif _captured[0]:  # text mode leaves warnings to Python, as before
        logging.captureWarnings(False)
    _captured[0] = fmt == "json"
    return logger


_captured = [False]  # warnings captured by an earlier configure("json")


def json_output() -> bool:
    """True when the installed handler writes JSON records: callers that would draw for a
    terminal (progress bars, tables, prefixed lines) log a record instead."""
    return any(isinstance(h, _Handler) and isinstance(h.formatter, JsonFormatter)
               for h in logging.getLogger(ROOT).handlers)
