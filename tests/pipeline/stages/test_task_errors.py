"""How `baton task` reports a permanent failure: a BatonError as its one line (no traceback), a
bug with its traceback, and either way the line in BATON_ERROR_FILE for the local launcher."""

from __future__ import annotations

import json
import signal

import pytest

from baton import logs
from baton.errors import StageError
from baton.pipeline.commands import task
from tests.strategies.jobs import train_job

MESSAGE = "model function 'm:build' raised ValueError: bad units (/x/m.py, line 3)"


@pytest.fixture
def keep_sigterm():
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)


def _run(exc: Exception, tmp_path, monkeypatch) -> int:
    """task.run as the chief of a 2-worker cluster whose training raises `exc`."""
    from baton.strategies import task as task_body
    from baton.strategies.cluster import TFConfig

    def failing(*_args, **_kwargs):
        raise exc

    monkeypatch.setattr(task_body, "run_task", failing)
    tf_config = TFConfig.from_json(json.dumps({
        "cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
        "task": {"type": "worker", "index": 0},
    }))
    job = train_job(feature_spec={}, strategy="multi_worker_mirrored")
    logs.configure()  # as the CLI edge does; the lines are log records on stderr
    return task.run(job, tf_config, tmp_path, tmp_path / "backup",
                    error_file=tmp_path / "errors" / "worker-0.txt")


def test_a_baton_error_is_one_line_and_left_for_the_launcher(
    tmp_path, monkeypatch, capsys, keep_sigterm
) -> None:
    assert _run(StageError(MESSAGE), tmp_path, monkeypatch) == task.PERMANENT
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    assert f"worker:0: error: {MESSAGE}\n" in out.err
    assert (tmp_path / "errors" / "worker-0.txt").read_text() == MESSAGE + "\n"
    assert not list((tmp_path / "errors").glob(".*"))  # the temporary file was renamed away


def test_a_bug_keeps_its_traceback_and_leaves_its_first_line(
    tmp_path, monkeypatch, capsys, keep_sigterm
) -> None:
    assert _run(KeyError("units"), tmp_path, monkeypatch) == task.PERMANENT
    out = capsys.readouterr()
    assert "Traceback (most recent call last)" in out.out
    assert "worker:0: permanent error (KeyError): 'units'" in out.err
    left = (tmp_path / "errors" / "worker-0.txt").read_text()
    assert left.startswith("permanent error (KeyError): 'units' (a bug:"), left


def test_an_error_before_training_is_left_too(tmp_path, monkeypatch, capsys) -> None:
    note = tmp_path / "worker-1.txt"
    monkeypatch.setenv("BATON_ERROR_FILE", str(note))
    monkeypatch.delenv("TF_CONFIG", raising=False)
    logs.configure()
    assert task.main(["--job", str(tmp_path / "job.json")]) == task.PERMANENT
    assert note.read_text() == "--job needs --out. Received: out=None\n"
    assert "error: --job needs --out" in capsys.readouterr().err
