"""Errors a user can act on. Each maps to an exit code and is printed without a traceback."""

from __future__ import annotations


class BatonError(Exception):
    """Base class: a message meant for a person, never a traceback."""

    exit_code = 1


class SpecError(BatonError):
    """A pipeline spec that cannot run: bad YAML, unknown stage type, wrong field type, cycle.

    Carries every problem found, so a user fixes them all in one pass (exit code 2).
    """

    exit_code = 2

    def __init__(self, problems: list[str] | str) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))

    def __str__(self) -> str:
        if len(self.problems) == 1:
            return f"bad pipeline spec: {self.problems[0]}"
        lines = "\n".join(f"  - {p}" for p in self.problems)
        return f"bad pipeline spec ({len(self.problems)} problems):\n{lines}"


class UsageError(BatonError):
    """Bad command-line usage (exit code 2)."""

    exit_code = 2


class StageError(BatonError):
    """A stage failed for a reason it understands (bad data, gate not passed); exit code 1."""

    exit_code = 1
