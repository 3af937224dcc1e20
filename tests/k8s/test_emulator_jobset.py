"""The JobSet emulator's controllers with tiny stand-in pods (fast): dependsOn order, the Jobs' pod
failure policies (137 and 143 retried, 1 fails the whole JobSet at once), backoff then the
JobSet's restart, readiness before dependents start, a TrainJob run as Trainer's JobSet, the
pods' TF_CONFIG built from what JobSet gives them, and SIGTERM deleting everything."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from baton.k8s import trainer_controller
from baton.k8s.emulator.jobset import JobSetEmulator, JobSetOptions
from baton.k8s.jobset import build_jobset
from baton.k8s.trainjob import build_runtime, build_trainjob

from .conftest import make_options

# A pod: builds its TF_CONFIG as `baton task` does (strategies.jobset_cluster), records it and
# its attempts, then exits with the code listed for its attempt ("137,143,0"); "0@worker-0:3"
# waits until worker-0 has started 3 times; -1 runs until stopped; "serve" listens on its own
# TF_CONFIG address (a PS) until stopped. The data and release steps are `<step>` by argv.
POD = r"""
import json, os, pathlib, socket, sys, time
from baton.strategies import jobset_cluster
out = pathlib.Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
if jobset_cluster.is_jobset_pod(os.environ):
    t = jobset_cluster.from_env(os.environ)
    me = f"{t.tf_config.task.type}-{t.tf_config.task.index}"
    (out / f"{me}.json").write_text(json.dumps({"operator": t.operator_json,
                                                "local": json.loads(t.tf_config.to_json())}))
else:
    me = sys.argv[2]
n = int((out / f"{me}.attempts").read_text()) if (out / f"{me}.attempts").exists() else 0
(out / f"{me}.attempts").write_text(str(n + 1))
with open(out / "order.txt", "a") as f:
    f.write(f"{me}\n")
codes = os.environ.get("CODES_" + me.replace("-", "_"), "0").split(",")
code = codes[min(n, len(codes) - 1)]
if code == "serve":
    host, _, port = t.tf_config.cluster.address(t.tf_config.task).rpartition(":")
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, int(port))); s.listen(8)
    while True:
        s.accept()[0].close()
code, _, after = code.partition("@")
if after:
    other, _, count = after.partition(":")
    f = out / f"{other}.attempts"
    while not (f.exists() and f.read_text() and int(f.read_text()) >= int(count)):
        time.sleep(0.02)
if int(code) < 0:
    time.sleep(600)
