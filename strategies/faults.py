"""Fault injection: rehearse a dead worker, a dead PS or a preemption on purpose.

`--inject-failure worker:1@step:40` (or `BATON_INJECT_FAILURE=...`, read at the CLI edge) kills
task worker:1 when training reaches step 40. An optional third field picks the signal:
`worker:1@step:40:term` sends SIGTERM (a preemption) instead of SIGKILL (a crash), and
`worker:1@step:40:lost` is a crash whose node is gone for good: the task is SIGKILLed at that
step and the local launcher does not start it again (an elastic job, `min_workers`, continues
with the workers left; strategies/elastic.py). Elsewhere (`baton task` on a TFJob pod) `lost` is a
SIGKILL like `kill`: the operator's restart policy decides, as it would for a pod on a dead node.

Tasks that run the training loop (multi-worker mirrored workers, the PS coordinator) kill
themselves at the exact step boundary. Tasks that only serve (PS-strategy workers and parameter
servers) have no step counter; the local launcher kills them when the chief reports the step.
A fault fires on the first attempt only, so a restarted job does not fail again forever.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal

from baton.errors import EXIT_USAGE, BatonError
from baton.strategies.cluster import TASK_TYPES, TaskId

# The one grammar of a rehearsed fault, for training tasks and federated clients alike:
# WHO[:INDEX]@WHEN:AT[:HOW] (`worker:1@step:40:term`, `client:1@round:2:slow`, `server@round:2`).
# `split_fault` reads it; each kind of stage checks the words it takes (`parse_fault` here,
# the federated stage's for clients and rounds).
_RE = re.compile(
    r"^(?P<who>[a-z]+)(?::(?P<index>\d+))?@(?P<when>[a-z]+):(?P<at>\d+)(?::(?P<how>[a-z]+))?$"
)
SIGNALS = ("kill", "term", "lost")


@dataclasses.dataclass(frozen=True)
class FaultWords:
    """A fault as written: who (and which one), when (the unit and the count), how."""

    who: str
    index: int | None
    when: str
    at: int
    how: str | None


def split_fault(text: str) -> FaultWords | None:
    """The words of `text` in the fault grammar, or None when it does not follow it."""
    m = _RE.match(text.strip())
    if not m:
        return None
    index = m.group("index")
    return FaultWords(m.group("who"), int(index) if index is not None else None,
                      m.group("when"), int(m.group("at")), m.group("how"))


class FaultSpecError(BatonError, ValueError):
    """A fault-injection spec that cannot be parsed."""

    exit_code = EXIT_USAGE


@dataclasses.dataclass(frozen=True)
class Fault:
    task: TaskId
    step: int
    # "kill" (SIGKILL, a crash), "term" (SIGTERM, a preemption) or "lost" (SIGKILL, and the
    # task's node never comes back)
    signal: str = "kill"

    @property
    def signum(self) -> int:
        return int(signal.SIGTERM if self.signal == "term" else signal.SIGKILL)

    @property
    def lost(self) -> bool:
        """The task's node is gone for good: the launcher must not restart it."""
        return self.signal == "lost"

    def __str__(self) -> str:
        return f"{self.task.name}@step:{self.step}:{self.signal}"


def parse_fault(text: str | None) -> Fault | None:
    """`"worker:1@step:40[:kill|term|lost]"` -> Fault; None or "" -> None."""
    if not text:
        return None
    words = split_fault(text)
    if (words is None or words.who not in TASK_TYPES or words.when != "step"
            or words.how not in (None, *SIGNALS)):
        raise FaultSpecError(
            "inject-failure must look like 'worker:1@step:40' (optionally ':kill', ':term' or "
            "':lost'), "
            "task type one of "
            f"{', '.join(TASK_TYPES)}. Received: {text!r}"
        )
    if words.at < 1:
        raise FaultSpecError(f"inject-failure step must be >= 1. Received: step={words.at}")
    return Fault(TaskId(words.who, words.index or 0), words.at, words.how or "kill")


def fire(fault: Fault) -> None:
    """Deliver the fault's signal to this process (never returns for SIGKILL)."""
    os.kill(os.getpid(), fault.signum)


def clip_chunk(fault: Fault | None, step: int, n: int) -> int:
    """Shorten a chunk of `n` steps starting at `step` so that a chunk boundary lands on the fault.

    Every task clips the same way (the fault is known to all), so collective step counts agree.
    """
    if fault is None or not step < fault.step < step + n:
        return n
    return fault.step - step
