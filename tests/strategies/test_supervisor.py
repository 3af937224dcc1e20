"""The process supervisor with tiny `python -c` children (fast, no TensorFlow): start, exits,
SIGTERM then SIGKILL after one shared grace period, leftovers, and both restart policies."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from baton.errors import EXIT_FAILED, EXIT_PREEMPTED, EXIT_TRANSIENT
from baton.strategies import launcher
from baton.strategies.exits import exit_code
from baton.strategies.restart_policies import Action, GroupRestart, ReplicaRestart
from baton.strategies.supervisor import Command, Exit, ProcessGroup

PY = sys.executable


def _py(code: str, log: Path | None = None, **kw) -> Command:
    return Command([PY, "-c", code], log=log, **kw)


def _exit(code: int) -> Command:
    return _py(f"import sys; sys.exit({code})")


def _ignore_term(ready: Path) -> Command:
    """Ignores SIGTERM (only SIGKILL ends it); `ready` exists once the handler is in place."""
    return _py(
        "import pathlib, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        f"pathlib.Path({str(ready)!r}).touch(); time.sleep(60)"
    )


def _sleeper() -> Command:
    return _py("import time; time.sleep(60)")  # default SIGTERM: dies at once


def _wait_for(path: Path, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


def _read_pid(path: Path, timeout: float = 20.0) -> int:
    """The pid a child wrote to `path`, once written: `write_text` creates the file before it
    writes, and a reader that only waited for the file once read '' (a full suite, 2026-12-03)."""
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < deadline, f"{path} never got a pid"
        time.sleep(0.01)
    return int(path.read_text())


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for a parent that is not ours to reap it counts as gone)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class Pids(list):
    def on_start(self, name: str, index: int, command: Command, pid: int) -> None:
        self.append(pid)


@pytest.fixture
def pids() -> Iterator[Pids]:
    """Every pid a group started (through on_start); none may be alive after the test."""
    started = Pids()
    yield started
    alive = [p for p in started if _alive(p)]
    for p in alive:  # clean up only what this test started, then fail
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)
    assert not alive, f"processes left behind: {alive}"


# ---------------------------------------------------------------------------------- mechanics
def test_exits_are_reported_once_in_member_order_with_their_codes(pids) -> None:
    with ProcessGroup(on_start=pids.on_start) as group:
        group.start("a", _exit(0))
        group.start("b", _exit(3))
        group.start("c", _py("import os, signal; os.kill(os.getpid(), signal.SIGKILL)"))
        seen: list[Exit] = []
        deadline = time.monotonic() + 20
        while len(seen) < 3 and time.monotonic() < deadline:
            seen += group.wait(1.0)
        assert sorted(e.name for e in seen) == ["a", "b", "c"]
        codes = {e.name: e for e in seen}
        assert codes["a"].returncode == 0 and codes["b"].returncode == 3
        assert codes["c"].returncode == -9 and codes["c"].code == 137
        assert codes["c"].describe() == "signal SIGKILL" and codes["b"].describe() == "code 3"
        assert group.wait(0.05) == [] and group.poll() == []  # never reported twice
        assert [group.returncode(n) for n in "abc"] == [0, 3, -9]
    assert len(pids) == 3


def test_wait_returns_at_the_first_exit_not_at_the_timeout(pids) -> None:
    with ProcessGroup(on_start=pids.on_start) as group:
        group.start("slow", _sleeper())
        group.start("fast", _exit(0))
        begun = time.monotonic()
        exits = group.wait(30.0)
        assert [e.name for e in exits] == ["fast"] and time.monotonic() - begun < 10
        begun = time.monotonic()
        assert group.wait(0.3) == [] and 0.25 < time.monotonic() - begun < 5
        assert group.running("slow") and not group.running("fast")


def test_commands_run_in_order_and_a_failure_ends_the_member(pids, tmp_path) -> None:
    log = tmp_path / "m.log"
    ok = [_py("print('init')", log, header="== init ==\n", label="init"),
          _py("print('main')", log, header="== main ==\n", label="main")]
    with ProcessGroup(on_start=pids.on_start) as group:
        group.start("m", ok)
        assert group.wait(20) == [Exit("m", 0, 1)]
        assert log.read_text() == "== init ==\ninit\n== main ==\nmain\n"
        group.start("n", [_exit(4), _py(f"open({str(tmp_path / 'ran')!r}, 'w')")])
        assert group.wait(20) == [Exit("n", 4, 0)]
    assert not (tmp_path / "ran").exists() and len(pids) == 3


def test_a_restarted_member_keeps_its_place_and_cannot_start_twice(pids) -> None:
    with ProcessGroup(on_start=pids.on_start) as group:
        group.start("a", _exit(1))
        group.start("b", _sleeper())
        with pytest.raises(RuntimeError, match="still running"):
            group.start("b", _sleeper())
        assert [e.name for e in group.wait(20)] == ["a"]
        assert group.start("a", _sleeper())
        assert group.names == ["a", "b"] and group.running("a")


def test_sigterm_then_sigkill_after_the_grace_for_a_child_that_ignores_sigterm(pids, tmp_path):
    with ProcessGroup(grace=0.8, on_start=pids.on_start) as group:
        group.start("stubborn", _ignore_term(tmp_path / "ready"))
        group.start("polite", _sleeper())
        _wait_for(tmp_path / "ready")
        begun = time.monotonic()
        stopped = group.stop()
        took = time.monotonic() - begun
    assert stopped == {"stubborn": -signal.SIGKILL, "polite": -signal.SIGTERM}
    assert 0.75 < took < 3.0, took
    assert exit_code(stopped["stubborn"]) == 137 and exit_code(stopped["polite"]) == 143


def test_one_grace_period_for_several_members_not_one_each(pids, tmp_path) -> None:
    with ProcessGroup(grace=1.0, on_start=pids.on_start) as group:
        for i in range(3):
            group.start(f"m{i}", _ignore_term(tmp_path / f"ready{i}"))
        for i in range(3):
            _wait_for(tmp_path / f"ready{i}")
        begun = time.monotonic()
        stopped = group.stop()
        took = time.monotonic() - begun
    assert set(stopped.values()) == {-signal.SIGKILL}
    assert 0.95 < took < 2.5, took  # one after another would take >= 3 s


def test_a_member_grace_caps_the_shared_one_and_exited_members_are_left_out(pids, tmp_path):
    with ProcessGroup(grace=30.0, on_start=pids.on_start) as group:
        group.start("capped", _ignore_term(tmp_path / "ready"), grace=0.3)
        group.start("done", _exit(0))
        _wait_for(tmp_path / "ready")
        time.sleep(0.3)  # "done" has exited but nobody has looked yet
        begun = time.monotonic()
        stopped = group.stop()
        took = time.monotonic() - begun
    assert stopped == {"capped": -signal.SIGKILL} and took < 3.0, (stopped, took)


def test_stop_without_kill_waits_then_close_kills(pids, tmp_path) -> None:
    group = ProcessGroup(grace=0.3, on_start=pids.on_start)
    group.start("stubborn", _ignore_term(tmp_path / "ready"))
    group.start("polite", _sleeper())
    _wait_for(tmp_path / "ready")
    assert group.stop(["stubborn", "polite"], grace=0.3, kill=False) == {
        "stubborn": None, "polite": -signal.SIGTERM}
    assert _alive(pids[0]) and group.wait(0.05) == []  # a stopped member is not an exit
    assert group.close() == {"stubborn": -signal.SIGKILL}
    assert not _alive(pids[0])


def test_leftover_children_die_with_their_member(pids, tmp_path) -> None:
    """A member's children (same process group) are killed when it exits or is stopped, even
    when they ignore SIGTERM."""
    spawn = (
        "import subprocess, sys, pathlib; "
        "p = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)']); "
        f"pathlib.Path({str(tmp_path)!r}, sys.argv[1]).write_text(str(p.pid)); "
    )
    with ProcessGroup(grace=0.3, on_start=pids.on_start) as group:
        group.start("exits", Command([PY, "-c", spawn + "sys.exit(0)", "exits"]))
        group.start("stopped", Command([PY, "-c", spawn + "import time; time.sleep(60)", "stopped"]))
        assert [e.name for e in group.wait(20)] == ["exits"]
        _wait_for(tmp_path / "stopped")
        orphan = _read_pid(tmp_path / "exits")
        grandchild = _read_pid(tmp_path / "stopped")
        pids += [orphan, grandchild]  # checked (and cleaned up) by the fixture too
        _wait_gone(orphan)
        assert _alive(grandchild)
    _wait_gone(grandchild)


def test_a_stopped_member_s_descendants_in_sessions_of_their_own_go_too(pids, tmp_path) -> None:
    """A child that left its member's process group (start_new_session, as Flower's superexec
    does) is beyond the group's SIGKILL: stop() ends it too when it outlives its parent; a
    child that watches its parent and leaves by itself is not killed."""
    spawn = (
        "import subprocess, sys, pathlib; "
        "p = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)'], start_new_session=True); "
        f"pathlib.Path({str(tmp_path)!r}, 'child').write_text(str(p.pid)); "
        "import time; time.sleep(60)"
    )
    with ProcessGroup(grace=0.3, on_start=pids.on_start) as group:
        group.start("m", Command([PY, "-c", spawn]))
        _wait_for(tmp_path / "child")
        child = _read_pid(tmp_path / "child")
        pids.append(child)
        assert os.getpgid(child) != group.pid("m")  # its own session: the group signal misses it
        group.stop()
        _wait_gone(child)


def _wait_gone(pid: int, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while _alive(pid):
        assert time.monotonic() < deadline, f"pid {pid} still running"
        time.sleep(0.02)


def test_signal_reaches_the_member(pids) -> None:
    with ProcessGroup(on_start=pids.on_start) as group:
        group.start("m", _sleeper())
        assert group.signal("m", signal.SIGKILL)
        assert group.wait(20) == [Exit("m", -signal.SIGKILL)]
        assert not group.signal("m", signal.SIGKILL)  # reaped: never signalled again


def test_a_program_that_cannot_start(tmp_path) -> None:
    missing = Command(["/nonexistent/program"], log=tmp_path / "log")
    with ProcessGroup(exec_failure_exit=127) as group:
        assert not group.start("m", missing)
        assert group.wait(1) == [Exit("m", 127)]
    assert "cannot start '/nonexistent/program'" in (tmp_path / "log").read_text()
    with ProcessGroup() as group, pytest.raises(FileNotFoundError):
        group.start("m", missing)


def test_echo_passes_lines_on_and_writes_the_log(pids, tmp_path) -> None:
    lines: list[tuple[str, str]] = []
    with ProcessGroup(echo=lambda n, line: lines.append((n, line)), on_start=pids.on_start) as g:
        g.start("w", _py("import sys; print('one'); print('two', file=sys.stderr)", tmp_path / "l"))
        assert g.wait(20) == [Exit("w", 0)]
    assert lines == [("w", "one"), ("w", "two")]
    assert (tmp_path / "l").read_text() == "one\ntwo\n"


def test_a_command_s_termination_message_is_its_own(pids, tmp_path) -> None:
    """The message file is read into the Exit; one left by an earlier run is removed before
    the command starts, so a member that writes none has no message."""
    note = tmp_path / "w.txt"
    write = f"import pathlib, sys; pathlib.Path({str(note)!r}).write_text(' bad config \\n'); sys.exit(1)"
    with ProcessGroup(on_start=pids.on_start) as group:
        group.start("w", _py(write, message_file=note))
        assert group.wait(20) == [Exit("w", 1, 0, "bad config")]
        group.start("w", _py("import sys; sys.exit(1)", message_file=note))  # stale file
        assert group.wait(20) == [Exit("w", 1, 0, "")]
        assert not note.exists()


# ---------------------------------------------------------------------------------- policies
def _ended(group: ProcessGroup, name: str, code: int) -> Exit:
    """Run member `name` to its exit with `code` (negative: killed by that signal)."""
    body = f"import os; os.kill(os.getpid(), {-code})" if code < 0 else f"import sys; sys.exit({code})"
    group.start(name, _py(body))
    exits = group.wait(20)
    assert [e.name for e in exits] == [name]
    return exits[0]


def test_group_restart_all_must_finish_and_1_is_permanent(pids) -> None:
    policy = GroupRestart(max_restarts=2)
    with ProcessGroup(on_start=pids.on_start) as group:
        group.start("worker:0", _sleeper())
        v = policy.decide(group, _ended(group, "worker:1", 0))
        assert v.action is Action.CONTINUE  # worker:0 is still running
        group.stop(["worker:0"])
        v = policy.decide(group, _ended(group, "worker:0", 0))
        assert v.action is Action.SUCCEED and v.reason == "ok"
        v = policy.decide(group, _ended(group, "worker:0", EXIT_FAILED))
        assert v.action is Action.FAIL and not v.exhausted
        assert v.reason == (
            "permanent failure: worker:0 exited with 1 (bad config or a bug; not retried)")
        assert policy.restarts == 0


def test_group_restart_retries_preemption_transient_and_signals_up_to_the_budget(pids) -> None:
    policy = GroupRestart(max_restarts=3)
    with ProcessGroup(on_start=pids.on_start) as group:
        for code, shown in ((EXIT_PREEMPTED, "code 143"), (EXIT_TRANSIENT, "code 129"),
                            (-signal.SIGKILL, "signal SIGKILL")):
            v = policy.decide(group, _ended(group, "worker:1", code))
            assert v.action is Action.RESTART_GROUP and v.reason == f"worker:1 exited with {shown}"
        assert policy.restarts == 3
        v = policy.decide(group, _ended(group, "worker:1", EXIT_PREEMPTED))
        assert v.action is Action.FAIL and v.exhausted and v.reason == "worker:1 exited with code 143"
        assert policy.restarts == 3


def test_group_restart_parameter_server_roles(pids) -> None:
    policy = GroupRestart(max_restarts=1, required=["chief:0"], alone=["worker:0"])
    with ProcessGroup(on_start=pids.on_start) as group:
        group.start("chief:0", _sleeper())
        for code in (-signal.SIGKILL, 0):  # a worker is restarted alone, whatever its code
            v = policy.decide(group, _ended(group, "worker:0", code))
            assert v.action is Action.RESTART
        assert policy.member_restarts == 2 and policy.restarts == 0
        v = policy.decide(group, _ended(group, "ps:0", 0))  # a PS must never exit
        assert v.action is Action.RESTART_GROUP and v.reason == "ps:0 exited with code 0"
        group.start("ps:0", _sleeper())
        group.stop(["chief:0"])
        v = policy.decide(group, _ended(group, "chief:0", 0))  # the others still run
        assert v.action is Action.SUCCEED


@pytest.mark.parametrize(
    ("policy", "code", "action"),
    [
        ("ExitCode", 137, Action.RESTART),
        ("ExitCode", 143, Action.RESTART),
        ("ExitCode", 129, Action.RESTART),
        ("ExitCode", 1, Action.FAIL),
        ("ExitCode", 127, Action.FAIL),
        ("OnFailure", 1, Action.RESTART),
        ("Always", 1, Action.RESTART),
        ("Never", 143, Action.FAIL),
        ("Never", 0, Action.CONTINUE),
        ("ExitCode", 0, Action.CONTINUE),
    ],
)
def test_replica_restart_follows_the_operator(policy: str, code: int, action: Action) -> None:
    p = ReplicaRestart({"job-worker-0": policy})
    v = p.decide(ProcessGroup(), Exit("job-worker-0", code))
    assert v.action is action and not v.exhausted
    assert p.restarts == (1 if action is Action.RESTART else 0)
    if code:
        why = "retryable" if action is Action.RESTART else "permanent"
        assert v.reason == f"exited {code} ({why} under restartPolicy {policy})"


def test_replica_restart_counts_every_replica_against_the_backoff_limit() -> None:
    p = ReplicaRestart({"a": "ExitCode", "b": "OnFailure"}, backoff_limit=2)
    group = ProcessGroup()
    assert p.decide(group, Exit("a", -signal.SIGKILL)).action is Action.RESTART  # 137
    assert p.decide(group, Exit("b", 1)).action is Action.RESTART
    v = p.decide(group, Exit("a", 143))
    assert v.action is Action.FAIL and v.exhausted and p.restarts == 2
    assert p.decide(group, Exit("unknown", 143)).action is Action.FAIL  # not listed: Never


# ---------------------------------------------------------------------------------- launcher
@pytest.fixture
def no_children() -> Iterator[None]:
    """The launcher leaves no child process of this test process behind (children this worker
    had before the test, such as a session's S3 server, are not the launcher's)."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield
    left = [p for p in psutil.Process().children(recursive=True)
            if p.pid not in before and _alive(p.pid)]
    assert not left, f"processes left behind: {[p.pid for p in left]}"


