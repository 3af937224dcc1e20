"""Serving versions: keep-N pruning, rollback (command included), crash safety of a push."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from baton.errors import BatonError
from baton.pipeline.commands import rollback
from baton.pipeline.release import pushing
from baton.pipeline.release import versions as V


def _model(tmp_path: Path, name: str, size: int = 1000) -> Path:
    """A fake SavedModel directory whose content differs by name."""
    d = tmp_path / "src" / name
    (d / "variables").mkdir(parents=True)
    (d / "saved_model.pb").write_bytes(name.encode() * 10)
    (d / "variables" / "variables.index").write_bytes(b"i" + name.encode())
    (d / "variables" / "variables.data-00000-of-00001").write_bytes(os.urandom(size))
    return d


def test_versions_increase_and_only_the_last_n_are_kept(tmp_path):
    base = tmp_path / "serving"
    results = [pushing.push(_model(tmp_path, f"m{i}"), base, keep=2) for i in range(4)]
    assert [r["version"] for r in results] == [1, 2, 3, 4]
    assert V.versions(base) == [3, 4] and results[-1]["removed"] == [2]
    assert not [p.name for p in base.iterdir() if p.name.startswith(".") and p.is_dir()]
    # the exporter's proposed version wins when it is higher
    assert pushing.push(_model(tmp_path, "m9"), base, proposed_version=10)["version"] == 10


def test_same_content_is_not_pushed_twice(tmp_path):
    base, src = tmp_path / "serving", _model(tmp_path, "a")
    assert pushing.push(src, base)["pushed"]
    again = pushing.push(src, base)
    assert again == {**again, "pushed": False, "version": 1}
    assert V.versions(base) == [1]


def test_rollback_moves_newer_versions_aside_and_pushes_never_reuse_them(tmp_path, capsys):
    base = tmp_path / "serving"
    for i in range(3):
        pushing.push(_model(tmp_path, f"m{i}"), base)
    assert rollback.main([str(base)]) == 0
    assert "rolled back" in capsys.readouterr().out
    assert V.versions(base) == [1, 2] and V.rolled_back(base) == [3]
    assert rollback.main([str(base), "--to", "1"]) == 0
    assert V.versions(base) == [1] and V.rolled_back(base) == [2, 3]
    assert (base / ".rolledback-3" / "saved_model.pb").read_bytes() == b"m2" * 10
    # the next push gets a number above every number a server ever loaded
    assert pushing.push(_model(tmp_path, "m4"), base)["version"] == 4


def test_rollback_errors_name_the_problem(tmp_path, capsys):
    base = tmp_path / "serving"
    pushing.push(_model(tmp_path, "a"), base)
    with pytest.raises(BatonError, match="only version 1 is in"):
        rollback.main([str(base)])
    with pytest.raises(BatonError, match=r"version 7 is not in .*versions present: \[1\]"):
        rollback.main([str(base), "--to", "7"])
    with pytest.raises(BatonError, match="version 1 is already the newest"):
        rollback.main([str(base), "--to", "1"])
    assert rollback.main([str(base), "--to", "x"]) == 2
    assert "invalid int value" in capsys.readouterr().err
    assert V.versions(base) == [1]


KILL_SCRIPT = textwrap.dedent("""
    import shutil, sys, time
    from pathlib import Path
    from baton.pipeline.release import pushing

    def slow_copy(src, dst):
        shutil.copy2(src, dst)
        time.sleep(0.2)   # long enough for the parent to kill us mid-copy

    pushing.push(Path(sys.argv[1]), Path(sys.argv[2]), copy_file=slow_copy)
""")


def _complete(version_dir: Path, src: Path) -> bool:
    return pushing.digest(version_dir) == pushing.digest(src)


def test_a_push_killed_midway_leaves_only_complete_versions(tmp_path):
    base = tmp_path / "serving"
    first = _model(tmp_path, "first")
    pushing.push(first, base)
    big = _model(tmp_path, "second")
    for i in range(8):  # more files, so the copy is slow enough to be caught midway
        (big / "variables" / f"extra-{i}").write_bytes(os.urandom(100))
    script = tmp_path / "push_slowly.py"
    script.write_text(KILL_SCRIPT)
    env = {**os.environ}
    proc = subprocess.Popen([sys.executable, str(script), str(big), str(base)], env=env)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            tmps = [p for p in base.iterdir() if p.name.startswith(".tmp-push-")]
            if tmps and sum(1 for _ in tmps[0].rglob("*")) >= 3:
                break
            assert proc.poll() is None, "the push finished before it could be killed"
            time.sleep(0.02)
        else:
            pytest.fail("the push never started copying")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    # a server sees only integer directories: exactly the one complete version
    assert V.versions(base) == [1] and _complete(base / "1", first)
    assert [p.name for p in base.iterdir() if p.name.startswith(".tmp-")]  # the debris exists
    # the next push sweeps the debris and lands complete
    result = pushing.push(big, base)
    assert result["version"] == 2 and _complete(base / "2", big)
    assert not [p.name for p in base.iterdir() if p.name.startswith(".tmp-")]
