"""The counting relay forwards a TCP stream both ways and counts every byte."""

from __future__ import annotations

import socket
import threading
import time

from baton.pipeline.federated import wire


def test_relay_counts_bytes_each_way(tmp_path):
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def echo_twice():
        conn, _ = server.accept()
        data = b""
        while len(data) < 1000:
            data += conn.recv(4096)
        conn.sendall(data * 2)
        conn.close()

    threading.Thread(target=echo_twice, daemon=True).start()
    relays = wire.Relays(("127.0.0.1", port), tmp_path / "wire.json")
    try:
        with socket.create_connection(("127.0.0.1", relays.add("client-0")), timeout=5) as c:
            c.sendall(b"x" * 1000)
            got = b""
            while len(got) < 2000:
                chunk = c.recv(4096)
                if not chunk:
                    break
                got += chunk
        assert got == b"x" * 2000
        deadline = time.time() + 5
        while relays.snapshot()["client-0"] != {"up": 1000, "down": 2000} and time.time() < deadline:
            time.sleep(0.05)
        assert relays.snapshot()["client-0"] == {"up": 1000, "down": 2000}
        relays.publish()
        assert wire.read(tmp_path / "wire.json") == {"client-0": {"up": 1000, "down": 2000}}
    finally:
        relays.close()
        server.close()
