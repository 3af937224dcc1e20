"""The ServerApp's Grid with a 1 s reply poll.

Flower 1.42's deployment Grid (`HttpGrid.send_and_receive`) pushes a round's messages and then
polls the SuperLink for the replies every 3 s, so every exchange of a round (train, evaluate,
each SecAgg+ step, Baton's queries) waits on average 1.5 s after its last reply arrived, up to
3 s. `QuickGrid` wraps the Grid the ServerApp is given and polls every second through the
public `push_messages`/`pull_messages` calls; everything else is the wrapped Grid's.

Why 1 s and not faster: every pull is an HTTP call the SuperLink answers, and a reply cannot
come sooner than a SuperNode's pull (Flower's loop sleeps 3 s when it finds nothing) plus a
fresh ClientApp process. It polled every 0.25 s (Flower's newer agent grid's interval) while
the SuperNodes' SuperExecs asked for apps every 0.2 s; at 1 s for both, the federated stage's
real-process test (3 SuperNodes, a 90 s round timeout waited out) used 181 and 195 CPU-s
against 257 and 262 alone on 2 cores, and took 224 and 230 s against 254 and 262 s.

Each reply is pulled on its own, in its own thread, because one reply can hold the others back.
The SuperLink hands a reply out once (its PullMessages deletes it) with the list of the objects
it is made of; Flower's `HttpGrid.pull_messages` then pulls each message's objects in turn and
waits for missing ones: a client killed while uploading its reply (its message pushed, not all
its objects) keeps that call waiting until the SuperLink drops the upload, 180 s later
(OBJECT_PUSH_SESSION_TTL_SECONDS), past any round timeout. Every reply pulled in the same call
waited behind it, and the replies that arrived meanwhile were never pulled: a round whose
healthy clients had answered in seconds ended with "0 clients trained". Pulled one id a call, a
stuck upload holds only its own thread. The price is one call a second per reply waited for
(three for three clients, where one did), capped at MAX_PULLS_PER_S in all. When the round ends, a reply still being pulled is
reported as Flower reports an upload that never completed (MESSAGE_UNAVAILABLE); its thread is a
daemon and ends when the SuperLink drops the upload.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from flwr.app import Message, Metadata
from flwr.app.error import Error
from flwr.common.constant import SUPERLINK_NODE_ID, ErrorCode
from flwr.serverapp import Grid

POLL_S = 1.0


class QuickGrid(Grid):
    """Delegates to `grid`; `send_and_receive` polls the replies every `poll_s` seconds.
    With `admit`, the nodes it reports are only those `admit` keeps (the registered nodes,
    pipeline.federated.admission): a strategy samples from these, so no other node is ever
    sent a message."""

    def __init__(self, grid: Grid, poll_s: float = POLL_S,
                 admit: Callable[[Iterable[int]], list[int]] | None = None) -> None:
        self._grid, self._poll_s, self._admit = grid, poll_s, admit

    # -- delegated ---------------------------------------------------------------------
    def set_run(self, run: Any) -> None:
        self._grid.set_run(run)

    @property
    def run(self) -> Any:
        return self._grid.run

    def create_message(self, *args: Any, **kwargs: Any) -> Message:
        return self._grid.create_message(*args, **kwargs)

    def get_node_ids(self) -> Iterable[int]:
        nodes = self._grid.get_node_ids()
        return nodes if self._admit is None else self._admit(nodes)

    def get_nodes(self) -> Iterable[Any]:
        nodes = list(self._grid.get_nodes())
        if self._admit is None:
            return nodes
        keep = set(self._admit(n.node_id for n in nodes))
        return [n for n in nodes if n.node_id in keep]

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        return self._grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self._grid.pull_messages(message_ids)

    def __getattr__(self, name: str) -> Any:  # anything else a Flower version adds
        if name == "_grid":
            raise AttributeError(name)
        return getattr(self._grid, name)

    # -- the one change ----------------------------------------------------------------
    def send_and_receive(self, messages: Iterable[Message], *,
                         timeout: float | None = None) -> Iterable[Message]:
        """Push `messages`, then pull replies until all came back or `timeout` passed (as
        Flower's: no timeout waits for all; an expired timeout returns what arrived, and an
        error reply for each reply still being pulled then)."""
        sent = list(messages)
        ids = [i for i in self.push_messages(sent) if i]
        asked = {m.metadata.message_id: m.metadata for m in sent
                 if m.metadata.message_id in ids}
        del sent  # the content (the model's weights) is not kept for the round
        end = None if timeout is None else time.monotonic() + timeout
        pending, replies = set(ids), []
        done: queue.Queue[tuple[str, Any]] = queue.Queue()
        pulling: dict[str, float] = {}  # message id -> when its pull began

        def pull_idle() -> None:
            for mid in pending - pulling.keys():
                pulling[mid] = time.monotonic()
                threading.Thread(target=self._pull_one, args=(mid, done), daemon=True,
                                 name=f"baton-pull-{mid[:8]}").start()

        def take(until: float, waiting_for: set[str] | None = None) -> None:
            """Replies and errors until `until`, or (`waiting_for`) until those pulls ended."""
            while pending and (waiting_for is None or waiting_for & pulling.keys()):
                try:
                    mid, got = done.get(timeout=max(0.0, until - time.monotonic()))
                except queue.Empty:
                    return
                del pulling[mid]
                if isinstance(got, BaseException):
                    raise got
                replies.extend(got)
                pending.difference_update(m.metadata.reply_to_message_id for m in got)

        while pending:
            pull_idle()
            # a pull a second for each reply waited for, at most MAX_PULLS_PER_S in all
            every = max(self._poll_s, len(pending) / MAX_PULLS_PER_S)
            if end is None or time.monotonic() + every < end:
                take(time.monotonic() + every)
                continue
            # the round ends: what came by now, a last pull at the timeout, then an error
            # reply for each reply still being pulled
            take(end)
            last = pending - pulling.keys()
            pull_idle()
            take(time.monotonic() + LAST_PULL_S, waiting_for=last)
            now = time.monotonic()
            replies.extend(_unfinished(asked[mid], now - pulling[mid])
                           for mid in sorted(pending & pulling.keys())
                           if now - pulling[mid] >= STUCK_S)
            return replies
        return replies

    def _pull_one(self, mid: str, done: queue.Queue[tuple[str, Any]]) -> None:
        """Pull the reply to `mid` (if it has come), handing the result or error to `done`."""
        try:
            done.put((mid, list(self._grid.pull_messages([mid]))))
        except BaseException as exc:  # noqa: BLE001 - re-raised by send_and_receive
            done.put((mid, exc))


# a pull of one id answers in milliseconds; one this old when the round ends is waiting for
# the objects of an upload that has not completed
STUCK_S = 2.0
LAST_PULL_S = 2.0  # how long the last pull, at the round's end, may take
# a round of 3 clients pulls 3 times a second; one of 200 pulls each reply every 10 s rather
# than make 200 calls a second (the SuperNodes' own polls are one call per 3 s each)
MAX_PULLS_PER_S = 20


def _unfinished(asked: Metadata, waited_s: float) -> Message:
    """The error reply for a message whose reply was still being pulled when the round ended:
    the SuperLink had its message, not yet all its objects (Flower's own error for an upload
    that never completes, which it gives only when the SuperLink drops it, 180 s later)."""
    from flwr.app.message import make_message

    return make_message(
        metadata=Metadata(
            run_id=asked.run_id, message_id="", src_node_id=SUPERLINK_NODE_ID,
            dst_node_id=SUPERLINK_NODE_ID, message_type=asked.message_type,
            group_id=asked.group_id, ttl=0, reply_to_message_id=asked.message_id,
            created_at=time.time()),
        error=Error(code=ErrorCode.MESSAGE_UNAVAILABLE,
                    reason=(f"its reply's upload had not completed when the round ended "
                            f"(still pulling its objects after {waited_s:.0f} s)")))
