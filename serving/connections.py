"""Accepting connections for both APIs: a descriptor-aware cap, idle eviction, back-off.

One process' REST and gRPC listeners share one descriptor table, and the model poller,
the SavedModel loader and TensorFlow need descriptors too: if clients could take them all,
`listdir` on a model's base path would fail with EMFILE and a load would fail. So:

- **A connection cap** (`--max_connections`; by default the descriptor limit less a
  reserve for everything else, at most `DEFAULT_MAX_CONNECTIONS`) counts the connections
  of both listeners together. At the cap, the connection idle the longest (no request in
  progress) is closed to make room; when none is idle, the new connection gets a short
  refusal (REST: 503; gRPC: GOAWAY) and is closed at once, before any of it is read.
- **Idle connections are closed** after `idle_timeout` seconds without a request in
  progress (REST keep-alive, HTTP/2 without open streams), by one periodic sweep that
  also enforces the receive timeouts; nothing is recorded per request.
- **accept() failing for want of descriptors or memory** (EMFILE, ENFILE, ENOBUFS,
  ENOMEM) pauses accepting for 50 ms, doubling to 1 s while it keeps failing, with one
  log line per episode: pending connections wait in the backlog instead of the loop
  spinning on a listening socket that stays readable.

The accept loop is our own (a reader on the listening socket, `connect_accepted_socket`
for each connection) so that all of this is the same on uvloop and on the stdlib loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import logging
import resource
import socket
import struct
import termios
from collections.abc import Callable

log = logging.getLogger(__name__)

DEFAULT_MAX_CONNECTIONS = 10000
DESCRIPTOR_RESERVE = 128  # descriptors kept for models, TensorFlow, logs, the poller
IDLE_TIMEOUT = 60.0
SWEEP_SECONDS = 1.0
ACCEPT_BURST = 64  # connections accepted per readiness event
_PAUSE_FIRST, _PAUSE_MAX = 0.05, 1.0
_RESOURCE_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


def raise_descriptor_limit(ceiling: int = 1 << 20) -> int:
    """Raises the soft RLIMIT_NOFILE to the hard limit (at most `ceiling`), as Go's
    runtime does at start; returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard if hard != resource.RLIM_INFINITY else ceiling, ceiling)
    if want > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):
            pass
    return soft


def default_max_connections(soft_limit: int | None = None) -> int:
    """The cap when none is given: the descriptor limit less a reserve (an eighth of it,
    at least DESCRIPTOR_RESERVE), at most DEFAULT_MAX_CONNECTIONS, at least 1."""
    if soft_limit is None:
        soft_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    reserve = max(DESCRIPTOR_RESERVE, soft_limit // 8)
    return max(1, min(DEFAULT_MAX_CONNECTIONS, soft_limit - reserve))


class ConnectionTable:
    """The open connections of a process' listeners, and which of them are idle.

    Nothing is recorded on the request path: a periodic `sweep` asks each connection
    whether a request is in progress (`active()`), whether one is arriving
    (`receiving()`) and how far it got (`progress`, a number that changes whenever a
    request starts), and keeps, per connection, when it was first seen idle or receiving
    with no progress since. A connection also has `idle_timeout` (seconds; 0: never
    closed for idleness), `close_idle()` (closes it politely: REST closes the socket,
    HTTP/2 sends GOAWAY first) and `check_receive(seconds)` (its own receive timeouts,
    given how long the request has been arriving without progress). Timeouts are thus
    accurate to one sweep interval (SWEEP_SECONDS).
    """

    def __init__(self, max_connections: int):
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1. "
                             f"Received: {max_connections}")
        self.max_connections = max_connections
        # connection -> [progress seen, idle since (0: not idle), receiving since (0: not)]
        self.connections: dict = {}
        self.pending = 0  # accepted, connection_made not yet called
        self.refused = 0
        self.evicted = 0
        self.idle_closed = 0
        self.now = 0.0  # the last sweep's time (the loop's clock)

    def __len__(self) -> int:
        return len(self.connections) + self.pending

    def add(self, conn) -> None:
        """A new connection: idle (no request yet) since the last sweep. One the Listener
        accepted stops being pending here, in the same step: counted in both for a while
        (until the Listener's task resumed), a burst of connections looked like more than
        the cap and idle ones were evicted below it."""
        self.connections[conn] = [conn.progress, self.now or 1e-9, 0.0]
        if self.pending > 0:
            self.pending -= 1

    def discard(self, conn) -> None:
        self.connections.pop(conn, None)

    def admit(self) -> bool:
        """Room for one more connection (closing the longest-idle one if needed)?"""
        if len(self) < self.max_connections:
            return True
        victim, oldest = None, float("inf")
        recent = self.now + 1.0  # idle, but active since the last sweep: the youngest idle
        for c, (progress, since, _) in self.connections.items():
            if not since or c.progress != progress:
                since = recent
            if since < oldest and not c.active():
                victim, oldest = c, since
        if victim is None:
            self.refused += 1
            return False
        self.discard(victim)
        self.evicted += 1
        victim.close_idle()
        return True

    def sweep(self, now: float) -> None:
        """Closes connections idle for longer than their `idle_timeout`; tells those
        whose request has been arriving without progress how long it has."""
        self.now = now
        stale, slow = [], []
        for c, rec in self.connections.items():
            progress = c.progress
            if c.active():
                rec[1] = 0.0
                if not c.receiving() or progress != rec[0]:
                    rec[2] = 0.0
                elif not rec[2]:
                    rec[2] = now
                else:
                    slow.append((c, now - rec[2]))
            else:
                rec[2] = 0.0
                if progress != rec[0] or not rec[1]:
                    rec[1] = now
                elif 0 < c.idle_timeout < now - rec[1]:
                    stale.append(c)
            rec[0] = progress
        for c in stale:
            self.discard(c)
            self.idle_closed += 1
            c.close_idle()
        for c, seconds in slow:
            c.check_receive(seconds)