# A stand-in `baton task`: exits with the code listed for its task and attempt
# ("143,0": 143 on attempt 0, then 0), writes the step to the status file when it is the chief.
TASK = r"""
import json, os, sys, time
task = json.loads(os.environ["TF_CONFIG"])["task"]
name = f"{task['type']}:{task['index']}"
attempt = int(os.environ["BATON_ATTEMPT"])
codes = os.environ.get("CODES_" + name.replace(":", "_"), "0").split(",")
print(f"{name} attempt {attempt}", flush=True)
code = int(codes[min(attempt, len(codes) - 1)])
if code < 0:
    time.sleep(60)
sys.exit(code)
"""


def _launch(tmp_path: Path, codes: dict[str, str], **kw) -> tuple[launcher.LaunchResult, str]:
    cfg = launcher.LaunchConfig(
        workers=kw.pop("workers", 2), state_dir=tmp_path / "state", grace_seconds=1.0,
        worker_restart_delay=0.0, extra_env={f"CODES_{k}": v for k, v in codes.items()}, **kw)
    out = io.StringIO()
    result = launcher.launch(cfg, lambda t: [PY, "-c", TASK], stream=out)
    return result, out.getvalue()


def test_launcher_restarts_the_group_then_succeeds(tmp_path, no_children) -> None:
    result, log = _launch(tmp_path, {"worker_1": "143,0", "worker_0": "-1,0"})
    assert result.ok and result.restarts == 1, (result, log)
    assert result.events == ["attempt 0: worker:1 exited with code 143", "attempt 1: ok"]
    assert "  [worker:1] worker:1 attempt 1" in log
    assert (tmp_path / "state" / "logs" / "worker-1.attempt1.log").read_text() == (
        "worker:1 attempt 1\n")


