"""The runner: DAG order, content-keyed cache, lineage records and atomic placement."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from baton.errors import SpecError
from baton.pipeline import lineage
from baton.pipeline.context import RunOptions
from baton.pipeline.plan import plan
from baton.pipeline.runner import run_pipeline
from baton.pipeline.spec import load_spec
from tests.pipeline import fake_stages

F = "tests.pipeline.fake_stages"
SPEC = f"""\
pipeline: demo
stages:
  - name: source
    type: {F}:source
    config: {{path: data.txt}}
  - name: upper
    type: {F}:upper
    inputs: {{lines: source.lines}}
    config: {{suffix: "{{suffix}}"}}
  - name: count
    type: {F}:count
    inputs: {{lines: source.lines}}
"""
QUIET = RunOptions(quiet=True)


def make(tmp_path: Path, suffix: str = "!") -> Path:
    (tmp_path / "data.txt").write_text("a\nb\n")
    p = tmp_path / "spec.yaml"
    p.write_text(SPEC.replace("{suffix}", suffix))
    return p


def run(spec_path: Path, tmp_path: Path, **kw):
    fake_stages.CALLS.clear()
    return run_pipeline(plan(load_spec(spec_path)), kw.pop("options", QUIET),
                        runs_dir=tmp_path / "runs", **kw)


def test_first_run_executes_all_and_records_lineage(tmp_path):
    res = run(make(tmp_path), tmp_path)
    assert res.ok and fake_stages.CALLS == ["source", "upper", "count"]
    assert (res.run_dir / "upper" / "upper" / "data.txt").read_text() == "A\nB\n!"
    rec = lineage.read(res.run_dir / "upper")
    assert rec["status"] == "succeeded" and rec["config"] == {"suffix": "!"}
    assert rec["inputs"]["lines"]["ref"] == "source.lines"
    assert rec["inputs"]["lines"]["hash"] == lineage.read(res.run_dir / "source")["outputs"]["lines"]["hash"]
    assert rec["outputs"]["upper"]["hash"].startswith("sha256:")
    for key in ("wall_s", "cpu_s", "peak_rss_mb", "energy_j"):
        assert key in rec["usage"]
    assert rec["metrics"] == {"chars": 4}
    assert json.loads((res.run_dir / "run.json").read_text())["status"] == "succeeded"


def test_rerun_with_nothing_changed_reuses_every_stage(tmp_path):
    spec = make(tmp_path)
    first = run(spec, tmp_path)
    second = run(spec, tmp_path)
    assert fake_stages.CALLS == []
    assert [s.status for s in second.stages] == ["cached"] * 3
    assert second.run_dir != first.run_dir
    assert (second.run_dir / "count" / "count" / "n.txt").read_text() == "2"
    assert lineage.read(second.run_dir / "count")["cache"]["from"] == f"{first.run_id}/count"


def test_data_change_reruns_source_and_downstream(tmp_path):
    spec = make(tmp_path)
    run(spec, tmp_path)
    (tmp_path / "data.txt").write_text("a\nb\nc\n")
    res = run(spec, tmp_path)
    assert fake_stages.CALLS == ["source", "upper", "count"]
    assert (res.run_dir / "count" / "count" / "n.txt").read_text() == "3"


def test_touch_without_content_change_is_a_hit(tmp_path):
    spec = make(tmp_path)
    run(spec, tmp_path)
    os.utime(tmp_path / "data.txt", (time.time() + 5, time.time() + 5))
    run(spec, tmp_path)
    assert fake_stages.CALLS == []


def test_config_change_reruns_only_that_stage(tmp_path):
    run(make(tmp_path, "!"), tmp_path)
    run(make(tmp_path, "?"), tmp_path)
    assert fake_stages.CALLS == ["upper"]


def test_identical_regenerated_upstream_keeps_downstream_cached(tmp_path):
    """Content keys: rerunning a stage that reproduces the same bytes does not rerun its consumers."""
    spec = make(tmp_path)
    run(spec, tmp_path)
    fake_stages.CALLS.clear()
    res = run_pipeline(plan(load_spec(spec)), QUIET, runs_dir=tmp_path / "runs", only=None)
    # Force source to rerun (no cache) by a separate run with --no-cache semantics on it alone.
    res = run(spec, tmp_path, options=RunOptions(quiet=True, no_cache=True), run_id=res.run_id,
              only=["source"])
    assert fake_stages.CALLS == ["source"]
    res = run(spec, tmp_path)
    assert fake_stages.CALLS == []


def test_a_stage_can_veto_reusing_a_result_whose_effect_is_gone(tmp_path):
    spec = make(tmp_path)
    spec.write_text(spec.read_text() + f"""\
  - name: publish
    type: {F}:publish
    inputs: {{lines: source.lines}}
