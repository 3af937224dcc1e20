"""Output goes through logging under `baton`; the CLI installs the one handler."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from baton import logs

ROOT = Path(__file__).resolve().parents[1]

SPEC = """\
pipeline: demo
stages:
  - name: source
    type: tests.pipeline.fake_stages:source
    config: {path: data.txt}
  - name: count
    type: tests.pipeline.fake_stages:count
    inputs: {lines: source.lines}
"""


def _run(tmp_path: Path, spec: str = SPEC, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "data.txt").write_text("a\nb\n")
    (tmp_path / "spec.yaml").write_text(spec)
    full = {**os.environ, "PYTHONPATH": str(ROOT), **env}  # tests.pipeline.fake_stages
    return subprocess.run([sys.executable, "-m", "baton", "run", "spec.yaml", "--runs-dir",
                           "runs"], cwd=tmp_path, capture_output=True, text=True, env=full,
                          timeout=120)


def test_text_lines_are_the_cli_lines(tmp_path):
    out = _run(tmp_path)
    assert out.returncode == 0, out.stderr
    assert "baton: pipeline 'demo'" in out.stderr
    assert "source done in" in out.stderr and "count done in" in out.stderr
    assert not any(line.startswith("{") for line in out.stderr.splitlines())


def test_json_lines_carry_logger_level_and_stage_for_log_routers(tmp_path):
    out = _run(tmp_path, BATON_LOG_FORMAT="json")
    assert out.returncode == 0, out.stderr
    records = [json.loads(line) for line in out.stderr.splitlines() if line.startswith("{")]
    assert records, out.stderr
    assert {"time", "level", "logger", "message"} <= set(records[0])
    assert any(r["logger"] == "baton.pipeline.runner" and "done in" in r["message"]
               for r in records)


# A user stage beside the spec that writes what a real stage run does besides Baton's own lines:
# a record on the root logger (Beam's `logging.warning("apitools not found")`), a third-party
# logger's record, a Python warning, and a progress bar.
NOISY = """\
import logging, warnings
from baton import stage

@stage(inputs={"lines": True}, outputs=("done",))
def noisy(ctx, config):
    logging.warning("apitools not found")
    logging.getLogger("apache_beam.io").warning("third-party %s", "record")
    warnings.warn("a deprecated call", DeprecationWarning, stacklevel=1)
    bar = ctx.progress(total=3, unit="steps")
    for _ in range(3):
        bar.update()
    bar.close()
    ctx.output("done")
"""


def test_json_mode_every_line_is_a_record_but_the_run_dir(tmp_path):
    """BATON_LOG_FORMAT=json: every stderr line is a JSON record (Baton's, third-party records
    on the root logger, warnings, progress, the summary); stdout carries only the run directory,
    plain, as scripts read it."""
    (tmp_path / "noisy.py").write_text(NOISY)
    spec = SPEC + "  - name: noisy\n    type: noisy:noisy\n    inputs: {lines: source.lines}\n"
    out = _run(tmp_path, spec=spec, BATON_LOG_FORMAT="json", PYTHONWARNINGS="always")
    assert out.returncode == 0, out.stderr
    lines = out.stderr.splitlines()
    records = [json.loads(line) for line in lines]  # each one parses
    assert all(isinstance(r, dict) and {"time", "level", "logger", "message"} <= set(r)
               for r in records), lines
    [run_dir] = out.stdout.splitlines()  # one plain line: the run directory
    assert Path(run_dir).parent == (tmp_path / "runs" / "demo").resolve() and Path(run_dir).is_dir()
    by_message = {r["message"]: r for r in records}
    assert by_message["apitools not found"]["logger"] == "root"
    assert by_message["third-party record"]["logger"] == "apache_beam.io"
    assert any(r["logger"] == "py.warnings" and "a deprecated call" in r["message"]
               for r in records)
    progress = [r for r in records if r.get("progress") == "noisy"]
    assert progress and progress[-1]["done"] == 3 and progress[-1]["total"] == 3, records
    assert progress[-1]["stage"] == "noisy" and progress[-1]["final"] is True
    summary = by_message["summary"]
    assert summary["logger"] == "baton.pipeline.runner"
    assert [(s["name"], s["status"]) for s in summary["stages"]] == [
        ("source", "succeeded"), ("count", "succeeded"), ("noisy", "succeeded")]
    assert summary["stages"][1]["metrics"] == {"lines": 2} and "wall_s" in summary["totals"]


def test_text_mode_keeps_the_table_and_leaves_the_root_logger_alone(tmp_path):
    (tmp_path / "noisy.py").write_text(NOISY)
    spec = SPEC + "  - name: noisy\n    type: noisy:noisy\n    inputs: {lines: source.lines}\n"
    out = _run(tmp_path, spec=spec, PYTHONWARNINGS="always")
    assert out.returncode == 0, out.stderr
    assert "WARNING:root:apitools not found" in out.stderr  # Python's own basicConfig line
    assert "  noisy [########################] 3/3 steps" in out.stderr
    assert "stage   status     wall s" in out.stderr and "count   succeeded" in out.stderr
    assert not any(line.startswith("{") for line in out.stderr.splitlines())


def test_json_records_carry_extra_fields_and_relay_child_records():
    buf = io.StringIO()
    logs.configure("json", "INFO", stream=buf)
    try:
        logs.get("x").info("summary", extra={"stages": [{"name": "a"}]})
        logs.get("x").info("ignored", extra={"task": "worker:1", logs.RELAYED: {"message": "m"}})
        logging.getLogger("other").warning("from %s", "root")
        assert logging.getLogger().handlers[-1] is logging.getLogger("baton").handlers[-1]
    finally:
        logs.configure("text", "INFO")
    first, second, third = (json.loads(line) for line in buf.getvalue().splitlines())
    assert first["stages"] == [{"name": "a"}] and first["message"] == "summary"
    assert second == {"message": "m", "task": "worker:1"}
    assert third["logger"] == "other" and third["message"] == "from root"
    assert not [h for h in logging.getLogger().handlers if isinstance(h, logs._Handler)]


def test_a_bad_log_setting_is_a_usage_error_naming_it(tmp_path):
    out = _run(tmp_path, BATON_LOG_FORMAT="xml")
    assert out.returncode == 2
    assert "BATON_LOG_FORMAT must be one of text, json. Received: 'xml'" in out.stderr
    out = _run(tmp_path, BATON_LOG_LEVEL="loud")
    assert out.returncode == 2 and "BATON_LOG_LEVEL" in out.stderr and "'LOUD'" in out.stderr


def test_configure_replaces_its_handler_and_does_not_propagate():
    buf = io.StringIO()
    logs.configure("text", "INFO", stream=buf)
    logs.configure("text", "INFO", stream=buf)  # twice: still one line per record
    logs.get("stage").info("epoch 1", extra={"stage": "train"})
    logs.get("pipeline.runner").debug("hidden")
    assert buf.getvalue() == "  [train] epoch 1\n"
    assert logging.getLogger("baton").propagate is False
    with pytest.raises(ValueError, match="Received: 'yaml'"):
        logs.configure("yaml")
    logs.configure("text", "INFO")  # back to sys.stderr for the rest of the suite