def test_launcher_permanent_failure_and_budget(tmp_path, no_children) -> None:
    result, _ = _launch(tmp_path / "a", {"worker_0": "1", "worker_1": "-1"})
    assert not result.ok and result.restarts == 0 and result.error.startswith("permanent failure")
    assert result.error.endswith("(bad config or a bug; not retried)")  # the task left no words
    result, _ = _launch(tmp_path / "b", {"worker_0": "129", "worker_1": "-1"}, max_restarts=1)
    assert not result.ok and result.restarts == 1
    assert result.error == "worker:0 exited with code 129; retry budget of 1 restarts used up"


# A stand-in `baton task` that fails the way the real one reports a BatonError: its message in
# the file BATON_ERROR_FILE names (written on the attempt listed in WRITE_<task>), then an exit.
FAILING_TASK = TASK.replace("sys.exit(code)", """
import pathlib
if str(attempt) in os.environ.get("WRITE_" + name.replace(":", "_"), "").split(","):
    pathlib.Path(os.environ["BATON_ERROR_FILE"]).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(os.environ["BATON_ERROR_FILE"]).write_text(f"model function rejected {name}\\n")
sys.exit(code)
""")


def test_launcher_permanent_failure_is_told_in_the_task_s_words(tmp_path, no_children) -> None:
    """A task that exits 1 and left its error: that is the launcher's error, named by task."""
    cfg = launcher.LaunchConfig(
        workers=2, state_dir=tmp_path / "state", grace_seconds=1.0,
        extra_env={"CODES_worker_0": "1", "CODES_worker_1": "-1", "WRITE_worker_0": "0"})
    result = launcher.launch(cfg, lambda t: [PY, "-c", FAILING_TASK], stream=io.StringIO())
    assert not result.ok and result.restarts == 0
    assert result.error == "worker:0: model function rejected worker:0"
    assert result.events == ["attempt 0: worker:0: model function rejected worker:0"]


