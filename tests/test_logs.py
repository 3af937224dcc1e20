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


def _run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "data.txt").write_text("a\nb\n")
    (tmp_path / "spec.yaml").write_text(SPEC)
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
