"""Elastic size (strategies/elastic.py): membership bookkeeping, the policy's LOSE verdict, and
the launcher's resize and admission paths, with stand-in tasks (plain Python, no TensorFlow).

The one real cluster run (2 workers -> 1 after `worker:1@step:N:lost`, exact step count) is
test_local_clusters.py::test_elastic_job_loses_a_worker_and_completes_the_planned_steps.
"""

from __future__ import annotations

import io
import signal
import sys
from pathlib import Path

import pytest

from baton.errors import EXIT_PREEMPTED
from baton.strategies import elastic, launcher
from baton.strategies.cluster import ClusterSpecError, TaskId
from baton.strategies.faults import Fault, parse_fault
from baton.strategies.restart_policies import Action, GroupRestart
from baton.strategies.supervisor import Command, ProcessGroup

PY = sys.executable


# ---------------------------------------------------------------------------------- faults
def test_lost_fault_parses_and_is_a_sigkill() -> None:
    f = parse_fault("worker:1@step:40:lost")
    assert f == Fault(TaskId("worker", 1), 40, "lost") and f.lost
    assert f.signum == signal.SIGKILL and str(f) == "worker:1@step:40:lost"
    assert not parse_fault("worker:1@step:40").lost  # type: ignore[union-attr]


# ---------------------------------------------------------------------------------- membership
def test_membership_renumbers_so_the_chief_stays_worker_0() -> None:
    m = elastic.Membership(3, min_workers=1)
    m.begin(0)
    m.lose("worker:0", "gone", step=12)  # the chief's node: the old worker:1 becomes worker:0
    assert m.nodes == [1, 2] and m.node_of("worker:0") == 1
    seg = m.begin(1)
    seg.seen(8, 8, now=0.0)
    m.lose("worker:1", "gone", step=20)  # node 2
    assert m.nodes == [1] and m.workers == 1
    m.begin(2).seen(16, 16, now=0.0)
    events = m.events()
    assert [(e["workers_before"], e["workers_after"], e["node"]) for e in events] == [
        (3, 2, 0), (2, 1, 2)]
    assert events[0]["renumbered"] == {"worker:0": "node 1", "worker:1": "node 2"}
    assert (events[0]["resumed_from"], events[0]["steps_recomputed"]) == (8, 4)
    assert (events[1]["resumed_from"], events[1]["steps_recomputed"]) == (16, 4)
    with pytest.raises(elastic.ElasticError, match="0 worker.s. would be left, fewer than "
                       "min_workers=1"):
        m.lose("worker:0", "gone", step=30)


def test_membership_limits_and_replacements() -> None:
    with pytest.raises(ValueError, match="Received: min_workers=3"):
        elastic.Membership(2, min_workers=3)
    assert not elastic.Membership(2).elastic and elastic.Membership(2, 1).elastic
    m = elastic.Membership(2, 1, replacement_after_s=10.0)
    m.begin(0)
    m.lose("worker:1", "gone", step=5, now=100.0)
    assert m.replacements_ready(now=105.0) == 0 and m.admit(7, now=105.0) == 0
    assert m.replacements_ready(now=110.0) == 1
    assert m.admit(9, now=110.0) == 1 and m.nodes == [0, 2] and m.replacements_ready(200.0) == 0
    assert m.events()[-1]["kind"] == "admitted" and m.events()[-1]["workers_after"] == 2


def test_segment_rate_leaves_out_the_restore_and_the_first_chunk() -> None:
    seg = elastic.Segment(attempt=1, workers=1)
    seg.seen(40, 40, now=0.0)  # training begins after the restore
    seg.seen(44, 40, now=5.0)  # first chunk: includes tracing
    seg.seen(64, 40, now=7.0)
    seg.seen(84, 40, now=9.0)
    assert seg.rate(global_batch_size=64) == {"steps_per_sec": 10.0, "examples_per_sec": 640.0}
    assert elastic.Segment(0, 2).rate(64)["examples_per_sec"] is None
    segs = [seg.as_dict(64), elastic.Segment(0, 2).as_dict(64)]
    assert elastic.describe_segments(segs) == "1:640>2:?"