def test_launcher_never_reports_an_earlier_attempt_s_error(tmp_path, no_children) -> None:
    """Attempt 0 leaves an error but is retried (143); attempt 1 exits 1 without one: the
    error is the exit code's, not the stale message."""
    cfg = launcher.LaunchConfig(
        workers=2, state_dir=tmp_path / "state", grace_seconds=1.0,
        extra_env={"CODES_worker_0": "143,1", "CODES_worker_1": "-1", "WRITE_worker_0": "0"})
    result = launcher.launch(cfg, lambda t: [PY, "-c", FAILING_TASK], stream=io.StringIO())
    assert not result.ok and result.restarts == 1
    assert result.error == (
        "permanent failure: worker:0 exited with 1 (bad config or a bug; not retried)")


PS_TASK = r"""
import json, os, pathlib, signal, sys, time
task = json.loads(os.environ["TF_CONFIG"])["task"]
name = f"{task['type']}:{task['index']}"
marks = pathlib.Path(os.environ["MARKS"])
if name == "worker:1":
    if not (marks / "crashed").exists():
        (marks / "crashed").touch()
        os.kill(os.getpid(), signal.SIGKILL)
    (marks / "back").touch()
if name == "chief:0":
    while not (marks / "back").exists():
        time.sleep(0.02)
    sys.exit(0)
time.sleep(60)
"""


