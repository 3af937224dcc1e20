"""One process supervisor: a group of named member processes, and the policies that restart them.

Used by the local training cluster (`strategies.launcher`) and by the TFJob emulator
(`k8s.emulator`); neither starts, signals or reaps a process itself.

`ProcessGroup` runs each member in its own session (so its process group id is its pid and a
signal reaches its children too). A member is a sequence of `Command`s run in order, the next
one starting when the previous exits 0 (a pod's init containers, then its main container); the
member has exited when a command fails or the last one ends. The group:

- `start(name, commands)` starts (or, once it has exited, restarts) a member;
- `wait(timeout)` blocks until some member exits, or the timeout passes, and returns the new
  `Exit`s in member order (each with the message its command left in its `message_file`, as a
  container's termination message);
- `signal(name, signum)` signals a member's process group;
- `stop(names, grace)` deletes members the way the kubelet does, all at once: SIGTERM to every
  running member's group, one shared grace period (each member may cap it lower), then SIGKILL
  to what is left; `close()` (or leaving `with`) stops every member and joins the output pumps.

When a member's main process exits, whatever it left running in its process group is killed
before it is reaped (while the zombie still holds the pid, so the group id cannot have been
reused): no process outlives its member. Only process groups this object created are ever
signalled. With `die_with_parent` each child also gets PR_SET_PDEATHSIG, so it dies even if the
supervising process is killed with SIGKILL.

How a process ended is told by strategies.exits, and what it left running is found and killed
by strategies.processes. What to do when a member exits is a restart policy's decision (strategies/restart_policies.py:
the local cluster's `GroupRestart` and the operator's `ReplicaRestart`); the caller carries it
out, since it knows how to rebuild a member's command.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO

from baton.strategies.exits import describe, exit_code, read_message
from baton.strategies.processes import KILL_WAIT_SECONDS, descendants, kill_leftovers, pgid


@dataclasses.dataclass(frozen=True)
class Command:
    """One process of a member.

    Attributes:
        argv: the program and its arguments.
        env: the whole environment (None: this process's).
        cwd: working directory (None: this process's).
        log: file the output (stdout and stderr) is appended to.
        header: text appended to `log` just before the process starts.
        label: a name for this command, passed to `on_start` (a container name).
        cpus: the CPU cores the process (and every thread and child it starts) may run on,
            set before it executes (None: the supervisor's own).
        cgroup: a cgroup's `cgroup.procs` file the process joins before it executes (a CPU
            quota, strategies.throttle), so all it starts stays in that cgroup.
        message_file: where the process may leave a line on why it ended, like a container's
            `terminationMessagePath`: removed before the process starts (a message is never
            an earlier run's), read into `Exit.message` when it ends. The supervisor's caller
            thus learns why without parsing the output, where a traceback may bury it.
    """

    argv: Sequence[str]
    env: Mapping[str, str] | None = None
    cwd: str | Path | None = None
    log: Path | None = None
    header: str = ""
    label: str = ""
    cpus: tuple[int, ...] | None = None
    cgroup: Path | None = None
    message_file: Path | None = None


@dataclasses.dataclass(frozen=True)
class Exit:
    """A member that ended on its own (not stopped): its last process's Popen return code."""

    name: str
    returncode: int
    command: int = 0  # index of the command that ended the member
    message: str = ""  # what the command left in its `message_file` ("": nothing)

    @property
    def code(self) -> int:
        """The exit code as the kubelet reports it (128+N for signal N)."""
        return exit_code(self.returncode)

    def describe(self) -> str:
        return describe(self.returncode)


@dataclasses.dataclass(eq=False)
class _Member:
    name: str
    commands: tuple[Command, ...]
    grace: float | None
    index: int = 0
    proc: subprocess.Popen | None = None
    pidfd: int | None = None
    returncode: int | None = None
    reported: bool = False  # its exit was returned by wait() (or it was stopped): never again
    stopping: bool = False  # signalled by stop(): its exit is stop()'s to report, not wait()'s


class ProcessGroup:
    """Named member processes, each in its own session; see the module docstring.

    Args:
        grace: default grace period of `stop()` (seconds between SIGTERM and SIGKILL).
        echo: called with (member name, line) for every output line; the output is then piped
            through a thread that also appends it to the command's log. Without it the child
            writes to its log directly.
        on_start: called with (member name, command index, command, pid) after each start.
        die_with_parent: PR_SET_PDEATHSIG in each child (Linux): SIGKILL when we die.
        exec_failure_exit: a command that cannot be started (no such program) makes its member
            exit with this code, as the kubelet's 127; None lets the OSError propagate.
    """

    def __init__(
        self,
        *,
        grace: float = 5.0,
        echo: Callable[[str, str], None] | None = None,
        on_start: Callable[[str, int, Command, int], None] | None = None,
        die_with_parent: bool = False,
        exec_failure_exit: int | None = None,
    ) -> None:
        self.grace = grace
        self.echo = echo
        self.on_start = on_start
        self.die_with_parent = die_with_parent
        self.exec_failure_exit = exec_failure_exit
        self._members: dict[str, _Member] = {}
        self._pumps: list[threading.Thread] = []

    # ------------------------------------------------------------------ state
    @property
    def names(self) -> list[str]:
        return list(self._members)

    def __contains__(self, name: object) -> bool:
        return name in self._members

    def pid(self, name: str) -> int | None:
        """Pid (= process group id) of the member's current process; None if it never started."""
        proc = self._members[name].proc
        return None if proc is None else proc.pid

    def returncode(self, name: str) -> int | None:
        """The member's last return code as far as `wait()`/`stop()` have seen; None: running."""
        return self._members[name].returncode

    def running(self, name: str) -> bool:
        m = self._members.get(name)
        return m is not None and m.returncode is None and m.proc is not None

    # ------------------------------------------------------------------ start
    def start(
        self, name: str, commands: Command | Sequence[Command], grace: float | None = None
    ) -> bool:
        """Start member `name` (again, if it has exited); returns False if it could not start.

        `grace` caps the group's grace period for this member in `stop()`.
        """
        old = self._members.get(name)
        if old is not None and old.returncode is None and old.proc is not None:
            raise RuntimeError(f"member {name!r} is still running (pid {old.proc.pid})")
        cmds = (commands,) if isinstance(commands, Command) else tuple(commands)
        if not cmds:
            raise ValueError(f"member {name!r} has no command")
        member = _Member(name, cmds, grace)
        self._members[name] = member  # a restarted member keeps its place in the order
        return self._spawn(member)

    def _spawn(self, m: _Member) -> bool:
        cmd = m.commands[m.index]
        m.proc, m.pidfd, m.returncode = None, None, None
        if cmd.message_file is not None:  # an earlier run's message must not explain this one
            cmd.message_file.unlink(missing_ok=True)
        log: IO[bytes] | None = None
        if cmd.log is not None:
            cmd.log.parent.mkdir(parents=True, exist_ok=True)
            log = open(cmd.log, "ab")  # noqa: SIM115 (closed below; the child keeps its copy)
            if cmd.header:
                log.write(cmd.header.encode())
                log.flush()
        try:
            m.proc = subprocess.Popen(
                list(cmd.argv),
                env=None if cmd.env is None else dict(cmd.env),
                cwd=cmd.cwd,
                stdout=subprocess.PIPE if self.echo is not None else log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: signalled with its children
                preexec_fn=_preexec(self.die_with_parent, cmd.cpus, cmd.cgroup),
            )
        except OSError as exc:
            if log is not None:
                log.write(f"cannot start {cmd.argv[0]!r}: {exc}\n".encode())
                log.close()
            if self.exec_failure_exit is None:
                raise
            m.returncode = self.exec_failure_exit
            return False
        if log is not None:
            log.close()
        with contextlib.suppress(AttributeError, OSError):
            m.pidfd = os.pidfd_open(m.proc.pid)
        if self.echo is not None:
            pump = threading.Thread(
                target=_pump, args=(m.name, m.proc.stdout, cmd.log, self.echo), daemon=True
            )
            pump.start()
            self._pumps.append(pump)
        if self.on_start is not None:
            self.on_start(m.name, m.index, cmd, m.proc.pid)
        return True

    # ------------------------------------------------------------------ signals
    def signal(self, name: str, signum: int) -> bool:
        """Send `signum` to the member's process group if its process has not been reaped."""
        m = self._members.get(name)
        if m is None or m.proc is None or m.proc.returncode is not None:
            return False
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(m.proc.pid, signum)  # the group we created (start_new_session)
            return True
        return False

    # ------------------------------------------------------------------ exits
    def _reaped(self, m: _Member) -> bool:
        """True once the member's current process has exited: its leftovers killed, it reaped."""
        proc = m.proc
        if proc is None:
            return True
        if proc.returncode is not None:
            return True
        try:
            info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # reaped already (Popen's own bookkeeping): nothing to kill
            return proc.poll() is not None
        if info is None:
            return False
        # A zombie still holds its pid, so its group id cannot have been reused: kill whatever
        # it left running in its group, then reap it.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        if m.pidfd is not None:
            os.close(m.pidfd)
            m.pidfd = None
        return True

    def _advance(self, m: _Member) -> Exit | None:
        """Check one member; start its next command after a 0; return its Exit when it ended."""
        while not m.reported and not m.stopping:
            if m.returncode is None:
                if not self._reaped(m):
                    return None
                assert m.proc is not None
                m.returncode = m.proc.returncode
            if m.returncode == 0 and m.index < len(m.commands) - 1:
                m.index += 1  # an init container finished: the next command starts
                self._spawn(m)
                continue
            m.reported = True
            message = read_message(m.commands[m.index].message_file)
            return Exit(m.name, int(m.returncode), m.index, message)
        return None

    def poll(self) -> list[Exit]:
        """Members that ended since the last call, in member order (does not block)."""
        return [e for m in list(self._members.values()) if (e := self._advance(m)) is not None]

    def wait(self, timeout: float | None = None) -> list[Exit]:
        """Block until a member ends (or `timeout` seconds pass); the new Exits, in member order.

        Returns [] at once when no member is running and `timeout` is None.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            exits = self.poll()
            if exits:
                return exits
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return []
            watched = [m for m in self._members.values() if self._watched(m)]
            if not watched:
                if remaining is not None:
                    time.sleep(remaining)
                return []
            self._block(watched, remaining)

    @staticmethod
    def _watched(m: _Member) -> bool:
        return m.proc is not None and m.returncode is None and not m.stopping

    @staticmethod
    def _block(members: Sequence[_Member], timeout: float | None) -> None:
        """Sleep until one of `members` exits (readable pidfds) or `timeout` passes."""
        fds = [m.pidfd for m in members if m.pidfd is not None]
        if len(fds) < len(members):  # no pidfd (an old kernel): look again soon
            time.sleep(0.02 if timeout is None else max(0.0, min(timeout, 0.02)))
            return
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        poller.poll(None if timeout is None else int(timeout * 1000) + 1)

    # ------------------------------------------------------------------ stop
    def stop(
        self, names: Iterable[str] | None = None, grace: float | None = None, kill: bool = True
    ) -> dict[str, int | None]:
        """Delete the running members among `names` (default: all) at once.

        SIGTERM goes to every one's process group at the same moment; each then has until the
        end of the one shared grace period (`grace`, default the group's, capped by the member's
        own `grace`) to exit, after which, with `kill`, SIGKILL ends what is left. Members that
        had already exited are left out. Returns {name: return code} for the members signalled
        (None: still running, only without `kill`); their exits are not reported by `wait()`.
        """
        grace = self.grace if grace is None else grace
        chosen = self._members.values() if names is None else [self._members[n] for n in names]
        targets = []
        for m in chosen:
            if m.proc is None or m.returncode is not None or m.reported:
                continue
            if m.stopping:  # signalled by an earlier stop(kill=False) and still running
                targets.append(m)
                continue
            if self._reaped(m):  # it has just exited by itself: not one to delete
                m.returncode = m.proc.returncode
                continue
            targets.append(m)
        # what each started outside its own group, seen before it goes: killed at the end if
        # it outlives its parent (a member's group is killed with it, this is not)
        escaped = [(pid, st) for m in targets if m.proc is not None
                   for pid, st in descendants(m.proc.pid) if pgid(pid) != m.proc.pid]
        begun = time.monotonic()
        for m in targets:
            m.stopping = True
            self.signal(m.name, signal.SIGTERM)
        for m in targets:
            own = grace if m.grace is None else min(grace, m.grace)
            self._wait_exit(m, begun + own)
        if kill:
            left = [m for m in targets if m.returncode is None]
            for m in left:
                self.signal(m.name, signal.SIGKILL)
            killed = time.monotonic()
            for m in left:
                self._wait_exit(m, killed + KILL_WAIT_SECONDS)
            kill_leftovers(escaped)
        return {m.name: m.returncode for m in targets}

    def _wait_exit(self, m: _Member, deadline: float) -> bool:
        while not self._reaped(m):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._block([m], remaining)
        assert m.proc is not None
        m.returncode = m.proc.returncode
        return True

    def close(self, grace: float | None = None) -> dict[str, int | None]:
        """Stop every member still running and wait for their output to be written."""
        try:
            return self.stop(grace=grace)
        finally:
            for pump in self._pumps:
                pump.join(timeout=2.0)
            for m in self._members.values():
                if m.pidfd is not None:
                    os.close(m.pidfd)
                    m.pidfd = None

    def __enter__(self) -> ProcessGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _pump(
    name: str, pipe: IO[bytes] | None, log: Path | None, echo: Callable[[str, str], None]
) -> None:
    """Append a child's output to its log and pass each line on (until the pipe closes)."""
    if pipe is None:
        return
    with contextlib.ExitStack() as stack:
        fh = stack.enter_context(open(log, "ab")) if log is not None else None
        stack.callback(pipe.close)
        for raw in iter(pipe.readline, b""):
            if fh is not None:
                fh.write(raw)
                fh.flush()
            echo(name, raw.decode(errors="replace").rstrip())


def _preexec(
    die_with_parent: bool, cpus: tuple[int, ...] | None, cgroup: Path | None = None
) -> Callable[[], None] | None:
    """What the child does before exec: PR_SET_PDEATHSIG, its CPU affinity and its cgroup, as
    asked (a failure to join the cgroup fails the start: the command would run unthrottled)."""
    if not die_with_parent and cpus is None and cgroup is None:
        return None

    def run() -> None:
        if cgroup is not None:
            with open(cgroup, "w") as fh:
                fh.write(str(os.getpid()))
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
        if die_with_parent:
            _die_with_parent()

    return run


def _die_with_parent() -> None:
    """In the child before exec: get SIGKILL when the parent dies (Linux PR_SET_PDEATHSIG)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass
