"""Descriptor exhaustion and idle connections: `baton serve` keeps its model and its head.

Was: ~260 idle connections under a 256-descriptor limit made the version poller's
`listdir` fail with EMFILE, which read as "no versions": the model was unloaded and
TensorFlow segfaulted. Now: connections are capped below the descriptor limit (the
longest-idle one closed to make room), accept() failing for want of descriptors backs
off instead of spinning, a base path that cannot be read unloads nothing, and idle REST
connections are closed after a timeout.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import resource
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from conftest import install
from rest_loop_server import RestServer
from test_manager import fake_loader

from baton.serving import http as http_mod
from baton.serving.config import ModelConfig
from baton.serving.manager import ModelManager

HERE = os.path.dirname(os.path.abspath(__file__))
BODY = json.dumps({"instances": [[0.5] * 32]}).encode()


# -- the version poller -----------------------------------------------------------------

def test_a_base_path_that_cannot_be_read_unloads_nothing(tmp_path, monkeypatch, caplog):
    os.makedirs(tmp_path / "1")
    (tmp_path / "1" / "ok").touch()
    m = ModelManager([ModelConfig("m", str(tmp_path))], poll_seconds=-1, loader=fake_loader)
    m.poll_once()
    assert m.resolve("m").version == 1
    real = os.listdir

    def emfile(path):
        if str(path) == str(tmp_path):
            raise OSError(errno.EMFILE, "Too many open files", str(path))
        return real(path)

    monkeypatch.setattr(os, "listdir", emfile)
    caplog.set_level(logging.INFO, logger="baton.serving.manager")
    for _ in range(3):
        m.poll_once()
    assert m.resolve("m").version == 1  # still served
    errors = [r for r in caplog.records if "Cannot read base path" in r.message]
    assert len(errors) == 1 and "Too many open files" in errors[0].message  # once
    monkeypatch.setattr(os, "listdir", real)
    (tmp_path / "2").mkdir()
    (tmp_path / "2" / "ok").touch()
    m.poll_once()  # readable again: polling goes on
    assert m.resolve("m").version == 2
    assert any("readable again" in r.message for r in caplog.records)
    # as TF Serving: a base path that disappears is an error of the poll, not "no versions"
    os.rename(tmp_path, str(tmp_path) + ".moved")
    m.poll_once()
    assert m.resolve("m").version == 2


# -- baton serve under a 256-descriptor limit --------------------------------------------

@pytest.fixture(scope="module")
def mlp_base(tmp_path_factory):
    """The benchmark MLP, exported by a child process (TensorFlow stays out of this one)."""
    root = tmp_path_factory.mktemp("mlp")
    code = (f"import sys; sys.path.insert(0, {HERE!r}); import fixture_models as fm; "
            f"fm.build_mlp({str(root / 'export')!r})")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert done.returncode == 0, done.stderr[-2000:]
    install(str(root / "export"), str(root / "base"), 1)
    return str(root / "base")


def _limit_descriptors() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


def _serve(base: str, tmp_path, *flags: str) -> tuple[subprocess.Popen, dict, str]:
    ports = tmp_path / "ports.json"
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "baton.serving", "--model_name=m",
             f"--model_base_path={base}", "--bind_free_ports", f"--ports_file={ports}",
             "--file_system_poll_wait_seconds=0.2", *flags],
            stdout=out, stderr=subprocess.STDOUT, preexec_fn=_limit_descriptors,
            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    deadline = time.monotonic() + 120
    while not ports.exists():
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, "baton serve did not start"
        time.sleep(0.2)
    return proc, json.loads(ports.read_text()), str(log)


def _predict(rest: int, timeout: float = 10) -> int:
    req = urllib.request.Request(f"http://127.0.0.1:{rest}/v1/models/m:predict", data=BODY)
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status


def _hold(port: int, n: int, data: bytes = b"") -> list[socket.socket]:
    out = []
    for _ in range(n):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            if data:
                s.sendall(data)
            out.append(s)
        except OSError:
            pass
    return out


def _cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _stop(proc: subprocess.Popen, log: str) -> str:
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    with open(log) as f:
        return f.read()


@pytest.mark.slow
def test_idle_connections_under_a_256_descriptor_limit_leave_the_model_served(
        mlp_base, tmp_path):
    proc, ports, log = _serve(mlp_base, tmp_path)
    held: list[socket.socket] = []
    try:
        assert _predict(ports["rest"]) == 200
        preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\0\0\0\4\0\0\0\0\0"
        held += _hold(ports["rest"], 150) + _hold(ports["grpc"], 150, preface)
        time.sleep(1.5)  # several polls of the base path
        assert proc.poll() is None, "baton serve died"
        # a new client is served: an idle connection makes room for it
        assert _predict(ports["rest"]) == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{ports['rest']}/v1/models/m",
                                    timeout=10) as r:
            status = json.load(r)["model_version_status"]
        assert [s["state"] for s in status] == ["AVAILABLE"]
        for s in held:  # the flood ends: the model is still loaded and served
            s.close()
        held = []
        time.sleep(0.5)  # more polls
        assert _predict(ports["rest"]) == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{ports['rest']}/v1/models/m",
                                    timeout=10) as r:
            status = json.load(r)["model_version_status"]
        assert [s["state"] for s in status] == ["AVAILABLE"]
    finally:
        for s in held:
            s.close()
        out = _stop(proc, log)
    assert proc.returncode == 0, out[-3000:]
    assert "Unloaded servable" not in out and "Cannot read base path" not in out, out[-3000:]


@pytest.mark.slow
def test_accept_backs_off_when_descriptors_run_out(mlp_base, tmp_path):
    """A cap set above the descriptor limit: accept() itself fails with EMFILE. The server
    pauses accepting (no busy loop), keeps its model, and accepts again once
    descriptors are free."""
    proc, ports, log = _serve(mlp_base, tmp_path, "--max_connections=5000")
    held: list[socket.socket] = []
    try:
        assert _predict(ports["rest"]) == 200
        held = _hold(ports["rest"], 300, b"GET /v1/models/m HTTP/1.1\r\n")  # half a head
        time.sleep(0.5)
        cpu0 = _cpu(proc.pid)
        time.sleep(2.0)
        assert _cpu(proc.pid) - cpu0 < 1.0, "the server spins on its listening socket"
        assert proc.poll() is None
        for s in held:
            s.close()
        held = []
        deadline = time.monotonic() + 20
        while True:  # accepting again (the back-off is 1 s at most)
            try:
                assert _predict(ports["rest"], timeout=5) == 200
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        with urllib.request.urlopen(f"http://127.0.0.1:{ports['rest']}/v1/models/m",
                                    timeout=10) as r:  # the model stayed loaded
            assert [s["state"] for s in json.load(r)["model_version_status"]] == [
                "AVAILABLE"]
    finally:
        for s in held:
            s.close()
        out = _stop(proc, log)
    assert "pausing accepts" in out, out[-3000:]
    assert "Unloaded servable" not in out, out[-3000:]


# -- REST connections: idle close, slow heads, the cap -----------------------------------

@pytest.fixture()
def rest(request):
    r = RestServer(**getattr(request, "param", {}))
    yield r
    r.close()


def _get(s: socket.socket) -> bytes:
    s.sendall(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
    return s.recv(4096)


def _read_to_eof(s: socket.socket, timeout: float = 5) -> bytes | None:
    """What the server sends until it closes; None if it has not closed by `timeout`."""
    s.settimeout(timeout)
    out = b""
    try:
        while chunk := s.recv(4096):
            out += chunk
    except TimeoutError:
        return None
    except ConnectionResetError:
        pass
    return out


@pytest.mark.parametrize("rest", [{"idle_timeout": 0.3}], indirect=True)
def test_idle_rest_connections_are_closed(rest):
    with socket.create_connection(("127.0.0.1", rest.port), timeout=5) as s:
        assert _get(s).startswith(b"HTTP/1.1 200")
        t = time.monotonic()
        assert _read_to_eof(s) == b""  # closed by the server, not by our timeout
        assert 0.25 < time.monotonic() - t < 3


def test_a_request_head_that_never_ends_gets_408(rest, monkeypatch):
    monkeypatch.setattr(http_mod, "HEAD_TIMEOUT", 0.3)
    with socket.create_connection(("127.0.0.1", rest.port), timeout=5) as s:
        s.sendall(b"GET /x HTTP/1.1\r\nHost: x\r\n")  # and nothing more
        out = _read_to_eof(s)
    assert out.startswith(b"HTTP/1.1 408 Request Timeout")
    assert b"did not arrive within 0.3 s" in out


@pytest.mark.parametrize("rest", [{"max_connections": 3}], indirect=True)
def test_rest_connection_cap_evicts_idle_then_refuses_with_503(rest):
    idle = [socket.create_connection(("127.0.0.1", rest.port), timeout=5) for _ in range(3)]
    for s in idle:
        assert _get(s).startswith(b"HTTP/1.1 200")
    with socket.create_connection(("127.0.0.1", rest.port), timeout=5) as new:
        assert _get(new).startswith(b"HTTP/1.1 200")  # an idle one made room
        assert sum(_read_to_eof(s, 0.5) == b"" for s in idle) >= 1
        # three connections in the middle of a request: none is idle, the next is refused
        busy = [socket.create_connection(("127.0.0.1", rest.port), timeout=5)
                for _ in range(3)]
        for s in busy:
            s.sendall(b"GET /x HTTP/1.1\r\n")
        time.sleep(0.3)
        with socket.create_connection(("127.0.0.1", rest.port), timeout=5) as refused:
            out = _read_to_eof(refused)
        assert out.startswith(b"HTTP/1.1 503 Service Unavailable")
        assert b"Too many connections" in out
    for s in idle + busy:
        s.close()