def test_launcher_parameter_server_restarts_a_worker_alone(tmp_path, no_children) -> None:
    cfg = launcher.LaunchConfig(
        workers=2, ps=1, strategy="parameter_server", state_dir=tmp_path / "state",
        grace_seconds=1.0, worker_restart_delay=0.0, extra_env={"MARKS": str(tmp_path)})
    result = launcher.launch(cfg, lambda t: [PY, "-c", PS_TASK], stream=io.StringIO())
    assert result.ok and result.restarts == 0 and result.worker_restarts == 1, result
    assert result.events == ["attempt 0: ok"]
    assert (tmp_path / "state" / "logs" / "worker-1.attempt0.r1.log").exists()


STOPPABLE = r"""
import os, pathlib, signal, sys, time
signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
pathlib.Path(os.environ["MARKS"], os.environ["BATON_STATUS_FILE"][-4:] + str(os.getpid())).touch()
time.sleep(60)
"""


def test_launcher_sigterm_asks_the_tasks_to_stop(tmp_path, no_children) -> None:
    """SIGTERM to the launcher: every worker gets SIGTERM, saves (exits 143), no restart."""
    marks = tmp_path / "marks"
    marks.mkdir()

    def preempt_when_ready() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if len(list(marks.iterdir())) == 2:
                os.kill(os.getpid(), signal.SIGTERM)  # the launcher's handler: a preemption
                return
            time.sleep(0.02)

    cfg = launcher.LaunchConfig(workers=2, state_dir=tmp_path / "state", grace_seconds=1.0,
                                extra_env={"MARKS": str(marks)})
    threading.Thread(target=preempt_when_ready, daemon=True).start()
    result = launcher.launch(cfg, lambda t: [PY, "-c", STOPPABLE], stream=io.StringIO())
    assert result.preempted and not result.ok and result.restarts == 0, result
    assert result.error == (
        "preempted by SIGTERM (worker:0 code 143, worker:1 code 143; backup saved)")


