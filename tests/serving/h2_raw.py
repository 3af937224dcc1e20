"""An attacker's HTTP/2 toolkit for the hostile-client tests: raw frames on a socket.

Frames are built by hand (a fuzzer must be able to send what no library would); header
blocks are HPACK-encoded by the `hpack` package (python-hyper), the attacker's tooling.
Also: a server in its own process (so its RSS is its own), and a latency probe that
makes real grpc calls beside the attack.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time

import grpc
from hpack import Encoder

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY = range(8)
WINDOW_UPDATE, CONTINUATION = 8, 9
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR = 0, 1, 2, 3
STREAM_CLOSED, FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL = 5, 6, 7, 8
COMPRESSION_ERROR, ENHANCE_YOUR_CALM = 9, 11
SERVICE = "test.Echo"
HERE = os.path.dirname(os.path.abspath(__file__))


def frame(ftype: int, flags: int, sid: int, payload: bytes = b"") -> bytes:
    n = len(payload)
    return struct.pack(">BHBBI", n >> 16, n & 0xFFFF, ftype, flags, sid) + payload


def settings(**values: int) -> bytes:
    ids = {"header_table_size": 1, "enable_push": 2, "max_concurrent_streams": 3,
           "initial_window_size": 4, "max_frame_size": 5, "max_header_list_size": 6}
    return frame(SETTINGS, 0, 0, b"".join(struct.pack(">HI", ids[k], v)
                                          for k, v in values.items()))


def request_block(method: str = "Echo", enc: Encoder | None = None, extra=()) -> bytes:
    return (enc or Encoder()).encode([
        (":method", "POST"), (":scheme", "http"), (":authority", "x"),
        (":path", f"/{SERVICE}/{method}"), ("content-type", "application/grpc"),
        ("te", "trailers"), *extra])


def headers(sid: int, block: bytes | None = None, end_stream: bool = False,
            end_headers: bool = True) -> bytes:
    flags = (END_HEADERS if end_headers else 0) | (END_STREAM if end_stream else 0)
    return frame(HEADERS, flags, sid, request_block() if block is None else block)


def message(body: bytes) -> bytes:
    return b"\x00" + len(body).to_bytes(4, "big") + body


def call(sid: int, body: bytes = b"hi", enc: Encoder | None = None) -> bytes:
    """A whole unary call: HEADERS and one DATA with END_STREAM."""
    return (frame(HEADERS, END_HEADERS, sid, request_block(enc=enc))
            + frame(DATA, END_STREAM, sid, message(body)))


class Peer:
    """One raw connection: send bytes, read frames (type, flags, stream, payload)."""

    def __init__(self, port: int, timeout: float = 10.0, preface: bool = True):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.frames: list[tuple[int, int, int, bytes]] = []
        self.eof = False
        if preface:
            self.send(PREFACE + frame(SETTINGS, 0, 0))

    def send(self, data: bytes) -> bool:
        """False when the server has closed the connection."""
        try:
            self.sock.sendall(data)
            return True
        except OSError:
            return False

    def _parse(self) -> None:
        pos = 0
        while len(self.buf) - pos >= 9:
            n = int.from_bytes(self.buf[pos:pos + 3], "big")
            if len(self.buf) - pos < 9 + n:
                break
            b = self.buf
            self.frames.append((b[pos + 3], b[pos + 4],
                                int.from_bytes(b[pos + 5:pos + 9], "big") & 0x7FFFFFFF,
                                b[pos + 9:pos + 9 + n]))
            pos += 9 + n
        self.buf = self.buf[pos:]

    def read_until(self, done, timeout: float = 10.0) -> list:
        """Reads until `done(frames)`, EOF or `timeout` (then AssertionError)."""
        deadline = time.monotonic() + timeout
        while not done(self.frames):
            if self.eof:
                return self.frames
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out; frames so far: {self.summary()}")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(1 << 20)
            except (ConnectionResetError, BrokenPipeError):
                chunk = b""
            except TimeoutError:
                continue
            if not chunk:
                self.eof = True
            self.buf += chunk
            self._parse()
        return self.frames

    def drain(self) -> None:
        """Reads what has arrived, without waiting (an attacker that keeps sending)."""
        self.sock.setblocking(False)
        try:
            while chunk := self.sock.recv(1 << 20):
                self.buf += chunk
                self._parse()
        except OSError:
            pass
        finally:
            self.sock.setblocking(True)

    def until_closed(self, timeout: float = 10.0) -> list:
        return self.read_until(lambda fs: False, timeout)

    def goaway(self, timeout: float = 10.0) -> tuple[int, bytes]:
        """(error code, debug data) of the GOAWAY the server sends."""
        self.read_until(lambda fs: any(t == GOAWAY for t, *_ in fs), timeout)
        got = [p for t, _, _, p in self.frames if t == GOAWAY]
        assert got, f"no GOAWAY: {self.summary()}"
        return struct.unpack(">II", got[-1][:8])[1], got[-1][8:]

    def rst(self, sid: int, timeout: float = 10.0) -> int:
        self.read_until(lambda fs: any(t == RST_STREAM and s == sid for t, _, s, _ in fs),
                        timeout)
        got = [p for t, _, s, p in self.frames if t == RST_STREAM and s == sid]
        assert got, f"no RST_STREAM on {sid}: {self.summary()}"
        return int.from_bytes(got[-1], "big")

    def summary(self) -> list:
        return [(t, f, s, p[:16]) for t, f, s, p in self.frames[-20:]]

    def close(self) -> None:
        self.sock.close()


class ServerProcess:
    """A GrpcServer with the echo service in a process of its own (h2_echo_server.py)."""

    def __init__(self, limits: dict | None = None, max_receive: int = 4 << 20,
                 max_connections: int = 0, env: dict | None = None):
        conf = {"limits": limits or {}, "max_receive": max_receive,
                "max_connections": max_connections}
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "h2_echo_server.py"), json.dumps(conf)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=dict(os.environ, **(env or {})))
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"echo server did not start: {self.proc.stderr.read()}")
        self.port = int(line)
        self.pid = self.proc.pid
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")

    def rss(self) -> int:
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def cpu_seconds(self) -> float:
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def open_connections(self) -> int:
        """TCP connections the server holds (ESTABLISHED or CLOSE_WAIT on its port)."""
        n = 0
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            try:
                with open(table) as f:
                    rows = f.read().splitlines()[1:]
            except OSError:
                continue
            for row in rows:
                local, state = row.split()[1], row.split()[3]
                if int(local.rsplit(":", 1)[1], 16) == self.port and state in ("01", "08"):
                    n += 1
        return n

    def wait_connections(self, n: int, timeout: float = 10.0) -> None:
        """Until the server holds `n` connections (its side closes them asynchronously)."""
        deadline = time.monotonic() + timeout
        while self.open_connections() != n:
            if time.monotonic() > deadline:
                raise AssertionError(f"the server holds {self.open_connections()} "
                                     f"connections, not {n}")
            time.sleep(0.02)

    def call(self, body: bytes = b"ok", method: str = "Plain", timeout: float = 10, **kw):
        return self.channel.unary_unary(
            f"/{SERVICE}/{method}", request_serializer=lambda b: b,
            response_deserializer=lambda b: b)(body, timeout=timeout, **kw)

    def stop(self, sig: int = 15, timeout: float = 30) -> tuple[int, str]:
        """Signals the server (SIGTERM: a graceful stop); (exit code, stderr)."""
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        return rc, self.proc.stderr.read()


class LatencyProbe:
    """Real grpc calls in a thread, one after another, while an attack runs."""

    def __init__(self, call, pause: float = 0.005):
        self.call = call
        self.pause = pause
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.perf_counter()
            try:
                self.call()
                self.latencies.append(time.perf_counter() - t)
            except grpc.RpcError as e:
                self.errors.append(f"{e.code()}: {e.details()}")
            self._stop.wait(self.pause)

    def __enter__(self) -> LatencyProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(30)

    def p50(self) -> float:
        return self.quantile(0.5)

    def p99(self) -> float:
        return self.quantile(0.99)

    def quantile(self, q: float) -> float:
        xs = sorted(self.latencies)
        assert xs, f"no call answered: {self.errors[:3]}"
        return xs[min(len(xs) - 1, int(q * len(xs)))]


FIGURES: list[dict] = []  # one row per attack: what a normal client saw, the server's RSS


def record(attack: str, probe: LatencyProbe, rss_growth: int, base: float) -> None:
    """Keeps one attack's figures; conftest writes them to $BATON_HOSTILE_FIGURES (JSON)
    when set, for docs/benchmarks-serving.md."""
    FIGURES.append({"attack": attack, "calls": len(probe.latencies),
                    "errors": len(probe.errors), "p50_ms": probe.p50() * 1e3,
                    "p99_ms": probe.p99() * 1e3, "baseline_p50_ms": base * 1e3,
                    "rss_growth_mib": rss_growth / (1 << 20)})


def baseline_p50(call, n: int = 30) -> float:
    xs = []
    for _ in range(n):
        t = time.perf_counter()
        call()
        xs.append(time.perf_counter() - t)
    return sorted(xs)[n // 2]