def test_a_segment_shorter_than_two_polls_is_timed_on_the_chiefs_clock(tmp_path) -> None:
    """The launcher polls every 50 ms: a group that trains a few fast chunks after a resize is
    seen once, at its last step; the status file's first chunk end still times it."""
    from baton.strategies.callbacks import LoopState, StatusFile
    from baton.strategies.launcher import _read_status

    state = LoopState(step=8, total=32, steps_per_epoch=32, global_batch_size=64, history=[])
    status = StatusFile(tmp_path / "status.json", state)
    status.on_train_begin()
    for step in (12, 16, 20, 24):  # four chunk ends between two polls
        state.step = step
        status.on_train_batch_end(0)
    seen = _read_status(tmp_path / "status.json")
    assert seen is not None and seen.step == 24 and seen.resumed_from == 8
    assert seen.first_chunk is not None and seen.first_chunk[1] == 12
    seg = elastic.Segment(attempt=1, workers=1)
    seg.seen(*seen)
    rate = seg.rate(global_batch_size=64)
    assert rate["steps_per_sec"] is not None and rate["steps_per_sec"] > 0, seg.points
    # the restore itself is never a point, whichever order the reports come in
    seg2 = elastic.Segment(attempt=1, workers=1)
    seg2.seen(8, 8, now=0.0)
    seg2.seen(24, 8, now=3.0, first_chunk=(1.0, 12))
    assert seg2.rate(64) == {"steps_per_sec": 6.0, "examples_per_sec": 384.0}


# ---------------------------------------------------------------------------------- policy
def _exited(group: ProcessGroup, name: str, code: int):
    body = f"import os; os.kill(os.getpid(), {-code})" if code < 0 else f"import sys; sys.exit({code})"
    group.start(name, Command([PY, "-c", body]))
    (ended,) = group.wait(20)
    return ended


def test_group_restart_loses_a_gone_member_and_one_whose_restarts_are_exhausted() -> None:
    policy = GroupRestart(1, elastic=["worker:0", "worker:1"])
    with ProcessGroup() as group:
        policy.mark_gone("worker:1")
        v = policy.decide(group, _exited(group, "worker:1", -signal.SIGKILL))
        assert (v.action, v.member) == (Action.LOSE, "worker:1") and policy.restarts == 0
        assert v.reason == "worker:1 exited with signal SIGKILL; its node is gone for good"
        v = policy.decide(group, _exited(group, "worker:0", 129))
        assert v.action is Action.RESTART_GROUP and policy.restarts == 1
        v = policy.decide(group, _exited(group, "worker:0", 129))  # budget spent: lost
        assert (v.action, v.member, v.exhausted) == (Action.LOSE, "worker:0", True)
        assert v.reason == "worker:0 exited with code 129; its restarts are exhausted (1 used)"
        v = policy.decide(group, _exited(group, "worker:0", 1))  # a bad config stays permanent
        assert v.action is Action.FAIL
    plain = GroupRestart(0)  # not elastic: the budget ends the job, as before
    with ProcessGroup() as group:
        assert plain.decide(group, _exited(group, "worker:0", 129)).action is Action.FAIL


def test_launch_config_refuses_min_workers_it_cannot_honour() -> None:
    with pytest.raises(ClusterSpecError, match="Received: min_workers=3"):
        launcher.LaunchConfig(workers=2, min_workers=3)
    with pytest.raises(ClusterSpecError, match="needs strategy multi_worker_mirrored"):
        launcher.LaunchConfig(workers=2, ps=1, strategy="parameter_server", min_workers=1)
    assert launcher.LaunchConfig(workers=2, min_workers=1).elastic
    assert not launcher.LaunchConfig(workers=2, min_workers=2).elastic


# ---------------------------------------------------------------------------------- launcher
# A stand-in `baton task`: the chief reports steps in the status file as the real one does
# ({"step", "resumed_from"}), from the step in RESUME (a stand-in backup); a task named by a
# fault in BATON_INJECT_FAILURE SIGKILLs itself at that step; SIGTERM saves (writes RESUME) and
# exits 143; CODES_<task> gives an exit code per attempt instead of training.
TASK = r"""
import json, os, pathlib, signal, sys, time
task = json.loads(os.environ["TF_CONFIG"])["task"]
name = f"{task['type']}:{task['index']}"
attempt = int(os.environ["BATON_ATTEMPT"])
codes = os.environ.get("CODES_" + name.replace(":", "_"))
if codes:
    sys.exit(int(codes.split(",")[min(attempt, len(codes.split(",")) - 1)]))
resume = pathlib.Path(os.environ["RESUME"])
status = pathlib.Path(os.environ["BATON_STATUS_FILE"])
step = start = int(resume.read_text()) if resume.exists() else 0
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
fault = os.environ.get("BATON_INJECT_FAILURE", "")
total = int(os.environ["TOTAL"])
while step < total:
    step += 2
    time.sleep(0.03)
    if name == "worker:0":
        tmp = status.with_suffix(".tmp")
        tmp.write_text(json.dumps({"step": step, "resumed_from": start}))
        tmp.replace(status)
    if fault.startswith(name + "@") and step >= int(fault.split(":")[2]):
        os.kill(os.getpid(), signal.SIGKILL)
    if stop:
        if name == "worker:0":
            resume.write_text(str(step))
        sys.exit(143)
if name == "worker:0":
    pathlib.Path(os.environ["WORKERS_AT_END"]).write_text(os.environ["TF_CONFIG"])
"""