# A stand-in `baton task` in JSON mode: one JSON record, and a line from TF's C++ logging.
JSON_TASK = r"""
import json, os, sys
task = json.loads(os.environ["TF_CONFIG"])["task"]
name = f"{task['type']}:{task['index']}"
print(json.dumps({"level": "INFO", "logger": "baton.task", "message": f"{name} starting"}))
print("W0000 00:00:1700000000.1 12 cpu_allocator.cc:1] Allocation exceeds 10% of memory")
sys.exit(0)
"""


@pytest.fixture
def json_logs() -> Iterator[io.StringIO]:
    """The one handler in JSON mode, writing into a buffer; text mode again afterwards."""
    from baton import logs

    buf = io.StringIO()
    logs.configure("json", "INFO", stream=buf)
    try:
        yield buf
    finally:
        logs.configure("text", "INFO")


def test_launcher_lines_are_json_records_in_json_mode(tmp_path, no_children, json_logs) -> None:
    """BATON_LOG_FORMAT=json: the launcher's own lines are records, a task's JSON record is
    passed on as that object with `task` added, any other task line becomes a record too."""
    cfg = launcher.LaunchConfig(workers=2, state_dir=tmp_path / "state", grace_seconds=1.0)
    text = io.StringIO()
    result = launcher.launch(cfg, lambda t: [PY, "-c", JSON_TASK], stream=text)
    assert result.ok, result
    assert text.getvalue() == ""  # nothing drawn for a terminal
    records = [json.loads(line) for line in json_logs.getvalue().splitlines()]
    own = [r for r in records if "task" not in r]
    assert own and all(r["logger"] == "baton.strategies.launcher" for r in own), own
    assert any(r["message"].startswith("attempt 0: started worker:0, worker:1") for r in own)
    for name in ("worker:0", "worker:1"):
        assert {"level": "INFO", "logger": "baton.task", "message": f"{name} starting",
                "task": name} in records
        tf_line = [r for r in records if r.get("task") == name and "cpu_allocator" in r["message"]]
        assert len(tf_line) == 1 and tf_line[0]["level"] == "WARNING", records
        assert tf_line[0]["logger"] == "baton.strategies.launcher"
