"""The `baton` command line: fast help, exit codes 0/1/2, messages without tracebacks."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
F = "tests.pipeline.fake_stages"


def baton(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "baton.pipeline.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin"})


def test_help_is_fast_and_imports_no_tensorflow():
    code = ("import sys, time; t=time.perf_counter(); from baton.pipeline.cli import main; "
            "import io, contextlib\n"
            "with contextlib.redirect_stdout(io.StringIO()): main(['--help'])\n"
            "print(time.perf_counter()-t, 'tensorflow' in sys.modules, 'apache_beam' in sys.modules, "
            "'yaml' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[1:] == ["False", "False", "False"]
    assert float(out[0]) < 0.2
    t = time.perf_counter()
    res = baton("--help")
    assert res.returncode == 0 and "run" in res.stdout and "serve" in res.stdout
    assert time.perf_counter() - t < 0.5 + 1.0  # interpreter start included; see the in-process bound above


def test_unknown_command_is_usage_error():
    res = baton("rnu")
    assert res.returncode == 2 and "did you mean 'run'" in res.stderr


def test_bad_spec_exits_2_without_traceback(tmp_path):
    (tmp_path / "s.yaml").write_text("pipeline: demo\nstages:\n  - name: a\n    type: trian\n")
    res = baton("run", str(tmp_path / "s.yaml"), "--runs-dir", str(tmp_path))
    assert res.returncode == 2
    assert "s.yaml:4" in res.stderr and "did you mean 'train'" in res.stderr
    assert "Traceback" not in res.stderr


def test_bad_flag_value_exits_2(tmp_path):
    res = baton("run", "--workers", "0")
    assert res.returncode == 2 and "--workers must be >= 1. Received: 0" in res.stderr
    res = baton("run", "--strategy", "ring")
    assert res.returncode == 2 and "invalid choice: 'ring'" in res.stderr


def test_failed_stage_exits_1_and_check_prints_plan(tmp_path):
    (tmp_path / "data.txt").write_text("x\n")
    spec = tmp_path / "s.yaml"
    spec.write_text(f"pipeline: demo\nstages:\n  - name: source\n    type: {F}:source\n"
                    f"  - name: bad\n    type: {F}:failing\n    inputs: {{lines: source.lines}}\n")
    res = baton("run", str(spec), "--check")
    assert res.returncode == 0 and "source -> bad" in res.stdout
    res = baton("run", str(spec), "--runs-dir", str(tmp_path / "runs"))
    assert res.returncode == 1 and "3 rows could not be parsed" in res.stderr
    assert "Traceback" not in res.stderr


def test_inspect_shows_stages_and_lineage(tmp_path):
    (tmp_path / "data.txt").write_text("x\ny\n")
    spec = tmp_path / "s.yaml"
    spec.write_text(f"pipeline: demo\nstages:\n  - name: source\n    type: {F}:source\n"
                    f"  - name: count\n    type: {F}:count\n    inputs: {{lines: source.lines}}\n")
    assert baton("run", str(spec), "--runs-dir", str(tmp_path / "runs")).returncode == 0
    res = baton("inspect", str(tmp_path / "runs" / "demo"))
    assert res.returncode == 0, res.stderr
    assert "count" in res.stdout and "lines=2" in res.stdout and "in:  lines<-source.lines" in res.stdout
    res = baton("inspect", str(tmp_path / "nowhere"))
    assert res.returncode == 2 and "not a run directory" in res.stderr
