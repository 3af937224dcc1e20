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


def test_inspect_shows_a_line_per_federated_round():
    from baton.pipeline.commands.inspect import federated_rounds

    lines = federated_rounds([
        {"round": 1, "clients": ["a", "b"], "loss": 0.5, "accuracy": 0.75, "bytes_up": 1200,
         "bytes_down": 300},
        {"round": 2, "clients": ["a"], "loss": 0.4, "accuracy": 0.8, "bytes_up": 1000,
         "bytes_down": 250, "epsilon": 1.25}])
    assert lines[0].split() == ["round", "clients", "loss", "accuracy/mse", "bytes", "up",
                                "bytes", "down", "epsilon"]
    assert lines[1].split() == ["1", "a,b", "0.5000", "0.7500", "1,200", "300", "-"]
    assert lines[2].split()[-1] == "1.250"
    # an external federation (--superlink) counts no bytes: "-", not a measured 0
    external = federated_rounds([{"round": 1, "clients": ["a"], "loss": 0.5, "accuracy": 0.7}])
    assert external[1].split() == ["1", "a", "0.5000", "0.7000", "-", "-", "-"]
