"""Processes a member leaves behind, found and ended: its descendants as /proc lists them
(those that left its process group too), each known by its start time so a reused pid is never
signalled. strategies.supervisor kills them when their member exits.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path

KILL_WAIT_SECONDS = 5.0  # after SIGKILL: how long to wait for the kernel to end a process


def descendants(pid: int) -> list[tuple[int, str]]:
    """Every live descendant of `pid` as (pid, start time), read from /proc: also those that
    left its process group for a session of their own (Flower's superexec and the app
    processes it spawns do), which a signal to the group does not reach. The start time tells a
    reused pid from the process seen here (`kill_leftovers`)."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
            ppid = int(stat[stat.rfind(")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            started = start_time(c)
            if started:
                out.append((c, started))
            todo.append(c)
    return out


def pgid(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return -1


def start_time(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat[stat.rfind(")") + 2:].split()[19]


def kill_leftovers(seen: Sequence[tuple[int, str]], wait: float = 2.0) -> list[int]:
    """SIGKILL the processes of `seen` still alive after `wait` seconds (those that watch their
    parent exit by themselves within it); a pid now held by another process is left alone.
    Returns the pids killed."""
    deadline = time.monotonic() + wait
    alive = list(seen)
    while alive and time.monotonic() < deadline:
        alive = [(pid, st) for pid, st in alive if start_time(pid) == st]
        if alive:
            time.sleep(0.1)
    killed = []
    for pid, st in alive:
        if start_time(pid) == st:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
    return killed
