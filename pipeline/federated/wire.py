"""Bytes on the wire: a counting TCP relay between each client and the server.

Each SuperNode reaches the SuperLink's Fleet API through its own relay, so what it sends up and
receives down is counted where it is real: every byte of the connection (Flower 1.42's Fleet
API over HTTP: headers, protobuf bodies, polling, heartbeats and retries included), not a size
computed from tensor shapes.
The relays run in threads of the process that starts the federation and publish their counters
to a JSON file (atomic rename, a few times a second, and on demand) that the server app reads
at each round's end.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import socket
import threading
import time
from pathlib import Path
from typing import Any

CONNECT_S = 60.0  # how long a client's connection waits for the server to (re)appear


class Relay:
    """127.0.0.1:<port> -> target; counts bytes up (client -> server) and down."""

    def __init__(self, name: str, target: tuple[str, int]) -> None:
        self.name, self.target = name, target
        self.up = self.down = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=f"relay-{name}", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self._listener.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._pipe, args=(conn,), daemon=True).start()

    def _pipe(self, client: socket.socket) -> None:
        # the server may be restarting (a rehearsed SuperLink fault): hold the client's
        # connection while it comes back, as a network would, rather than accept and drop it
        # at once (over TLS a dropped handshake is an SSL error, which Flower does not retry)
        deadline = time.monotonic() + CONNECT_S
        while True:
            try:
                server = socket.create_connection(self.target, timeout=5)
                break
            except OSError:
                if self._stop.is_set() or time.monotonic() > deadline:
                    client.close()
                    return
                time.sleep(0.2)
        server.settimeout(None)
        sel = selectors.DefaultSelector()
        sel.register(client, selectors.EVENT_READ, (server, "up"))
        sel.register(server, selectors.EVENT_READ, (client, "down"))
        try:
            while not self._stop.is_set():
                for key, _ in sel.select(timeout=0.2):
                    src: Any = key.fileobj
                    dst, direction = key.data
                    data = src.recv(1 << 16)
                    if not data:
                        return
                    dst.sendall(data)
                    with self._lock:
                        if direction == "up":
                            self.up += len(data)
                        else:
                            self.down += len(data)
        except OSError:
            return
        finally:
            sel.close()
            client.close()
            server.close()

    def counts(self) -> dict[str, int]:
        with self._lock:
            return {"up": self.up, "down": self.down}

    def close(self) -> None:
        self._stop.set()
        self._listener.close()


class Relays:
    """One relay per client, and the file their counters go to."""

    def __init__(self, target: tuple[str, int], path: Path) -> None:
        self.target, self.path = target, path
        self.relays: dict[str, Relay] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._publish_loop, daemon=True)
        self._thread.start()

    def add(self, name: str) -> int:
        """A relay for client `name`; its port."""
        self.relays[name] = Relay(name, self.target)
        return self.relays[name].port

    def snapshot(self) -> dict[str, dict[str, int]]:
        return {n: r.counts() for n, r in self.relays.items()}

    def publish(self) -> None:
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"time": time.time(), "clients": self.snapshot()}))
        tmp.replace(self.path)

    def _publish_loop(self) -> None:
        while not self._stop.wait(0.2):
            with contextlib.suppress(OSError):
                self.publish()

    def close(self) -> None:
        self._stop.set()
        for r in self.relays.values():
            r.close()
        with contextlib.suppress(OSError):
            self.publish()


def read(path: Path) -> dict[str, dict[str, int]]:
    """The counters last published (empty before the first)."""
    try:
        return json.loads(Path(path).read_text())["clients"]
    except (OSError, ValueError, KeyError):
        return {}
