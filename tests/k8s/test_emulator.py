"""Emulator semantics with tiny Python replicas (fast): restarts, failures, success policy, env."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from baton.errors import EXIT_INTERRUPTED, EXIT_PREEMPTED
from baton.k8s.emulator.tfjob import Emulator, EmulatorOptions, exit_code
from baton.k8s.render import write_manifests
from baton.k8s.tfjob import build_tfjob

from .conftest import make_options

# A replica that exits with the code listed for its attempt: codes "137,0" = killed, then ok;
# "0@worker-0:3" = exit 0 once worker-0 has started 3 times; -1 = run until stopped;
# -2 = run until stopped and ignore SIGTERM (only the SIGKILL after the grace period ends it).
# It records its env and argv so tests see what the "pod" got.
REPLICA = r"""
import json, os, sys, pathlib
out = pathlib.Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
task = json.loads(os.environ["TF_CONFIG"])["task"]
me = f"{task['type']}-{task['index']}"
attempts = out / f"{me}.attempts"
n = int(attempts.read_text()) if attempts.exists() else 0
attempts.write_text(str(n + 1))
(out / f"{me}.env.json").write_text(json.dumps({"argv": sys.argv, "env": dict(os.environ)}))
codes = os.environ.get("CODES_" + me.replace("-", "_"), "0").split(",")
code, _, after = codes[min(n, len(codes) - 1)].partition("@")
if after:
    import time
    other, _, count = after.partition(":")
    f = out / f"{other}.attempts"
    while not (f.exists() and f.read_text() and int(f.read_text()) >= int(count)):
        time.sleep(0.02)
    time.sleep(0.2)
code = int(code)
if code == -2:
    import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN)
if code < 0:
    import time; time.sleep(600)
