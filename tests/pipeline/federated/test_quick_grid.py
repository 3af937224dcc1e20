"""QuickGrid: the ServerApp's Grid pulls replies every second instead of Flower 1.42's 3 s, with
Flower's send_and_receive semantics (all replies, or what came back when the timeout passed)."""

from __future__ import annotations

import time
import types

import pytest

pytest.importorskip("flwr")

from baton.pipeline.federated.grid import QuickGrid  # noqa: E402


class _SlowRepliesGrid:
    """Answers message i `delays[i]` seconds after it was pushed; counts the pulls."""

    def __init__(self, delays: list[float]) -> None:
        self.delays, self.pulls, self.pushed_at = delays, 0, 0.0
        self.run = types.SimpleNamespace(run_id=7)

    def push_messages(self, messages):
        self.pushed_at = time.monotonic()
        return [f"m{i}" for i, _ in enumerate(messages)]

    def pull_messages(self, ids):
        self.pulls += 1
        age = time.monotonic() - self.pushed_at
        return [types.SimpleNamespace(metadata=types.SimpleNamespace(reply_to_message_id=i))
                for i in sorted(ids) if age >= self.delays[int(i[1:])]]

    def get_node_ids(self):
        return [1, 2, 3]


def test_replies_are_picked_up_within_a_second_not_three():
    inner = _SlowRepliesGrid([0.0, 0.5, 1.5])
    t = time.monotonic()
    replies = list(QuickGrid(inner).send_and_receive(["a", "b", "c"], timeout=10))
    took = time.monotonic() - t
    assert sorted(r.metadata.reply_to_message_id for r in replies) == ["m0", "m1", "m2"]
    assert 1.5 <= took < 2.8, took  # Flower's HttpGrid: 3 s, at its second pull
    assert 3 <= inner.pulls <= 4, inner.pulls


def test_a_timeout_returns_what_came_back():
    inner = _SlowRepliesGrid([0.0, 60.0])
    t = time.monotonic()
    replies = list(QuickGrid(inner).send_and_receive(["a", "b"], timeout=0.5))
    assert 0.5 <= time.monotonic() - t < 1.0
    assert [r.metadata.reply_to_message_id for r in replies] == ["m0"]


def test_everything_else_is_the_wrapped_grids():
    inner = _SlowRepliesGrid([])
    grid = QuickGrid(inner)
    assert grid.run.run_id == 7 and list(grid.get_node_ids()) == [1, 2, 3]
    assert grid.delays == []  # an attribute QuickGrid does not define


def test_the_daemons_superexecs_keep_flowers_poll_unless_the_user_sets_one(tmp_path,
                                                                            monkeypatch):
    """Flower's SuperExec asks for an app to launch every 1 s by default, and the federation
    keeps it (each ask costs a daemon an HTTP call); a value in the user's environment
    reaches the daemons."""
    from baton.pipeline.federated.launch import flower_env

    variable = "FLWR_SUPEREXEC_TASK_POLL_INTERVAL"
    monkeypatch.delenv(variable, raising=False)
    assert variable not in flower_env(tmp_path / "a")
    monkeypatch.setenv(variable, "2")
    assert flower_env(tmp_path / "b")[variable] == "2"
