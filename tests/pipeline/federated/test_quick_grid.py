"""QuickGrid: the ServerApp's Grid pulls replies every second instead of Flower 1.42's 3 s, with
Flower's send_and_receive semantics (all replies, or what came back when the timeout passed),
and one reply whose upload never completes holds back no other.

The wrapped grids here answer as Flower 1.42's HttpGrid does: a reply is handed out once, by the
pull that finds it (the SuperLink's PullMessages deletes it), and a pull that finds a reply whose
objects are not all uploaded waits for them (HttpGrid.pull_messages -> pull_objects) until the
SuperLink drops the upload, 180 s later."""

from __future__ import annotations

import threading
import time
import types

import pytest

pytest.importorskip("flwr")

from baton.pipeline.federated.grid import QuickGrid  # noqa: E402


def _message(node: int) -> types.SimpleNamespace:
    return types.SimpleNamespace(metadata=types.SimpleNamespace(
        message_id="", dst_node_id=node, src_node_id=1, run_id=7, message_type="train",
        group_id="1"))


def _reply(mid: str) -> types.SimpleNamespace:
    return types.SimpleNamespace(metadata=types.SimpleNamespace(reply_to_message_id=mid),
                                 has_error=lambda: False)


class _SlowRepliesGrid:
    """Answers message i `delays[i]` seconds after it was pushed, once; counts the pulls of
    each message. The reply to each message in `stuck` is there but its upload never
    completes: its pull waits until `release` is set or 10 s passed (Flower: until the upload
    is dropped, 180 s)."""

    def __init__(self, delays: list[float], stuck: frozenset[str] = frozenset()) -> None:
        self.delays, self.pushed_at, self.stuck = delays, 0.0, stuck
        self.pulls: dict[str, int] = {}
        self.handed: set[str] = set()
        self.release = threading.Event()
        self.run = types.SimpleNamespace(run_id=7)

    def push_messages(self, messages):
        self.pushed_at = time.monotonic()
        ids = []
        for i, m in enumerate(messages):
            m.metadata.message_id = f"m{i}"  # as HttpGrid.push_messages populates it
            ids.append(f"m{i}")
        return ids

    def pull_messages(self, ids):
        age = time.monotonic() - self.pushed_at
        out = []
        for i in sorted(ids):
            self.pulls[i] = self.pulls.get(i, 0) + 1
            if i in self.handed or age < self.delays[int(i[1:])]:
                continue
            self.handed.add(i)  # the SuperLink hands a reply out once
            if i in self.stuck:
                self.release.wait(10)
                continue  # Flower: an error reply, 180 s later
            out.append(_reply(i))
        return out

    def get_node_ids(self):
        return [1, 2, 3]


def test_replies_are_picked_up_within_a_second_not_three():
    inner = _SlowRepliesGrid([0.0, 0.5, 1.5])
    t = time.monotonic()
    replies = list(QuickGrid(inner).send_and_receive([_message(n) for n in (2, 3, 4)],
                                                     timeout=10))
    took = time.monotonic() - t
    assert sorted(r.metadata.reply_to_message_id for r in replies) == ["m0", "m1", "m2"]
    assert 1.5 <= took < 2.8, took  # Flower's HttpGrid: 3 s, at its second pull
    # one pull a second for each message still waited for (at 0, 1 and 2 s), no more
    assert inner.pulls == {"m0": 1, "m1": 2, "m2": 3}, inner.pulls


def test_a_timeout_returns_what_came_back():
    inner = _SlowRepliesGrid([0.0, 60.0])
    t = time.monotonic()
    replies = list(QuickGrid(inner).send_and_receive([_message(2), _message(3)], timeout=0.5))
    assert 0.5 <= time.monotonic() - t < 1.0
    assert [r.metadata.reply_to_message_id for r in replies] == ["m0"]


def test_a_reply_whose_upload_never_completes_holds_back_no_other():
    """The CI failure this fixes: a client SIGKILLed while uploading its reply (round 2's
    torgersen) kept Flower's pull waiting for its objects, and the two healthy clients'
    replies, which came seconds later, were never pulled: "round 2: 0 clients trained"."""
    from flwr.common.constant import ErrorCode

    inner = _SlowRepliesGrid([0.2, 1.2, 2.2], stuck=frozenset({"m0"}))
    try:
        t = time.monotonic()
        replies = list(QuickGrid(inner).send_and_receive(
            [_message(n) for n in (2, 3, 4)], timeout=5))
        took = time.monotonic() - t
    finally:
        inner.release.set()
    got = {r.metadata.reply_to_message_id: r for r in replies}
    assert sorted(got) == ["m0", "m1", "m2"], got
    assert not got["m1"].has_error() and not got["m2"].has_error()
    # the round waits for the stuck reply until its timeout, then reports it as Flower reports
    # an upload that never completed, naming the client it was asked of
    assert 5 <= took < 6.5, took
    stuck = got["m0"]
    assert stuck.has_error() and stuck.error.code == ErrorCode.MESSAGE_UNAVAILABLE
    assert "upload had not completed" in stuck.error.reason, stuck.error.reason
    assert stuck.metadata.message_type == "train" and stuck.metadata.run_id == 7


def test_a_reply_not_there_yet_at_the_timeout_is_no_reply_not_an_error():
    inner = _SlowRepliesGrid([0.0, 60.0])
    replies = list(QuickGrid(inner).send_and_receive([_message(2), _message(3)], timeout=2.5))
    assert [r.metadata.reply_to_message_id for r in replies] == ["m0"]


def test_a_large_round_pulls_at_most_twenty_times_a_second():
    """60 replies waited for: each is pulled every 3 s (60 / MAX_PULLS_PER_S), not every
    second, so the ServerApp's polls stay below its SuperNodes' own (one call per 3 s each)."""
    from baton.pipeline.federated.grid import MAX_PULLS_PER_S

    assert MAX_PULLS_PER_S == 20
    inner = _SlowRepliesGrid([60.0] * 60)
    replies = list(QuickGrid(inner).send_and_receive([_message(n) for n in range(60)],
                                                     timeout=3.5))
    assert replies == []
    # at 0 and 3 s, and the last pull at the 3.5 s timeout: 3 each (7 at one a second)
    assert set(inner.pulls.values()) == {3}, inner.pulls


def test_a_reply_that_comes_at_the_timeout_is_taken():
    """The polls fall at 0, 1 and 2 s; a last pull at the 2.5 s timeout takes a reply stored
    at 2.2 s (a late client's expiry error, which the SuperLink makes at the TTL, is one)."""
    inner = _SlowRepliesGrid([0.0, 2.2])
    t = time.monotonic()
    replies = list(QuickGrid(inner).send_and_receive([_message(2), _message(3)], timeout=2.5))
    assert 2.5 <= time.monotonic() - t < 3.5
    assert [r.metadata.reply_to_message_id for r in replies] == ["m0", "m1"]


def test_an_error_pulling_reaches_the_caller():
    class Broken(_SlowRepliesGrid):
        def pull_messages(self, ids):
            raise RuntimeError("the SuperLink said no")

    with pytest.raises(RuntimeError, match="said no"):
        QuickGrid(Broken([0.0])).send_and_receive([_message(2)], timeout=5)


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
