"""Every error Baton raises for a person to act on, under one root, and the exit codes.

`BatonError` is the root: the CLI prints its message without a traceback and exits with its
`exit_code`. A few subclasses also derive from ValueError, as the errors they replaced did,
so code that catches ValueError around a config parse keeps working.

`Preempted` is the one exception here that is not an error: a SIGTERM (a preemption, a pod
deletion) unwinds the run like Ctrl-C does, so it derives from KeyboardInterrupt and no
`except Exception` in a stage or a training loop can swallow it. Training saves a backup
first; the process exits 143, which TFJob's `restartPolicy: ExitCode` retries.

Exit codes are the contract with shells, CI and the Kubeflow training operator (its
ExitCode policy retries 128+ and treats 1-127 as permanent).
"""

from __future__ import annotations

import signal

EXIT_OK = 0
EXIT_FAILED = 1  # a stage or job failed; permanent for the TFJob ExitCode policy
EXIT_USAGE = 2  # bad flags or a bad spec
EXIT_TRANSIENT = 128 + signal.SIGHUP  # 129: a dead peer or lost connection; retried
EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130: Ctrl-C
EXIT_PREEMPTED = 128 + signal.SIGTERM  # 143: SIGTERM after a backup was saved; retried


class BatonError(Exception):
    """Root of Baton's errors: a message meant for a person, never a traceback."""

    exit_code = EXIT_FAILED


class SpecError(BatonError):
    """A pipeline spec that cannot run: bad YAML, unknown stage type, wrong field type, cycle.

    Carries every problem found, so a user fixes them all in one pass (exit code 2).
    """

    exit_code = EXIT_USAGE

    def __init__(self, problems: list[str] | str) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))

    def __str__(self) -> str:
        if len(self.problems) == 1:
            return f"bad pipeline spec: {self.problems[0]}"
        lines = "\n".join(f"  - {p}" for p in self.problems)
        return f"bad pipeline spec ({len(self.problems)} problems):\n{lines}"


class UsageError(BatonError, ValueError):
    """Bad command-line usage: the flag and the value received are named (exit code 2)."""

    exit_code = EXIT_USAGE


class ConfigError(BatonError, ValueError):
    """A config value that does not fit its field (exit code 2).

    `ConfigError(path, message)`: `path` is the dotted key (`gate.min`); with one argument the
    message names its file and field itself (serving's model config files).
    """

    exit_code = EXIT_USAGE

    def __init__(self, path: str, message: str | None = None) -> None:
        if message is None:
            path, message = "", path
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)


class StageError(BatonError):
    """A stage failed for a reason it understands (bad data, gate not passed); exit code 1."""

    exit_code = EXIT_FAILED


class StorageError(BatonError):
    """An object store refused or could not be reached: one line naming the URL, what was
    being done and the cause in words (baton.storage.filesystems); exit code 1."""

    exit_code = EXIT_FAILED


class Preempted(KeyboardInterrupt):
    """SIGTERM: stop at the next safe point, save, exit 143; a rerun resumes from the backup.

    `step` is the training step the backup holds, when training was running.
    """

    exit_code = EXIT_PREEMPTED

    def __init__(self, message: str = "", step: int | None = None) -> None:
        self.step = step
        super().__init__(message or (f"preempted at step {step}; backup saved"
                                     if step is not None else "stopped by SIGTERM"))
