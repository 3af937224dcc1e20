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
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from flwr.app import Message
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
        Flower's: no timeout waits for all; an expired timeout returns what arrived)."""
        pending = set(self.push_messages(messages))
        end = None if timeout is None else time.monotonic() + timeout
        replies: list[Message] = []
        while True:
            pulled = list(self.pull_messages(pending))
            replies.extend(pulled)
            pending.difference_update(m.metadata.reply_to_message_id for m in pulled)
            if not pending:
                return replies
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                return replies
            time.sleep(self._poll_s if left is None else min(self._poll_s, left))
