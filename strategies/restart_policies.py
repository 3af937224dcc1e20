"""Restart policies: what to do when a member of a supervised process group exits.

`strategies.supervisor.ProcessGroup` runs the processes; a policy's `decide(group, ended)`
returns a `Verdict` and the caller carries it out (it knows how to rebuild a member's command).
Two policies, one per way Baton runs a cluster:

- `GroupRestart`: the local cluster's. A failed member restarts the whole group (from the last
  backup), up to `max_restarts` times; exit code 1 (EXIT_FAILED: bad config, a bug) is
  permanent; anything else (143 preempted, 129 transient, a signal) is retried. Members in
  `alone` (parameter-server workers) are restarted by themselves instead. The group succeeds
  when every `required` member (default: all) has exited 0. Members in `elastic` (the workers of
  an elastic multi-worker mirrored job, strategies/elastic.py) can be *lost* instead: one marked
  `gone` (its node vanished), or one that fails once more after the budget is spent (its
  restarts are exhausted), gets `Action.LOSE` and the caller restarts the group without it.
- `ReplicaRestart`: the Kubeflow training operator's per-replica `restartPolicy` (Never,
  OnFailure, Always, ExitCode: 128 and above retryable), restarts counted against
  `runPolicy.backoffLimit`. Success is the job's success policy, the emulator's to decide.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Collection, Mapping
from typing import Protocol

from baton.errors import EXIT_FAILED
from baton.strategies.exits import is_retryable
from baton.strategies.supervisor import Exit, ProcessGroup


class Action(enum.Enum):
    CONTINUE = "continue"  # nothing to do: keep watching (e.g. a member finished with 0)
    RESTART = "restart"  # start the exited member again, by itself
    RESTART_GROUP = "restart group"  # stop every member and start the whole group again
    LOSE = "lose member"  # that member is gone for good: restart the group without it
    RESIZE = "resize"  # stop the group and start it with the members the caller now has
    SUCCEED = "succeed"  # the group is done
    FAIL = "fail"  # the group failed: stop it, no retry


@dataclasses.dataclass(frozen=True)
class Verdict:
    action: Action
    reason: str  # what happened, for the log and the events ("worker:1 exited with code 143")
    exhausted: bool = False  # FAIL although the exit was retryable: the restart budget is spent
    member: str = ""  # LOSE: the member lost


class RestartPolicy(Protocol):
    def decide(self, group: ProcessGroup, ended: Exit) -> Verdict:
        """What to do about `ended` (called for each Exit `wait()` returns, in order)."""
        ...


class GroupRestart:
    """The local cluster's policy: a failure restarts the whole group, up to `max_restarts`.

    Args:
        max_restarts: group restarts allowed (counted in `restarts`).
        required: members whose exit 0 the group waits for (None: every member); the group
            succeeds when all of them have exited 0. Any other member's exit is a failure.
        alone: members restarted by themselves, whatever their code, without touching the
            others (parameter-server workers: the coordinator reschedules their work); counted
            in `member_restarts`, not against `max_restarts`.
        permanent: return codes never retried (1: bad config or a bug).
        elastic: members that may be lost rather than fail the group (see the module docstring);
            the caller decides whether enough members are left.

    Attributes:
        gone: members whose node is gone for good (`mark_gone`): their next exit is `Action.LOSE`,
            whatever the budget.
    """

    def __init__(
        self,
        max_restarts: int,
        *,
        required: Collection[str] | None = None,
        alone: Collection[str] = (),
        permanent: Collection[int] = (EXIT_FAILED,),
        elastic: Collection[str] = (),
    ) -> None:
        self.max_restarts = max_restarts
        self.elastic = frozenset(elastic)
        self.gone: set[str] = set()
        self.required = None if required is None else tuple(required)
        self.alone = frozenset(alone)
        self.permanent = frozenset(permanent)
        self.restarts = 0
        self.member_restarts = 0

    def mark_gone(self, name: str) -> None:
        """Member `name`'s node is gone for good (the caller knows, e.g. from a `:lost` fault):
        its next exit is `Action.LOSE`, whatever the budget."""
        self.gone |= {name}

    def decide(self, group: ProcessGroup, ended: Exit) -> Verdict:
        required = group.names if self.required is None else self.required
        what = f"{ended.name} exited with {ended.describe()}"
        if ended.name in required and ended.returncode == 0:
            if all(group.returncode(n) == 0 for n in required):
                return Verdict(Action.SUCCEED, "ok")
            return Verdict(Action.CONTINUE, what)
        if ended.name in self.gone:
            return Verdict(Action.LOSE, f"{what}; its node is gone for good", member=ended.name)
        if ended.name in self.alone and ended.name not in required:
            self.member_restarts += 1
            return Verdict(Action.RESTART, what)
        if ended.returncode in self.permanent:
            return Verdict(
                Action.FAIL,
                f"permanent failure: {ended.name} exited with {ended.returncode} "
                "(bad config or a bug; not retried)",
            )
        if self.restarts >= self.max_restarts:
            if ended.name in self.elastic:
                return Verdict(
                    Action.LOSE,
                    f"{what}; its restarts are exhausted ({self.max_restarts} used)",
                    exhausted=True,
                    member=ended.name,
                )
            return Verdict(Action.FAIL, what, exhausted=True)
        self.restarts += 1
        return Verdict(Action.RESTART_GROUP, what)


RESTART_POLICIES = ("Never", "OnFailure", "Always", "ExitCode")


class ReplicaRestart:
    """The training operator's per-replica `restartPolicy`, restarts against `backoffLimit`.

    Args:
        policies: member name -> restartPolicy (Never, OnFailure, Always, ExitCode); a member
            not listed is Never.
        backoff_limit: restarts allowed in all (None: unlimited); counted in `restarts`.

    An exit 0 is a success (CONTINUE: the job's success policy decides what it means); any
    other code is restarted under OnFailure and Always, under ExitCode only when retryable
    (128 and above), never under Never.
    """

    def __init__(self, policies: Mapping[str, str], backoff_limit: int | None = None) -> None:
        self.policies = dict(policies)
        self.backoff_limit = backoff_limit
        self.restarts = 0

    def decide(self, group: ProcessGroup, ended: Exit) -> Verdict:
        code = ended.code
        if code == 0:
            return Verdict(Action.CONTINUE, "exited 0")
        policy = self.policies.get(ended.name, "Never")
        retry = (policy == "ExitCode" and is_retryable(code)) or policy in ("OnFailure", "Always")
        reason = (
            f"exited {code} ({'retryable' if retry else 'permanent'} under restartPolicy {policy})"
        )
        if retry and (self.backoff_limit is None or self.restarts < self.backoff_limit):
            self.restarts += 1
            return Verdict(Action.RESTART, reason)
        return Verdict(Action.FAIL, reason, exhausted=retry)