sys.exit(int(code))
"""


def _stand_in(doc: dict, replicated_jobs: list[dict]) -> dict:
    for rj in replicated_jobs:
        [c] = rj["template"]["spec"]["template"]["spec"]["containers"]
        c["command"] = [sys.executable, "-c", POD]
        c["args"] = ["/artifacts/out", rj["name"]]
    return doc


def _jobset(strategy: str = "multi_worker_mirrored", workers: int = 2, ps: int = 0, **kw) -> dict:
    js = build_jobset(make_options(strategy, workers, ps, target="jobset", spec_text=None, **kw))
    return _stand_in(js, js["spec"]["replicatedJobs"])


def _run(tmp_path: Path, js: dict, codes: dict[str, str], grace: float = 3.0):
    events: list[tuple[str, str, dict]] = []
    em = JobSetEmulator(js, JobSetOptions(
        volume_dir=tmp_path / "vol", work_dir=tmp_path / "work", grace_seconds=grace,
        env={f"CODES_{k}": v for k, v in codes.items()},
        on_event=lambda kind, name, d: events.append((kind, name, {**d, "at": time.monotonic()}))))
    return em.run(), em, events


def _order(tmp_path: Path) -> list[str]:
    return (tmp_path / "vol" / "out" / "order.txt").read_text().split()


def _gone(events) -> bool:
    for kind, _, d in events:
        if kind == "started":
            with contextlib.suppress(ProcessLookupError):
                os.kill(d["pid"], 0)
                return False
    return True


def test_steps_run_in_depends_on_order_and_killed_or_preempted_pods_are_recreated(tmp_path):
    js = _jobset(workers=3)  # data, chief, worker x2, release
    rc, em, events = _run(tmp_path, js, {"worker_0": "137,143,0", "worker_1": "0",
                                         "chief_0": "0@worker-0:3"})
    assert rc == 0, em.status()
    order = _order(tmp_path)
    assert order[0] == "data" and order[-1] == "release"
    assert set(order[1:-1]) == {"chief-0", "worker-0", "worker-1"}
    status = json.loads((tmp_path / "work" / "status.json").read_text())
    worker0 = status["pods"]["penguins-20261129-221500-3fa2-worker-0-0"]
    assert worker0["exitCodes"] == [137, 143, 0] and worker0["attempt"] == 2  # same host name
    assert status["jobs"]["penguins-20261129-221500-3fa2-worker-0"] == {
        "status": "Complete", "reason": "Completed", "failures": 2}  # counted against backoffLimit
    assert status["conditions"][-1]["type"] == "Completed" and status["restarts"] == 0
    started = {name: d["at"] for kind, name, d in events if kind == "started" and d["main"]}
    done = {name: d["at"] for kind, name, d in events if kind == "job" and d.get("status") == "Complete"}
    j = "penguins-20261129-221500-3fa2"
    assert started[f"{j}-chief-0-0"] >= done[f"{j}-data-0"]  # dependsOn: data Complete
    assert started[f"{j}-release-0-0"] >= done[f"{j}-chief-0"]  # dependsOn: chief Complete
    assert _gone(events)


def test_each_pods_tf_config_comes_from_its_jobset_labels_and_host_name(tmp_path):
    rc, em, _ = _run(tmp_path, _jobset(workers=3), {})
    assert rc == 0
    seen = json.loads((tmp_path / "vol" / "out" / "worker-1.json").read_text())
    j = "penguins-20261129-221500-3fa2"
    assert seen["operator"] == (
        f'{{"cluster":{{"chief":["{j}-chief-0-0.{j}:2222"],"worker":["{j}-worker-0-0.{j}:2222",'
        f'"{j}-worker-0-1.{j}:2222"]}},"task":{{"type":"worker","index":1}},"environment":"cloud"}}')
    local = seen["local"]["cluster"]
    assert local["worker"][1] == em.address_map()[f"{j}-worker-0-1.{j}:2222"]
    assert all(a.startswith("127.0.0.1:") for v in local.values() for a in v)


def test_a_permanent_exit_code_fails_the_jobset_at_once_and_no_later_step_waits(tmp_path):
    rc, em, events = _run(tmp_path, _jobset(), {"worker_0": "1", "chief_0": "-1"})
    assert rc == 1
    status = em.status()
    assert status["conditions"][-1]["reason"] == "FailJobSetFailurePolicyAction"
    assert "failure policy rule 'permanentError'" in status["conditions"][-1]["message"]
    assert status["jobs"]["penguins-20261129-221500-3fa2-worker-0"]["reason"] == "PodFailurePolicy"
    assert "release" not in _order(tmp_path) and "penguins-20261129-221500-3fa2-release-0" not in status["jobs"]
    chief = status["pods"]["penguins-20261129-221500-3fa2-chief-0-0"]
    assert chief["exitCodes"] == [] and chief["deletedExitCode"] == 143  # deleted with the JobSet
    assert _gone(events)


def test_spent_retries_restart_the_whole_jobset_once_then_fail_it(tmp_path):
    js = _jobset()
    for rj in js["spec"]["replicatedJobs"]:
        rj["template"]["spec"]["backoffLimit"] = 1
    rc, em, _ = _run(tmp_path, js, {"worker_0": "137", "chief_0": "-1"})
    assert rc == 1
    status = em.status()
    assert status["restarts"] == 1
    assert [c["type"] for c in status["conditions"]] == ["RestartingJobSet", "Failed"]
    assert status["conditions"][-1]["reason"] == "ReachedMaxRestarts"
    assert _order(tmp_path).count("data") == 2  # every step again after the restart
    assert (tmp_path / "vol" / "out" / "worker-0.attempts").read_text() == "4"  # 2 per JobSet run


def test_parameter_servers_are_ready_before_workers_start_and_the_coordinator_last(tmp_path):
    js = _jobset("parameter_server", 2, 1)
    # (PS-strategy workers are TensorFlow servers too: Ready once they listen)
    rc, em, events = _run(tmp_path, js, {"ps_0": "serve", "worker_0": "serve", "worker_1": "serve",
                                         "chief_0": "0"}, grace=2.0)
    assert rc == 0, em.status()
    order = _order(tmp_path)
    assert order.index("ps-0") < min(order.index("worker-0"), order.index("worker-1")) < order.index("chief-0")
    pods = em.status()["pods"]
    j = "penguins-20261129-221500-3fa2"
    # the JobSet completed when the release step did: the servers, which never exit, are deleted
    assert pods[f"{j}-ps-0-0"]["deletedExitCode"] in (143, 137) and pods[f"{j}-worker-0-0"]["exitCodes"] == []
    ready = {name: d["at"] for kind, name, d in events if kind == "ready"}
    started = {name: d["at"] for kind, name, d in events if kind == "started" and d["main"]}
    assert min(started[f"{j}-worker-0-0"], started[f"{j}-worker-0-1"]) >= ready[f"{j}-ps-0-0"]
    assert started[f"{j}-chief-0-0"] >= max(ready[f"{j}-worker-0-0"], ready[f"{j}-worker-0-1"])


def test_a_trainjob_runs_as_the_jobset_trainer_would_create(tmp_path):
    opts = make_options("multi_worker_mirrored", 3, 0, target="trainjob", spec_text=None)
    tj, runtime = build_trainjob(opts), build_runtime(opts)
    js = trainer_controller.to_jobset(tj, runtime)
    _stand_in(js, js["spec"]["replicatedJobs"])
    rc, em, _ = _run(tmp_path, js, {"worker_1": "137,0"})
    assert rc == 0, em.status()
    j = "penguins-20261129-221500-3fa2"
    chief = json.loads((tmp_path / "vol" / "out" / "chief-0.json").read_text())
    assert chief["operator"].startswith(
        f'{{"cluster":{{"chief":["{j}-node-0-0.{j}:2222"],"worker":["{j}-node-0-1.{j}:2222",'
        f'"{j}-node-0-2.{j}:2222"]}},"task":{{"type":"chief","index":0}}')
    assert em.status()["pods"][f"{j}-node-0-2"]["exitCodes"] == [137, 0]


def _trainjob_jobset(strategy: str = "multi_worker_mirrored", workers: int = 2, ps: int = 0) -> dict:
    opts = make_options(strategy, workers, ps, target="trainjob", spec_text=None)
    js = trainer_controller.to_jobset(build_trainjob(opts), build_runtime(opts))
    return _stand_in(js, js["spec"]["replicatedJobs"])


def test_a_trainjobs_permanent_failure_and_preemption_follow_the_same_policies(tmp_path):
    """Under a TrainJob too: a preempted node (143) is re-created; a permanent error (1) fails
    the JobSet Trainer made, at once, deleting the rest; the release step is never created."""
    rc, em, events = _run(tmp_path / "a", _trainjob_jobset(), {"worker_0": "143,0"})
    assert rc == 0 and em.status()["pods"]["penguins-20261129-221500-3fa2-node-0-1"]["exitCodes"] == [143, 0]
    rc, em, events = _run(tmp_path / "b", _trainjob_jobset(), {"worker_0": "1", "chief_0": "-1"})
    assert rc == 1
    status = em.status()
    assert status["conditions"][-1]["reason"] == "FailJobSetFailurePolicyAction"
    assert status["pods"]["penguins-20261129-221500-3fa2-node-0-0"]["deletedExitCode"] == 143
    assert "penguins-20261129-221500-3fa2-release-0" not in status["jobs"]
    assert _gone(events)


def test_a_pod_whose_manifest_lost_a_tf_config_input_exits_1_naming_it(tmp_path):
    """`baton task` itself in the pod (no stand-in): the hand-edited worker lacks
    BATON_JOB_INDEX; it exits 1 at once naming the variable and the label it comes from, the
    JobSet fails, and nothing waits for a peer that cannot come."""
    js = build_jobset(make_options(workers=2, target="jobset", spec_text=None, data_stages=(),
                                   release_stages=()))
    worker = next(rj for rj in js["spec"]["replicatedJobs"] if rj["name"] == "worker")
    [c] = worker["template"]["spec"]["template"]["spec"]["containers"]
    c["env"] = [e for e in c["env"] if e["name"] != "BATON_JOB_INDEX"]
    # The chief (a stand-in that runs until stopped): a real chief would fail on its own, on
    # the transform outputs this test does not make, and race the worker to fail the JobSet.
    _stand_in(js, [rj for rj in js["spec"]["replicatedJobs"] if rj["name"] == "chief"])
    started = time.monotonic()
    rc, em, events = _run(tmp_path, js, {"chief_0": "-1"})
    assert rc == 1 and time.monotonic() - started < 120
    # Both workers lack it; whichever fails first fails the JobSet, and the other is deleted,
    # perhaps before it could say anything: read the log of a pod that exited 1.
    assert em.status()["pods"]["penguins-20261129-221500-3fa2-worker-0-0"]["exitCodes"] == [1]
    log = (tmp_path / "work" / "logs" / "penguins-20261129-221500-3fa2-worker-0-0.log").read_text()
    assert ("BATON_JOB_INDEX is missing: the container must take it from "
            "metadata.labels['jobset.sigs.k8s.io/job-index']") in log
    assert em.status()["conditions"][-1]["reason"] == "FailJobSetFailurePolicyAction"
    assert _gone(events)


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_sigterm_to_baton_k8s_emulate_deletes_the_jobsets_pods(tmp_path):
    import psutil

    js = _jobset()
    (tmp_path / "jobset.yaml").write_text(yaml.safe_dump(js))
    env = {**os.environ, "CODES_data": "-1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "baton", "k8s", "emulate", str(tmp_path / "jobset.yaml"),
         "--work-dir", str(tmp_path / "w")], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    pods: set[int] = set()
    try:
        deadline = time.monotonic() + 60
        while not pods:
            assert time.monotonic() < deadline and proc.poll() is None, proc.poll()
            with contextlib.suppress(psutil.NoSuchProcess):
                pods |= {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
            time.sleep(0.05)
        time.sleep(0.5)
        os.kill(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 143, out
        assert "SIGTERM: the JobSet is deleted; deleting its pods" in out
        assert not [p for p in pods if _alive(p)], out
        status = json.loads((tmp_path / "w" / "status.json").read_text())
        assert status["pods"]["penguins-20261129-221500-3fa2-data-0-0"]["deletedExitCode"] == 143
    finally:
        for pid in [proc.pid, *pods]:
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=10)


@pytest.mark.parametrize("target", ["jobset", "trainjob"])
def test_emulate_refuses_an_invalid_manifest_before_running_anything(tmp_path, capsys, target):
    from baton.pipeline.cli import main as baton

    out = tmp_path / "m"
    assert baton(["k8s", "--out", str(out), "--run-id", "r1", "--target", target]) == 0
    name = "jobset.yaml" if target == "jobset" else "clustertrainingruntime.yaml"
    doc = yaml.safe_load((out / name).read_text())
    spec = doc["spec"] if target == "jobset" else doc["spec"]["template"]["spec"]
    spec["replicatedJobs"][0]["dependsOn"] = [{"name": "release", "status": "Complete"}]
    (out / name).write_text(yaml.safe_dump(doc))
    capsys.readouterr()
    assert baton(["k8s", "emulate", str(out), "--work-dir", str(tmp_path / "w")]) == 2
    assert "DependsOn can't be set for the first ReplicatedJob" in capsys.readouterr().err
    assert not (tmp_path / "w" / "logs").exists()


def test_a_job_held_by_its_init_container_says_what_it_waits_for(tmp_path):
    """The release Job of a TFJob pipeline (and the federation's run Job) waits in
    `wait-for-inputs`; what that init container prints goes to the console once per change
    (it used to reach only the pod's log file)."""
    import io

    from baton.k8s.emulator.jobs import plain_jobs

    gate = ("echo 'waiting for inputs: train/model'; sleep 1.5; "
            "echo 'waiting for inputs: train/model'; sleep 1.5")
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "rel", "namespace": "ml"},
           "spec": {"backoffLimit": 0, "template": {"spec": {
               "restartPolicy": "Never",
               "initContainers": [{"name": "wait-for-inputs", "image": "i:1", "command": ["sh", "-c", gate]}],
               "containers": [{"name": "baton", "image": "i:1", "command": ["true"]}]}}}}
    console = io.StringIO()
    rc = JobSetEmulator(plain_jobs([job]), JobSetOptions(
        volume_dir=tmp_path / "vol", work_dir=tmp_path / "work", stream=console, label="Job"),
        plain=True).run()
    said = console.getvalue()
    assert rc == 0, said
    assert "pod rel-0: init container wait-for-inputs" in said
    assert said.count("pod rel-0: waiting for inputs: train/model") == 1, said