def _launch(tmp_path: Path, total: int = 40, codes: dict[str, str] | None = None, **kw):
    env = {"RESUME": str(tmp_path / "resume"), "TOTAL": str(total),
           "WORKERS_AT_END": str(tmp_path / "end.json"),
           **{f"CODES_{k}": v for k, v in (codes or {}).items()}}
    fault = kw.pop("fault", None)
    cfg = launcher.LaunchConfig(
        workers=kw.pop("workers", 2), state_dir=tmp_path / "state", grace_seconds=2.0,
        fault=parse_fault(fault), extra_env=env, global_batch_size=64, **kw)
    out = io.StringIO()
    return launcher.launch(cfg, lambda t: [PY, "-c", TASK], stream=out), out.getvalue()


def test_a_lost_worker_shrinks_the_group_and_a_lost_chief_is_renumbered(tmp_path) -> None:
    result, log = _launch(tmp_path / "a", fault="worker:1@step:10:lost", min_workers=1)
    assert result.ok and result.restarts == 0, (result, log)
    assert "continuing with 1 worker(s) from the last backup" in log
    (event,) = result.elastic
    assert (event["task"], event["workers_before"], event["workers_after"]) == ("worker:1", 2, 1)
    assert [s["workers"] for s in result.segments] == [2, 1]
    # the survivor was stopped (SIGTERM: it saved); the smaller group resumed from that backup.
    # The stand-ins are not in lockstep as real workers are (no all-reduce): under load worker:0
    # may be a few steps behind worker:1 when worker:1 dies at its step 10, so only "it saved
    # after training" is asserted here (the real trainer's exact steps: test_local_clusters.py)
    assert result.segments[1]["resumed_from"] == event["resumed_from"] >= 2
    assert result.segments[1]["last_step"] == 40
    # worker:0's node is the lost one: the survivor (node 1) is the chief of the smaller group
    result, log = _launch(tmp_path / "b", fault="worker:0@step:10:lost", min_workers=1)
    assert result.ok, (result, log)
    assert result.elastic[0]["renumbered"] == {"worker:0": "node 1"}
    assert '"worker": [' in (tmp_path / "b" / "end.json").read_text()


def test_a_lost_worker_without_min_workers_fails_and_is_not_restarted(tmp_path) -> None:
    result, _ = _launch(tmp_path, fault="worker:1@step:10:lost")
    assert not result.ok and result.restarts == 0
    assert "worker:1 lost (worker:1 exited with signal SIGKILL; its node is gone for good): " \
        "1 worker(s) would be left, fewer than min_workers=2" in result.error
    assert "min_workers lets a multi-worker mirrored job go on with fewer" in result.error


def test_a_worker_whose_restarts_are_exhausted_is_lost(tmp_path) -> None:
    result, log = _launch(tmp_path, codes={"worker_1": "137"}, max_restarts=1, min_workers=1)
    assert result.ok and result.restarts == 1, (result, log)
    assert result.events[:2] == ["attempt 0: worker:1 exited with code 137",
                                 "attempt 1: worker:1 exited with code 137; its restarts are "
                                 "exhausted (1 used)"]
    assert [s["workers"] for s in result.segments] == [2, 2, 1]


def test_a_replacement_is_admitted_at_the_next_backup_boundary(tmp_path) -> None:
    result, log = _launch(tmp_path, total=100, fault="worker:1@step:10:lost", min_workers=1,
                          replacement_after_s=0.0)
    assert result.ok, (result, log)
    assert [e["kind"] for e in result.elastic] == ["lost", "admitted"]
    assert [s["workers"] for s in result.segments] == [2, 1, 2]
    assert result.segments[1]["ended"].startswith("replacement available: the group saved")
    # the full group resumed from the backup the shrunken one saved when it stopped, at the
    # step boundary after the last one it reported: nothing to recompute
    seen = result.segments[1]["last_step"]
    assert result.segments[2]["resumed_from"] == result.elastic[1]["resumed_from"] >= seen
    assert result.elastic[1]["steps_recomputed"] == 0
    assert result.segments[2]["last_step"] == 100 and EXIT_PREEMPTED == 143
