"""A compiled pipeline run by KFP's own local runner (kfp.local, SubprocessRunner): the DAG,
the artifacts between steps, the parameters, caching, retries and permanent failures.

The pipeline is three user stages without TensorFlow (tests/pipeline/kfp/userstages.py), so
each run takes seconds; the default pipeline and examples/own_model run the same way in
test_e2e.py.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from baton.pipeline.cli import main
from baton.pipeline.kfp import compile as K
from baton.pipeline.kfp.local import run_local
from baton.pipeline.spec import load_spec

from . import userstages

pytestmark = pytest.mark.slow  # each run starts a few Python processes per step


def compiled(tmp_path: Path, spec: Path, name: str = "p.yaml") -> tuple[Path, str]:
    c = K.build(load_spec(spec), K.KfpOptions(pipeline_root=str(tmp_path / "root"),
                                              runs_dir=str(tmp_path / "runs"), local=True,
                                              retries=2, retry_backoff_s=0))
    return K.write(c, tmp_path / name), c.root


def runs(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "runs" / "numbers").glob("2*"))


def total(run: Path) -> int:
    return int((run / "report" / "report" / "total.txt").read_text())


def artifact(root: str, task: str, output: str) -> dict:
    """The newest kfp.local output artifact `output` of `task` under pipeline root `root`."""
    found = sorted(Path(root).glob(f"numbers-*/{task}/{output}"))
    return json.loads(found[-1].read_text())


def test_the_dag_artifacts_and_parameters_run_through_kfp_local(tmp_path, capfd):
    spec = userstages.write(tmp_path / "src")
    out = tmp_path / "p.yaml"
    rc = main(["kfp", str(spec), "--out", str(out), "--run-local", "--pipeline-root",
               str(tmp_path / "root"), "--runs-dir", str(tmp_path / "runs"),
               "--param", "run_id=r-one", "--param", 'config={"scale": {"factor": 3}}'])
    log = capfd.readouterr()
    assert rc == 0, log.out[-3000:] + log.err[-3000:]
    run = tmp_path / "runs" / "numbers" / "r-one"
    assert total(run) == 18  # the `config` parameter reached the stage: (1 + 2 + 3) * 3
    # KFP ran the steps in the DAG's order, its own orchestrator choosing
    text = log.out + log.err
    order = [text.index(f"Executing task \x1b[96m'{t}'") for t in
             ("plan-run", "produce", "scale", "report", "finish-run")]
    assert order == sorted(order)
    # the artifact KFP handed `report` is the record of scale's commit in this run
    scaled = artifact(str(tmp_path / "root"), "scale", "scaled")
    commit = json.loads((run / "scale" / "lineage.json").read_text())
    assert scaled["run_id"] == "r-one" and scaled["hash"] == commit["outputs"]["scaled"]["hash"]
    record = json.loads((run / "run.json").read_text())  # finish wrote the whole run
    assert record["status"] == "succeeded"
    assert [s["status"] for s in record["stages"]] == ["succeeded"] * 3
    assert (run / ".kfp" / "spec" / "numhelper.py").read_text() == \
        (tmp_path / "src" / "numhelper.py").read_text()


def test_kfps_cache_never_serves_a_stale_step_baton_decides(tmp_path, capfd):
    """kfp.local's step cache on, as a user may turn Vertex's or KFP's on: every step still
    runs (the compiled tasks keep it off), and Baton's content keys decide: nothing changed,
    everything is reused; a changed helper module reruns the stage importing it; changed data
    under the same path reruns the stage reading it."""
    src = tmp_path / "src"
    spec = userstages.write(src)
    first, root = compiled(tmp_path, spec, "a.yaml")
    assert run_local(first, root, {}, caching=True) == 0
    capfd.readouterr()
    assert run_local(first, root, {}, caching=True) == 0
    log = capfd.readouterr()
    text = log.out + log.err
    assert "cache hit" not in text  # kfp.local's own cache served no step
    for stage in ("produce", "scale", "report"):
        assert f"= [{('produce', 'scale', 'report').index(stage) + 1}/3] {stage}: cached" in text
    (src / "numhelper.py").write_text("def scale(x, factor):\n    return x * factor + 1\n")
    second, _ = compiled(tmp_path, spec, "b.yaml")  # the helper ships inside the pipeline
    assert run_local(second, root, {}, caching=True) == 0
    text = "".join(capfd.readouterr())
    assert "= [1/3] produce: cached" in text and "> [2/3] scale" in text
    assert total(runs(tmp_path)[-1]) == 15  # (2+1) + (4+1) + (6+1)
    (src / "data.txt").write_text("10 20\n")  # same path, new bytes
    assert run_local(second, root, {}, caching=True) == 0
    text = "".join(capfd.readouterr())
    assert "> [1/3] produce" in text
    assert total(runs(tmp_path)[-1]) == 62  # 21 + 41


def test_a_permanent_failure_fails_the_run_with_batons_message_once(tmp_path, capfd):
    spec = userstages.write(tmp_path / "src")
    path, root = compiled(tmp_path, spec)
    assert run_local(path, root, {"config": {"report": {"fail": True}}}) == 1
    text = "".join(capfd.readouterr())
    message = "report: the numbers do not add up (the test asked for this failure)"
    assert message in text  # Baton's own words, in the report step's log
    assert "Inner task failed: \x1b[96m'report'" in text
    assert text.count("> [3/3] report") == 1  # KFP retried twice; the stage ran once
    assert text.count("failed permanently in an earlier attempt of this run") == 2
    marker = next((tmp_path / "runs" / "numbers" / ".kfp" / "jobs").glob("*/report.json"))
    assert message in json.loads(marker.read_text())["message"]


def test_a_step_killed_mid_run_is_retried_and_the_run_completes(tmp_path, capfd):
    spec = userstages.write(tmp_path / "src")
    path, root = compiled(tmp_path, spec)
    flag = tmp_path / "go"
    killed: list[int] = []

    def kill_when_started() -> None:
        started = Path(f"{flag}.started")
        deadline = time.monotonic() + 300
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        pid = int(started.read_text())
        os.kill(pid, signal.SIGKILL)  # the `baton run` of the scale step, mid-stage
        killed.append(pid)
        started.unlink()
        flag.write_text("go")  # the retry finds it and goes on

    killer = threading.Thread(target=kill_when_started, daemon=True)
    killer.start()
    rc = run_local(path, root, {"config": {"scale": {"wait_for": str(flag)}}})
    killer.join(timeout=10)
    text = "".join(capfd.readouterr())
    assert killed, text[-3000:]
    assert rc == 0, text[-3000:]
    assert "step 'scale' exited 137" in text and "retryable" in text
    assert text.count("> [2/3] scale") == 2  # the killed attempt, then the retry
    assert total(runs(tmp_path)[-1]) == 12