def bind_sockets(host: str, port: int, backlog: int = 2048) -> list[socket.socket]:
    """Listening TCP sockets for `host` (every address it resolves to), as
    loop.create_server binds them (SO_REUSEADDR, IPV6_V6ONLY beside IPv4)."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                               flags=socket.AI_PASSIVE)
    socks: list[socket.socket] = []
    seen = set()
    try:
        for family, kind, proto, _, addr in infos:
            if (family, addr) in seen:
                continue
            seen.add((family, addr))
            s = socket.socket(family, kind, proto)
            socks.append(s)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            s.bind(addr)
            s.listen(backlog)
            s.setblocking(False)
    except OSError:
        for s in socks:
            s.close()
        raise
    return socks


def bind_unix(path: str, backlog: int = 2048) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind(path)
        s.listen(backlog)
        s.setblocking(False)
    except OSError:
        s.close()
        raise
    return s


class Listener:
    """Accepts on one listening socket into `factory()` protocols, within `table`.

    Args:
        loop: the serving loop.
        sock: a listening, non-blocking socket.
        factory: makes the protocol of one connection.
        table: the process' ConnectionTable.
        refusal: bytes sent to a connection refused at the cap before it is closed.
        name: for log lines ("REST", "gRPC").
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket,
                 factory: Callable[[], asyncio.Protocol], table: ConnectionTable,
                 refusal: bytes, name: str):
        self.loop = loop
        self.sock = sock
        self.factory = factory
        self.table = table
        self.refusal = refusal
        self.name = name
        self.tcp = sock.family in (socket.AF_INET, socket.AF_INET6)
        self._pause = 0.0  # current back-off; 0 while accepting normally
        self._resume: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task] = set()
        self.closed = False
        loop.add_reader(sock.fileno(), self._accept)

    @property
    def port(self) -> int:
        return self.sock.getsockname()[1] if self.tcp else 0

    def _accept(self) -> None:
        for _ in range(ACCEPT_BURST):
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                break
            except OSError as e:
                if e.errno in _RESOURCE_ERRORS:
                    self._back_off(e)
                    return
                # ECONNABORTED and the like: that connection is gone, others may wait
                log.debug("%s accept() failed: %s", self.name, e)
                continue
            if self._pause:
                log.warning("%s accepting again after a pause (%d connections open)",
                            self.name, len(self.table))
                self._pause = 0.0
            if not self.table.admit():
                _refuse(conn, self.refusal)
                continue
            self.table.pending += 1
            try:
                conn.setblocking(False)
                if self.tcp:
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                self.table.pending -= 1
                conn.close()
                continue
            task = self.loop.create_task(self._connect(conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _connect(self, conn: socket.socket) -> None:
        try:
            await self.loop.connect_accepted_socket(self.factory, conn)
        except OSError as e:  # before connection_made: still pending
            log.debug("%s connection dropped before it started: %s", self.name, e)
            conn.close()
            self.table.pending = max(0, self.table.pending - 1)

    def _back_off(self, e: OSError) -> None:
        first = not self._pause
        self._pause = _PAUSE_FIRST if first else min(self._pause * 2, _PAUSE_MAX)
        if first:
            log.warning("%s accept() failed: %s; pausing accepts (%.2f s, doubling to "
                        "%.0f s while it lasts; %d connections open)", self.name,
                        e.strerror or e, self._pause, _PAUSE_MAX, len(self.table))
        self.loop.remove_reader(self.sock.fileno())
        self._resume = self.loop.call_later(self._pause, self._listen_again)

    def _listen_again(self) -> None:
        self._resume = None
        if not self.closed:
            self.loop.add_reader(self.sock.fileno(), self._accept)

    def close(self) -> None:
        """Stops accepting and closes the listening socket (open connections stay)."""
        if self.closed:
            return
        self.closed = True
        if self._resume is not None:
            self._resume.cancel()
        else:
            self.loop.remove_reader(self.sock.fileno())
        self.sock.close()


def _refuse(conn: socket.socket, refusal: bytes) -> None:
    """Best effort: the refusal if the send buffer takes it, then close."""
    try:
        conn.setblocking(False)
        conn.send(refusal)
    except OSError:
        pass
    conn.close()


_OUTQ = getattr(termios, "TIOCOUTQ", None)  # the kernel's send queue (SIOCOUTQ)
# After a graceful close, a peer taking none of its unsent answers for this long is reset
# (grpc core's keepalive_timeout: a peer silent for 20 s is dead).
DRAIN_TIMEOUT = 20.0


def unsent_bytes(transport) -> int:
    """Bytes written and not yet taken by the peer: those in the transport's buffer and,
    where the kernel says (SIOCOUTQ), those in its send queue, so a slow reader shows
    progress before the kernel frees enough room to take more of the buffer."""
    n = transport.get_write_buffer_size()
    sock = transport.get_extra_info("socket")
    if sock is not None and _OUTQ is not None:
        with contextlib.suppress(OSError, ValueError):  # closed meanwhile
            n += struct.unpack("i", fcntl.ioctl(sock.fileno(), _OUTQ, b"\0\0\0\0"))[0]
    return n


def reset(transport) -> None:
    """Closes with RST (SO_LINGER 0): what is still unsent is dropped in the kernel too,
    not left to an orphaned socket that probes a peer who never reads for minutes."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError, AttributeError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


def close_when_drained(transport, loop: asyncio.AbstractEventLoop, stall: float,
                       peer: str = "") -> None:
    """close(), then abort() if the peer takes none of what is still unsent for `stall`
    seconds (0: abort now). close() waits for the write buffer to drain, for ever when the
    peer does not read, and the ConnectionTable has already forgotten the connection: its
    descriptor would be outside the connection cap. A peer that reads, however slowly,
    gets the whole of its answers."""
    transport.close()
    if not transport.get_write_buffer_size():
        return
    if not stall:
        reset(transport)
        return

    def check(before: int) -> None:
        if not transport.get_write_buffer_size():
            return  # drained: close() finishes by itself
        now = unsent_bytes(transport)
        if now >= before:
            log.debug("connection %s reset: its peer took none of %d unsent bytes in %ss",
                      peer, now, stall)
            reset(transport)
            return
        loop.call_later(stall, check, now)

    loop.call_later(stall, check, unsent_bytes(transport))


async def sweep_forever(table: ConnectionTable, loop: asyncio.AbstractEventLoop,
                        seconds: float = SWEEP_SECONDS) -> None:
    """Runs `table.sweep` every `seconds` (a task of the serving loop)."""
    table.now = loop.time()
    while True:
        await asyncio.sleep(seconds)
        table.sweep(loop.time())

