"""A REST HttpServerState on an event loop of its own thread, with its own connection
table: the HTTP layer alone, no model (the descriptor and slow-reader tests)."""

from __future__ import annotations

import asyncio
import threading

from baton.serving.connections import ConnectionTable, Listener, bind_sockets, sweep_forever
from baton.serving.http import REFUSAL, HttpProtocol, HttpServerState


class RestServer:
    """Answers every request with `answer` (200), at once."""

    def __init__(self, max_connections: int = 100, idle_timeout: float = 60.0,
                 answer: bytes = b'"ok"', new_loop=asyncio.new_event_loop,
                 sweep_seconds: float = 0.1):
        def handler(conn, method, target, body):
            conn.respond(200, answer)

        self.table = ConnectionTable(max_connections)
        self.state = HttpServerState(handler, 1 << 20, 0.0, self.table, idle_timeout)
        self.loop = new_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        sock = bind_sockets("127.0.0.1", 0)[0]
        self.port = sock.getsockname()[1]

        async def start():
            self.listener = Listener(self.loop, sock, lambda: HttpProtocol(self.state),
                                     self.table, REFUSAL, "REST")
            self.sweeper = self.loop.create_task(sweep_forever(self.table, self.loop,
                                                               sweep_seconds))

        asyncio.run_coroutine_threadsafe(start(), self.loop).result(10)

    def on_loop(self, fn):
        """fn() run on the server's loop (its state is the loop's alone)."""
        async def run():
            return fn()
        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(10)

    def close(self) -> None:
        def stop():
            self.sweeper.cancel()
            self.listener.close()
            for c in list(self.state.connections):
                if c.transport is not None:
                    c.transport.abort()

        self.on_loop(stop)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()