sys.exit(code)
"""


def _job(**kwargs) -> dict:
    """A TFJob without the spec ConfigMap and input gate (nothing to mount or wait for)."""
    return build_tfjob(make_options(train_inputs=(), spec_text=None, **kwargs))


def _run(tmp_path: Path, job: dict, codes: dict[str, str], manifests: Path | None = None,
         grace_seconds: float = 30.0):
    events = []
    opts = EmulatorOptions(grace_seconds=grace_seconds,
        volume_dir=tmp_path / "vol", work_dir=tmp_path / "work", manifests_dir=manifests,
        command=[sys.executable, "-c", REPLICA, "/artifacts/out", "/etc/baton/pipeline.yaml"],
        env={f"CODES_{k}": v for k, v in codes.items()},
        on_event=lambda kind, pod, details: events.append((kind, pod, {**details, "at": time.monotonic()})),
    )
    em = Emulator(job, opts)
    rc = em.run()
    return rc, em, events


def _pids_gone(events) -> bool:
    for kind, _pod, details in events:
        if kind == "started":
            try:
                os.kill(details["pid"], 0)
            except ProcessLookupError:
                continue
            return False
    return True


def test_sigkilled_worker_restarts_then_chief_success_ends_the_job(tmp_path):
    job = _job(workers=3)
    rc, em, events = _run(tmp_path, job, {"worker_0": "137,143,0", "worker_1": "-1", "chief_0": "0@worker-0:3"})
    assert rc == 0
    assert em.history[:2] == ["Created", "Running"] and "Restarting" in em.history
    assert em.history[-1] == "Succeeded"
    status = json.loads((tmp_path / "work" / "status.json").read_text())
    assert status["conditions"][-1]["type"] == "Succeeded"
    assert status["conditions"][-1]["reason"] == "TFJobSucceeded"
    assert _pids_gone(events)  # worker-1 was still running: cleanPodPolicy stopped it


def test_pods_left_running_are_deleted_together_and_their_exit_reported(tmp_path):
    """Chief success ends the job; the 3 workers still running are deleted at once: two that
    ignore SIGTERM are SIGKILLed after one grace period (not two in a row), one exits on SIGTERM."""
    job = _job(workers=4)  # the chief counts as one of the 4 workers: Chief + 3 Worker replicas
    codes = {"worker_0": "-2", "worker_1": "-2", "worker_2": "-1", "chief_0": "0@worker-2:1"}
    rc, em, events = _run(tmp_path, job, codes, grace_seconds=1.5)
    ended = time.monotonic()
    succeeded = next(d["at"] for kind, _, d in events if kind == "condition" and d["type"] == "Succeeded")
    status = json.loads((tmp_path / "work" / "status.json").read_text())
    pods = {name.rsplit("-", 2)[-2] + "-" + name.rsplit("-", 1)[-1]: pod
            for name, pod in status["pods"].items()}
    assert rc == 0 and em.history[-1] == "Succeeded"
    assert pods["chief-0"]["exitCodes"] == [0] and "deletedExitCode" not in pods["chief-0"]
    for name, code in (("worker-0", 137), ("worker-1", 137), ("worker-2", 143)):
        assert pods[name]["exitCodes"] == [] and pods[name]["deletedExitCode"] == code, pods
    assert pods["worker-0"]["phase"] == "Running"  # deleted, not failed: no restart counted
    assert status["restarts"] == 0
    assert 1.4 < ended - succeeded < 2.9, ended - succeeded  # one grace period; in a row >= 3 s
    assert _pids_gone(events)


def test_a_failed_replica_whose_port_another_process_holds_names_that_process(tmp_path):
    """A pod keeps its port across restarts here: when a replica fails while a live process
    holds its port (the restart would fail to bind it), the emulator says which process."""
    import io
    import socket

    held: list[socket.socket] = []
    stream = io.StringIO()

    def on_event(kind: str, pod: str, details: dict) -> None:
        if kind == "started" and pod.endswith("-worker-0"):
            port = int(em.local_addresses[pod].rsplit(":", 1)[1])
            s = socket.socket()
            s.bind(("127.0.0.1", port))
            s.listen()
            held.append(s)

    opts = EmulatorOptions(volume_dir=tmp_path / "vol", work_dir=tmp_path / "work",
                           command=[sys.executable, "-c", REPLICA, "/artifacts/out", "x"],
                           env={"CODES_worker_0": "1", "CODES_chief_0": "-1"},
                           on_event=on_event, stream=stream, grace_seconds=5)
    em = Emulator(_job(), opts)
    try:
        assert em.run() == 1
    finally:
        for s in held:
            s.close()
    worker = next(name for name in em.local_addresses if name.endswith("-worker-0"))
    said = stream.getvalue()
    assert (f"{worker}: its port {em.local_addresses[worker]} is held by pid {os.getpid()} ("
            in said and "LISTEN" in said), said
    chief = next(name for name in em.local_addresses if name.endswith("-chief-0"))
    assert f"{chief}: its port" not in said  # the chief was deleted, not failed


def test_permanent_exit_code_fails_the_job(tmp_path):
    job = _job()
    rc, em, events = _run(tmp_path, job, {"worker_0": "1", "chief_0": "-1"})
    assert rc == 1 and em.history[-1] == "Failed"
    assert "exit code 1" in em.conditions[-1]["message"]
    assert "Restarting" not in em.history
    assert _pids_gone(events)


def test_backoff_limit_ends_a_crash_loop(tmp_path):
    job = _job()
    job["spec"]["runPolicy"]["backoffLimit"] = 2
    rc, em, _ = _run(tmp_path, job, {"worker_0": "137", "chief_0": "-1"})
    assert rc == 1 and em.total_restarts == 2
    assert em.conditions[-1]["reason"] == "BackoffLimitExceeded"


def test_restart_policy_never_fails_on_a_signal(tmp_path):
    job = _job()
    job["spec"]["tfReplicaSpecs"]["Worker"]["restartPolicy"] = "Never"
    rc, em, _ = _run(tmp_path, job, {"worker_0": "143", "chief_0": "-1"})
    assert rc == 1 and "Restarting" not in em.history


def test_without_a_chief_worker_0_decides_success(tmp_path):
    job = _job(workers=2, chief=0)
    rc, em, _ = _run(tmp_path, job, {"worker_0": "0", "worker_1": "-1"})
    assert rc == 0 and em.history[-1] == "Succeeded"


def test_all_workers_success_policy(tmp_path):
    job = _job(workers=2, chief=0)
    job["spec"]["successPolicy"] = "AllWorkers"
    rc, em, _ = _run(tmp_path, job, {"worker_0": "0", "worker_1": "137,0"})
    assert rc == 0
    assert (tmp_path / "vol" / "out" / "worker-1.attempts").read_text() == "2"


def test_replica_environment_is_the_operators(tmp_path):
    opts = make_options("parameter_server", 2, 1)
    write_manifests(opts, tmp_path / "m")
    job = build_tfjob(opts)
    gate = tmp_path / "vol" / "runs" / "penguins" / opts.run_id / "transform" / "transformed"
    gate.mkdir(parents=True)
    (gate.parent / "lineage.json").write_text('{"status": "succeeded"}')  # the runner's record
    rc, em, _ = _run(tmp_path, job, {"chief_0": "0@worker-1:1", "worker_0": "-1", "worker_1": "-1", "ps_0": "-1"},
                     manifests=tmp_path / "m")
    assert rc == 0
    seen = json.loads((tmp_path / "vol" / "out" / "worker-1.env.json").read_text())
    env = seen["env"]
    op = env["BATON_OPERATOR_TF_CONFIG"]
    job_name = opts.job_name
    j = job_name
    assert op == (
        f'{{"cluster":{{"chief":["{j}-chief-0.default.svc:2222"],"ps":["{j}-ps-0.default.svc:2222"],'
        f'"worker":["{j}-worker-0.default.svc:2222","{j}-worker-1.default.svc:2222"]}},'
        '"task":{"type":"worker","index":1},"environment":"cloud"}'
    )
    local = json.loads(env["TF_CONFIG"])
    assert local["task"] == {"type": "worker", "index": 1}
    addrs = [a for v in local["cluster"].values() for a in v]
    assert all(a.startswith("127.0.0.1:") for a in addrs) and len(set(addrs)) == 4
    mapping = json.loads((tmp_path / "work" / "tf_config.json").read_text())
    assert mapping[f"{job_name}-worker-1"]["local_address"] == local["cluster"]["worker"][1]
    # PVC and ConfigMap paths are rewritten; the project's environment is first on PATH
    assert seen["argv"][1] == str(tmp_path / "vol" / "out")
    spec_file = Path(seen["argv"][2])
    assert spec_file.read_text() == "pipeline: penguins\n"
    assert env["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable)
    assert env["BATON_RUN_ID"] == opts.run_id


# A replica that does what `baton task` does with a fault: inject it on attempt 0 only (here:
# exit 137 at once when the fault names this task). It records `<task>.<attempt>` per start.
FAULTY_REPLICA = r"""
import json, os, pathlib, sys
out = pathlib.Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
task = json.loads(os.environ["TF_CONFIG"])["task"]
attempt = int(os.environ.get("BATON_ATTEMPT", "0"))
(out / f"{task['type']}-{task['index']}.{attempt}").touch()
fault = os.environ.get("BATON_INJECT_FAILURE", "") if attempt == 0 else ""
sys.exit(137 if fault.startswith(f"{task['type']}:{task['index']}@") else 0)
"""


def test_an_injected_fault_fires_on_the_first_attempt_only(tmp_path, monkeypatch):
    """Each pod gets BATON_ATTEMPT, its restart count (never this machine's): the SIGKILLed
    worker's restart trains on instead of crash-looping into BackoffLimitExceeded."""
    monkeypatch.setenv("BATON_ATTEMPT", "7")  # a leftover on this machine must not reach a pod
    opts = EmulatorOptions(volume_dir=tmp_path / "vol", work_dir=tmp_path / "work",
                           command=[sys.executable, "-c", FAULTY_REPLICA, "/artifacts/out"],
                           env={"BATON_INJECT_FAILURE": "worker:0@step:45"})
    em = Emulator(_job(workers=2, chief=0), opts)  # worker 0 decides success
    assert em.run() == 0, em.conditions
    assert sorted(p.name for p in (tmp_path / "vol" / "out").iterdir()) == [
        "worker-0.0", "worker-0.1", "worker-1.0"]
    assert em.status()["pods"][f"{em.name}-worker-0"]["exitCodes"] == [137, 0]


def test_exit_code_maps_signals_like_the_kubelet():
    assert exit_code(-9) == 137 and exit_code(-15) == 143 and exit_code(1) == 1


def test_single_replica_job_gets_no_tf_config(tmp_path, monkeypatch):
    # The operator's SetClusterSpec returns early when !isDistributed: the replicas of the known
    # types (Chief, Evaluator, Master, PS, Worker; unset = 1) add up to exactly 1.
    monkeypatch.setenv("TF_CONFIG", '{"leaked": "from the laptop"}')
    job = _job(strategy="one_device", workers=1)
    assert list(job["spec"]["tfReplicaSpecs"]) == ["Chief"]
    record = ("import json, os, sys, pathlib; p = pathlib.Path(sys.argv[1]); p.mkdir(parents=True); "
              "(p / 'env.json').write_text(json.dumps(dict(os.environ)))")
    opts = EmulatorOptions(volume_dir=tmp_path / "vol", work_dir=tmp_path / "work",
                           command=[sys.executable, "-c", record, "/artifacts/out"])
    assert Emulator(job, opts).run() == 0
    env = json.loads((tmp_path / "vol" / "out" / "env.json").read_text())
    assert "TF_CONFIG" not in env and "BATON_OPERATOR_TF_CONFIG" not in env
    mapping = json.loads((tmp_path / "work" / "tf_config.json").read_text())
    assert mapping[f"{job['metadata']['name']}-chief-0"]["operator_tf_config"] is None


def test_is_distributed_follows_the_operator():
    from baton.k8s.tfconfig import is_distributed

    def job(**replicas):
        return {"spec": {"tfReplicaSpecs": {t: ({} if n is None else {"replicas": n})
                                            for t, n in replicas.items()}}}

    assert not is_distributed(job(Chief=1))
    assert not is_distributed(job(Worker=None))  # replicas unset counts 1
    assert not is_distributed(job(Chief=1, Worker=0))
    assert is_distributed(job(Chief=1, Worker=1))
    assert is_distributed(job(Chief=1, Evaluator=1))  # the evaluator counts too
    assert is_distributed(job(Worker=2))
    assert is_distributed(job(Chief=None, PS=None))


def _alive(pid: int) -> bool:
    """Running (a zombie left for init to reap counts as gone)."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, EXIT_PREEMPTED),
                                          (signal.SIGINT, EXIT_INTERRUPTED)])
def test_a_signal_to_the_emulator_deletes_its_pods(tmp_path, signum, code):
    """`baton k8s emulate` on SIGTERM (or Ctrl-C) deletes the job as the operator would: every
    pod is stopped before it exits 143 (130), none is left re-parented to PID 1. The pods wait
    in their wait-for-inputs init container (`sh` looping over `sleep 10`) on an empty volume."""
    import psutil

    write_manifests(make_options(workers=3), tmp_path / "m")  # Chief + 2 Workers
    proc = subprocess.Popen(
        [sys.executable, "-m", "baton", "k8s", "emulate", str(tmp_path / "m" / "tfjob.yaml"),
         "--work-dir", str(tmp_path / "w")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    pods: set[int] = set()
    try:
        deadline = time.monotonic() + 60
        while len(pods) < 6:  # 3 pods: each a `sh` and its `sleep`
            assert time.monotonic() < deadline and proc.poll() is None, (pods, proc.poll())
            with contextlib.suppress(psutil.NoSuchProcess):
                pods |= {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
            time.sleep(0.05)
        os.kill(proc.pid, signum)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == code, out
        assert f"{signal.Signals(signum).name}: the TFJob is deleted; deleting its pods" in out
        left = [p for p in pods if _alive(p)]
        assert not left, f"pod processes left running: {left}\n{out}"
        status = json.loads((tmp_path / "w" / "status.json").read_text())
        assert {p["deletedExitCode"] for p in status["pods"].values()} == {143}, status
    finally:  # on a failure, end only what this test started
        for pid in [proc.pid, *pods]:
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=10)


def test_a_pod_held_by_its_input_gate_says_so_on_the_console(tmp_path):
    """Issue 37: `baton k8s emulate tfjob.yaml` on a fresh volume printed 'Running' and nothing
    else while every pod waited in wait-for-inputs (the waiting lines went only to the pods' log
    files). Each pod's init container, and what it waits for, is now on the console."""
    write_manifests(make_options(workers=2), tmp_path / "m")  # Chief + Worker
    proc = subprocess.Popen(
        [sys.executable, "-m", "baton", "k8s", "emulate", str(tmp_path / "m" / "tfjob.yaml"),
         "--work-dir", str(tmp_path / "w")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 120  # the pods' `sh` start at once; TensorFlow is not imported
        while sum("wait-for-inputs: waiting for inputs: transform/transformed" in ln
                  for ln in list(seen)) < 2:
            assert time.monotonic() < deadline and proc.poll() is None, "".join(seen)
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        reader.join(timeout=10)
    said = "".join(seen)
    job = make_options().job_name
    for pod in (f"{job}-chief-0", f"{job}-worker-0"):
        assert f"{pod}: init container wait-for-inputs (pid" in said, said
        assert f"{pod}: wait-for-inputs: waiting for inputs: transform/transformed" in said, said
    assert said.count("waiting for inputs") == 2, said  # once per pod, not every 10 s
