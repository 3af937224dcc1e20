"""The SuperNode's heartbeat survives an unexpected answer (pipeline.federated.supernode_child).

Flower 1.42's heartbeat thread ends on one HTTP 500: the node then goes offline for the
SuperLink 60 s later, and every message to it, its real replies included, comes back as "Node
Unavailable". The first test pins that upstream behaviour (when it fails, Flower retries by
itself and supernode_child can go); the others show Baton's SuperNode beating on."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("flwr")

import httpx  # noqa: E402


def _answers(first_status: int):
    """A heartbeat function whose first call gets `first_status`, the rest succeed."""
    calls: list[float] = []
    beat = threading.Event()

    def fn() -> bool:
        calls.append(time.monotonic())
        if len(calls) == 1:
            req = httpx.Request("POST", "https://superlink/v1/fleet/send-node-heartbeat")
            res = httpx.Response(first_status, request=req)
            raise httpx.HTTPStatusError(f"{first_status}", request=req, response=res)
        beat.set()
        return True

    return fn, calls, beat


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_flowers_own_heartbeat_ends_on_one_http_500():
    from flwr.supercore.heartbeat import HeartbeatSender

    fn, calls, _ = _answers(500)
    sender = HeartbeatSender(fn)
    sender.start()
    sender._thread.join(timeout=30)
    assert not sender._thread.is_alive() and len(calls) == 1


@pytest.mark.parametrize("status", [500, 404])
def test_the_supernodes_heartbeat_retries_an_unexpected_answer(status, caplog):
    from flwr.supernode import fleet_http_connection

    from baton.pipeline.federated.supernode_child import install

    install()
    install()  # twice is once
    fn, calls, beat = _answers(status)
    sender = fleet_http_connection.HeartbeatSender(fn)
    sender.start()
    try:
        assert beat.wait(timeout=30), "no heartbeat after the failed one"
        assert sender.is_running and len(calls) == 2
    finally:
        sender.stop()
    assert f"Node heartbeat failed (HTTPStatusError: {status})" in caplog.text


def test_the_child_is_flowers_own_command():
    res = subprocess.run([sys.executable, "-m", "baton.pipeline.federated.supernode_child",
                          "--help"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("usage: flower-supernode") and "--superlink" in res.stdout


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_401_still_ends_the_heartbeat_as_in_flower():
    """Flower's heartbeat function sends the node SIGINT on a 401 before it raises; beating
    again would send it again in the middle of the shutdown."""
    from flwr.supernode import fleet_http_connection

    from baton.pipeline.federated.supernode_child import install

    install()
    fn, calls, _ = _answers(401)
    sender = fleet_http_connection.HeartbeatSender(fn)
    sender.start()
    sender._thread.join(timeout=30)
    assert not sender._thread.is_alive() and len(calls) == 1
