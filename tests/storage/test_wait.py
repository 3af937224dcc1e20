"""`python -m baton.storage.wait`: the init container that orders pods on a bucket ends when
the commits exist, and at once, with exit 1, when an upstream stage failed for good."""

from __future__ import annotations

import json

from baton.storage import wait


def test_it_returns_once_every_commit_exists(tmp_path):
    commit = tmp_path / "transform" / "lineage.json"
    commit.parent.mkdir()
    commit.write_text("{}")
    assert wait.main(["--every", "0.01", str(commit)]) == 0


def test_an_upstream_failure_record_ends_the_wait_with_exit_1(tmp_path, capsys):
    commit = tmp_path / "transform" / "lineage.json"
    failed = tmp_path / "transform.failed.json"
    failed.write_text(json.dumps({"status": "failed", "error": "bad column 'x'"}))
    assert wait.main(["--every", "0.01", "--failed", str(failed), str(commit)]) == 1
    err = capsys.readouterr().err
    assert "upstream stage failed for good" in err and "bad column 'x'" in err


def test_a_commit_wins_over_an_earlier_attempts_failure_record(tmp_path):
    commit = tmp_path / "transform" / "lineage.json"
    commit.parent.mkdir()
    commit.write_text("{}")
    failed = tmp_path / "transform.failed.json"
    failed.write_text("{}")
    assert wait.main(["--every", "0.01", "--failed", str(failed), str(commit)]) == 0