""")
    run(spec, tmp_path)
    res = run(spec, tmp_path)
    assert fake_stages.CALLS == [] and res.ok  # the published file is there: reused
    (tmp_path / "published.txt").unlink()
    res = run(spec, tmp_path)
    assert fake_stages.CALLS == ["publish"]  # the others stay cached
    assert (tmp_path / "published.txt").read_text() == "a\nb\n"


def test_a_check_the_data_settles_runs_before_the_stages_between(tmp_path):
    spec = make(tmp_path)
    judged = spec.read_text() + f"""\
  - name: judge
    type: {F}:judge
    inputs: {{lines: source.lines, upper: upper.upper}}
    config: {{word: "{{word}}"}}
"""
    spec.write_text(judged.replace("{word}", "zebra"))
    with pytest.raises(SpecError) as info:
        run(spec, tmp_path, run_id="bad")
    assert info.value.exit_code == 2
    assert f"{spec}:16: stage 'judge' config.word: 'zebra' is not in the data" in str(info.value)
    assert "(found from the data before stage 'upper' ran)" in str(info.value)
    assert len(info.value.problems) == 1
    assert fake_stages.CALLS == ["source"]  # upper (the expensive one) never ran
    assert json.loads((tmp_path / "runs" / "demo" / "bad" / "run.json").read_text())["status"] == "failed"
    spec.write_text(judged.replace("{word}", "a"))
    res = run(spec, tmp_path)
    assert res.ok and fake_stages.CALLS == ["upper", "count", "judge"]  # source cached


def test_no_cache_forces_every_stage(tmp_path):
    spec = make(tmp_path)
    run(spec, tmp_path)
    run(spec, tmp_path, options=RunOptions(quiet=True, no_cache=True))
    assert fake_stages.CALLS == ["source", "upper", "count"]


def test_cache_survives_deleting_the_original_run(tmp_path):
    import shutil

    spec = make(tmp_path)
    first = run(spec, tmp_path)
    second = run(spec, tmp_path)
    shutil.rmtree(first.run_dir)
    run(spec, tmp_path)
    assert fake_stages.CALLS == []
    assert second.run_dir.exists()


def test_modified_cached_artifact_is_not_reused(tmp_path):
    spec = make(tmp_path)
    first = run(spec, tmp_path)
    (first.run_dir / "source" / "lines" / "data.txt").write_text("tampered\n")
    run(spec, tmp_path)
    assert fake_stages.CALLS[0] == "source"


def test_failed_stage_leaves_no_artifact_and_stops(tmp_path):
    p = make(tmp_path)
    p.write_text(p.read_text() + f"  - name: bad\n    type: {F}:failing\n    inputs: {{lines: source.lines}}\n")
    res = run(p, tmp_path)
    assert not res.ok and "3 rows could not be parsed" in res.error
    assert not (res.run_dir / "bad").exists()
    assert not list(res.run_dir.glob(".tmp-*"))
    assert (res.run_dir / "bad.failed" / "never" / "junk").read_text() == "x"
    assert lineage.read(res.run_dir / "bad.failed") is None
    assert json.loads((res.run_dir / "bad.failed.json").read_text())["status"] == "failed"


def test_a_stage_that_failed_before_writing_leaves_no_empty_directories(tmp_path):
    """Nothing half-written: only its empty output directory existed, so nothing is kept
    (the train stage failing on a model function left an empty `train.failed/model/`)."""
    p = make(tmp_path)
    p.write_text(p.read_text() + f"  - name: bad\n    type: {F}:failing_early\n"
                 "    inputs: {lines: source.lines}\n")
    res = run(p, tmp_path)
    assert not res.ok and "returned a string" in res.error
    assert "partial outputs kept" not in res.error
    assert not (res.run_dir / "bad.failed").exists() and not (res.run_dir / "bad").exists()
    assert not list(res.run_dir.glob(".tmp-*"))
    assert json.loads((res.run_dir / "bad.failed.json").read_text())["status"] == "failed"


def kill_in_slow_stage(tmp_path: Path, runs: str, *args: str, timeout: float = 60) -> Path:
    """`baton run` of make()'s spec plus a stage that writes half its output and waits:
    SIGKILLed once that stage has started. Returns the spec."""
    p = make(tmp_path)
    ready = tmp_path / "ready"
    p.write_text(p.read_text() + f"  - name: slow\n    type: {F}:slow_writer\n"
                 f"    inputs: {{lines: source.lines}}\n    config: {{ready_file: {ready}}}\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "baton.pipeline.cli", "run", str(p), "--runs-dir", runs, "-q",
         *args], cwd=Path(__file__).resolve().parents[2],
    )
    try:
        deadline = time.time() + timeout
        while not ready.exists() and time.time() < deadline:
            time.sleep(0.05)
        assert ready.exists(), "the slow stage never started"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    return p


def test_killed_mid_write_leaves_nothing_that_looks_complete(tmp_path):
    p = kill_in_slow_stage(tmp_path, str(tmp_path / "runs"))
    run_dir = next((tmp_path / "runs" / "demo").glob("2*"))
    assert not (run_dir / "slow").exists()  # the half-written artifact never got its final name
    partial = list(run_dir.glob(".tmp-slow-*"))
    assert partial and (partial[0] / "slow" / "part-0").exists()
    assert lineage.read(partial[0]) is None
    # the next run in the same run dir sweeps the leftovers and completes the earlier stages
    res = run(p, tmp_path, run_id=run_dir.name, only=["source", "upper", "count"])
    assert res.ok and not list(run_dir.glob(".tmp-*"))


def test_only_requires_upstream_outputs(tmp_path):
    from baton.errors import UsageError

    with pytest.raises(UsageError, match="has no finished outputs"):
        run(make(tmp_path), tmp_path, run_id="r1", only=["upper"])
    with pytest.raises(UsageError, match="unknown stage"):
        run(make(tmp_path), tmp_path, run_id="r1", only=["nope"])


def test_a_stages_run_settings_join_its_cache_key(tmp_path):
    """A stage whose outputs depend on the run's flags names them (`run_settings`): other
    flags run it again, the same ones reuse it; its record keeps them."""
    spec = make(tmp_path)
    spec.write_text(spec.read_text() + f"  - name: rehearsed\n    type: {F}:rehearsed\n"
                    "    inputs: {lines: source.lines}\n")
    first = run(spec, tmp_path)
    assert "rehearsed" in fake_stages.CALLS
    again = run(spec, tmp_path)
    assert fake_stages.CALLS == [] and again.ok  # same flags: every stage a cache hit
    other = run(spec, tmp_path, options=RunOptions(quiet=True, inject_failure="worker:1@step:3"))
    assert fake_stages.CALLS == ["rehearsed"]  # only the stage whose settings changed
    assert (other.run_dir / "rehearsed" / "seen" / "fault.txt").read_text() == "worker:1@step:3"
    assert lineage.read(other.run_dir / "rehearsed")["run_settings"] == {
        "fault": "worker:1@step:3"}
    assert first.run_dir != other.run_dir
