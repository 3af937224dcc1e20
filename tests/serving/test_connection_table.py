"""The connection cap counts each connection once.

Was: the Listener counted an accepted connection as pending until its task resumed, and
the protocol's connection_made had already added it to the table by then, so for a loop
iteration it counted twice. A burst of connections looked like more than the cap, and idle
ones were evicted below it (seen under load: test_rest_connection_cap_evicts_idle_then_
refuses_with_503 had one of its first three connections closed, at a cap of 3).
"""

from __future__ import annotations

import asyncio
import socket

from baton.serving.connections import ConnectionTable, Listener, bind_sockets


class _Counting(asyncio.Protocol):
    """Adds itself to the table, as the REST and gRPC protocols do, and notes the count."""

    progress = 0

    def __init__(self, table: ConnectionTable, seen: list[int]):
        self.table, self.seen = table, seen

    def connection_made(self, transport):
        self.table.add(self)
        self.seen.append(len(self.table))

    def active(self) -> bool:
        return False

    def close_idle(self) -> None:
        raise AssertionError("evicted below the cap")


def test_a_connection_counts_once_from_connection_made_on():
    loop = asyncio.new_event_loop()
    table = ConnectionTable(3)
    seen: list[int] = []
    sock = bind_sockets("127.0.0.1", 0)[0]
    port = sock.getsockname()[1]

    async def scenario():
        listener = Listener(loop, sock, lambda: _Counting(table, seen), table, b"", "test")
        clients = []
        try:
            for _ in range(3):
                clients.append(socket.create_connection(("127.0.0.1", port)))
                for _ in range(20):  # the connection is made, the Listener's task not done
                    if len(seen) == len(clients):
                        break
                    await asyncio.sleep(0)
            while len(seen) < 3:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)
        finally:
            listener.close()
            for c in clients:
                c.close()

    try:
        loop.run_until_complete(asyncio.wait_for(scenario(), 10))
    finally:
        loop.close()
    assert seen == [1, 2, 3], seen  # was [2, 3, 4] or alike: counted twice
    assert len(table) == 3 and table.evicted == 0 and table.pending == 0
