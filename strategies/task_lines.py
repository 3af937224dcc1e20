"""The output of a local cluster's tasks, relayed: each line prefixed with its task, or (with
BATON_LOG_FORMAT=json) a record of the `baton.strategies.launcher` logger with a `task` field;
TensorFlow's start-up noise left out. The launcher (strategies.launcher) pumps every task's
lines through one `TaskLines` and says its own through it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
from typing import IO, Any

from baton import logs


class TaskLines:
    """Prefixes each output line with its task and writes it to the stream, with the launcher's
    own lines as `[launcher] ...`.

    With BATON_LOG_FORMAT=json (`logs.json_output()`) every line is a record of the
    `baton.strategies.launcher` logger instead, through the one log handler (not `stream`): the
    launcher's own lines; a task's line that is already a JSON record (a `baton task` in JSON
    mode) passed on as that object with `task` added, at its own level; any other task line
    (TensorFlow's C++ log) as a record with `task` and the line as `message`.
    """

    def __init__(self, stream: IO[str], quiet: bool):
        self.stream, self.quiet = stream, quiet
        self.lock = threading.Lock()
        self.json = logs.json_output()

    def line(self, name: str, line: str) -> None:
        if line and not self.quiet and not is_noise(line):
            if self.json:
                _relay(name, line)
                return
            with self.lock:
                self.stream.write(f"  [{name}] {line}\n")
                self.stream.flush()

    def say(self, text: str) -> None:
        if not self.quiet:
            if self.json:
                _LOG.info(text)
                return
            with self.lock:
                self.stream.write(f"  [launcher] {text}\n")
                self.stream.flush()


_LOG = logs.get("strategies.launcher")
_GLOG = re.compile(r"([IWEF])\d{4} ")  # TF's C++ log lines: `W0000 00:00:...` (glog/absl)
_GLOG_LEVELS = {"I": logging.INFO, "W": logging.WARNING, "E": logging.ERROR, "F": logging.CRITICAL}


def _relay(task: str, line: str) -> None:
    """One output line of `task` as a record (JSON mode): a JSON object is passed on as it came."""
    record: Any = None
    if line.startswith("{"):
        with contextlib.suppress(ValueError):
            record = json.loads(line)
    if isinstance(record, dict):
        level = logging.getLevelName(str(record.get("level", "INFO")).upper())
        _LOG.log(level if isinstance(level, int) else logging.INFO, "%s",
                 record.get("message", ""), extra={"task": task, logs.RELAYED: record})
        return
    prefix = _GLOG.match(line)
    _LOG.log(_GLOG_LEVELS[prefix.group(1)] if prefix else logging.INFO, "%s", line,
             extra={"task": task})


_NOISE = (
    "cpu_feature_guard",
    "To enable the following instructions",
    "oneDNN custom operations",
    "cudart_stub",
    "cuda_platform",
    "Could not find cuda",
    "generator_dataset_op",
    "rebuild TensorFlow with",
    "absl::InitializeLog",
    "WARNING: All log messages before",
    "function_handle_cache",
    "use_unbounded_threadpool",
    "Failed to register function remotely",
    "Failed to remove function remotely",
    "Additional GRPC error information",
    ":UNKNOWN:Error received from peer",
    "This could happen if the remote target",
)


def is_noise(line: str) -> bool:
    return any(n in line for n in _NOISE)
