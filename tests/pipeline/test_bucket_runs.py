"""Run directories on a real S3 server (SeaweedFS): commits, staging, the cache, and faults.

The stages are the pure-Python fakes of test_runner (no TensorFlow): what is tested is how the
runner puts a run on a bucket, not what the stages compute.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from baton.errors import UsageError
from baton.pipeline.bucket_run import BucketRun
from baton.pipeline.plan import plan
from baton.pipeline.runner import run_pipeline
from baton.pipeline.spec import load_spec
from baton.storage import location as L
from baton.storage import objects
from tests.pipeline import fake_stages
from tests.pipeline.test_runner import QUIET, F, kill_in_slow_stage, make

ROOT = Path(__file__).resolve().parents[2]


def run(spec_path: Path, runs: str, **kw):
    fake_stages.CALLS.clear()
    return run_pipeline(plan(load_spec(spec_path)), kw.pop("options", QUIET), runs_dir=runs, **kw)


def commits(run_url: str) -> dict[str, dict]:
    """Stage name -> its commit, as a reader of the bucket sees them."""
    out = {}
    for name, is_dir in objects.list_children(run_url).items():
        rec = objects.read_json(L.join(run_url, name, "lineage.json")) if is_dir else None
        if rec is not None:
            out[name] = rec
    return out


def test_a_run_on_a_bucket_commits_each_stage_by_manifest(s3, tmp_path):
    runs = L.join(s3, "runs")
    res = run(make(tmp_path), runs)
    assert res.ok and res.url == L.join(runs, "demo", res.run_id)
    assert fake_stages.CALLS == ["source", "upper", "count"]
    found = commits(res.url)
    assert sorted(found) == ["count", "source", "upper"]
    upper = found["upper"]
    (entry,) = upper["manifest"].values()
    key = entry["key"]  # stored by content, outside any run's prefix
    assert key == f".objects/{entry['sha256'][:2]}/{entry['sha256']}"
    assert objects.read_bytes(L.join(runs, "demo", key)) == b"A\nB\n!"
    # the content hash is the local one (manifest.digest == store.hash_path)
    assert upper["outputs"]["upper"]["hash"] == found["upper"]["outputs"]["upper"]["hash"]
    run_json = objects.read_json(L.join(res.url, "run.json"))
    assert run_json["status"] == "succeeded" and len(run_json["stages"]) == 3
    assert objects.exists(L.join(res.url, "spec.yaml"))


@pytest.mark.parametrize("on_bucket", [True, False])
def test_shards_written_straight_to_the_bucket_join_the_commit(s3, tmp_path, on_bucket):
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"pipeline: direct\nstages:\n  - {{name: w, type: {F}:direct_writer}}\n")
    res = run(spec, L.join(s3, "runs") if on_bucket else str(tmp_path / "runs"))
    assert res.ok
    local = res.run_dir / "w" / "shards"
    assert (local / "train" / "part-00000.bin").read_bytes() == b"rows written by a worker"
    assert (local / "meta.json").is_file()
    if on_bucket:
        manifest = commits(res.url)["w"]["manifest"]
        assert sorted(manifest) == ["shards/meta.json", "shards/train/part-00000.bin"]
        key = manifest["shards/train/part-00000.bin"]["key"]
        assert key.startswith(".objects/")
        assert objects.read_bytes(L.join(s3, "runs", "direct", key)) == \
            b"rows written by a worker"
        # the worker's copy went to its content key: the attempt's prefix holds nothing
        assert [r for r in objects.list_tree(res.url) if r.startswith("w/")] == \
            ["w/lineage.json"]


def test_the_cache_on_a_bucket_reuses_objects_without_copying(s3, tmp_path):
    runs = L.join(s3, "runs")
    spec = make(tmp_path)
    first = run(spec, runs)
    second = run(spec, runs)
    assert second.ok and fake_stages.CALLS == []
    assert {s.status for s in second.stages} == {"cached"}
    # the second run holds commits only: they name the same objects as the first's
    assert all(rel.endswith("lineage.json") for rel in objects.list_tree(second.url)
               if "/" in rel)
    again = commits(second.url)["upper"]
    assert again["manifest"] == commits(first.url)["upper"]["manifest"]
    assert again["cache"]["from"] == f"{first.run_id}/upper"
    # a changed config reruns that stage only; a deleted object makes the hit stale
    spec.write_text(spec.read_text().replace('suffix: "!"', 'suffix: "?"'))
    assert run(spec, runs).ok and fake_stages.CALLS == ["upper"]
    (key,) = [e["key"] for e in commits(first.url)["count"]["manifest"].values()]
    objects.delete(L.join(runs, "demo", key))
    assert run(spec, runs).ok and fake_stages.CALLS == ["count"]


def test_deleting_the_run_a_cache_hit_reused_leaves_the_later_run_whole(s3, tmp_path,
                                                                       monkeypatch, capsys):
    """The first run's prefix deleted as a user would (every object under it): the second,
    all cache hits naming the first's outputs, still stages on a fresh node, inspects and
    reuses; `baton gc` then deletes only what nothing names any more."""
    from baton.pipeline import bucket_objects
    from baton.pipeline.cli import main as baton

    runs = L.join(s3, "runs")
    spec = make(tmp_path)
    first = run(spec, runs, run_id="r1")
    second = run(spec, runs, run_id="r2")
    assert first.ok and {s.status for s in second.stages} == {"cached"}
    objects.delete_tree(first.url)
    assert objects.list_tree(first.url) == {}
    monkeypatch.setenv("BATON_CACHE_DIR", str(tmp_path / "fresh-node"))
    again = BucketRun(L.join(runs, "demo"), "r2")
    assert again.hydrate("upper") is not None
    assert (again.run_dir / "upper" / "upper" / "data.txt").read_text() == "A\nB\n!"
    assert baton(["inspect", second.url]) == 0
    assert "upper" in capsys.readouterr().out
    third = run(spec, runs, run_id="r3")  # the cache still holds: every object is there
    assert third.ok and fake_stages.CALLS == []
    # gc: nothing named is deleted; an object no commit names goes once past the grace
    stray = L.join(runs, "demo", bucket_objects.key_of("0" * 64))
    objects.write_bytes(stray, b"left by a killed writer")
    assert baton(["gc", runs]) == 0
    assert objects.exists(stray) and "0 objects" in capsys.readouterr().out
    assert baton(["gc", runs, "--older-than", "0"]) == 0
    assert not objects.exists(stray) and "1 object" in capsys.readouterr().out
    assert run(spec, runs, only=["upper", "count"], run_id="r2").ok  # stages, all cached
    assert fake_stages.CALLS == []
    assert baton(["gc", str(tmp_path)]) == 2  # a local runs directory shares by hard links
    assert "RUNS_URL must be a bucket URL" in capsys.readouterr().err


def test_another_node_stages_inputs_from_the_bucket(s3, tmp_path, monkeypatch):
    """`--only` on a node with an empty cache (a pod): upstream outputs come by manifest."""
    runs = L.join(s3, "runs")
    spec = make(tmp_path)
    first = run(spec, runs, only=["source"], run_id="r1")
    assert first.ok
    monkeypatch.setenv("BATON_CACHE_DIR", str(tmp_path / "other-node"))
    second = run(spec, runs, only=["upper", "count"], run_id="r1", options=QUIET)
    assert second.ok and fake_stages.CALLS == ["upper", "count"]
    staged = BucketRun(L.join(runs, "demo"), "r1").run_dir / "source" / "lines" / "data.txt"
    assert staged.read_text() == "a\nb\n" and str(tmp_path / "other-node") in str(staged)
    with pytest.raises(UsageError, match="has no finished outputs"):
        run(spec, runs, only=["count"], run_id="r2")


def test_a_stage_rerun_in_its_run_hides_the_old_commit_first(s3, tmp_path):
    runs = L.join(s3, "runs")
    spec = make(tmp_path)
    res = run(spec, runs, run_id="r1")
    spec.write_text(spec.read_text() + f"  - name: bad\n    type: {F}:failing\n"
                    "    inputs: {lines: source.lines}\n")
    res = run(spec, runs, run_id="r1", only=["bad"])
    assert not res.ok and "3 rows could not be parsed" in res.error
    assert "bad" not in commits(res.url)
    assert objects.read_json(L.join(res.url, "bad.failed.json"))["status"] == "failed"
    assert not [r for r in objects.list_tree(res.url) if r.startswith("bad/")]


def test_a_writer_killed_mid_stage_leaves_no_visible_output(s3, tmp_path):
    runs = L.join(s3, "runs")
    spec = kill_in_slow_stage(tmp_path, runs, "--run-id", "r1", timeout=120)
    url = L.join(runs, "demo", "r1")
    # (the earlier stages' commits upload in the background: the kill may precede some)
    assert "slow" not in commits(url) and set(commits(url)) <= {"count", "source", "upper"}
    assert run(spec, runs, run_id="r1", only=["source", "upper", "count"]).ok
    assert sorted(commits(url)) == ["count", "source", "upper"]


def test_the_server_stopped_mid_upload_fails_the_run_naming_the_url(s3, s3_outage, tmp_path,
                                                                    monkeypatch):
    """The server stopped mid-upload (and started again here): no commit names the stage's
    half-uploaded files, the run fails naming the URL in one line, the rerun completes."""
    server = s3_outage
    runs = L.join(s3, "runs")
    spec = make(tmp_path)
    spec.write_text(spec.read_text().replace("{path: data.txt}", "{path: data.txt, repeat: 3}"))
    real = objects.upload_file
    upper_commit = L.join(runs, "demo", "r1", "upper", "lineage.json")

    def upload_then_stop(local, loc):
        real(local, loc)
        if f"{os.sep}upper{os.sep}" in str(local):  # one of upper's files is up
            assert not objects.exists(upper_commit)  # the commit comes after them all
            server.stop()  # mid-upload: the stage's other files are on their way

    monkeypatch.setattr(objects, "upload_file", upload_then_stop)
    res = run(spec, runs, run_id="r1")
    # (count may start before the stop: upper's files upload in the background)
    assert not res.ok and fake_stages.CALLS[:2] == ["source", "upper"]
    failed = next(s for s in res.stages if s.status == "failed")
    # the URL it failed on: one of upper's files (stored by content) or its commit
    assert failed.name == "upper" and re.search(
        rf"{re.escape(runs)}/demo/(\.objects/|r1/upper/lineage\.json)", failed.error)
    assert re.search("cannot reach|the store failed", failed.error), failed.error
    assert "\n" not in failed.error
    monkeypatch.setattr(objects, "upload_file", real)
    server.start()
    assert "upper" not in commits(L.join(runs, "demo", "r1"))
    again = run(spec, runs, run_id="r1")
    assert again.ok and fake_stages.CALLS == ["upper", "count"]  # source: cached
    assert [s.status for s in again.stages] == ["cached", "succeeded", "succeeded"]
    assert json.loads(objects.read_bytes(L.join(again.url, "run.json")))["status"] == \
        "succeeded"


def test_missing_bucket_and_wrong_credentials_fail_baton_run_in_one_line(s3, tmp_path, capsys,
                                                                        monkeypatch):
    from baton.pipeline.cli import main as baton

    spec = str(make(tmp_path))
    assert baton(["run", spec, "--runs-dir", "s3://no-such-bucket-run/runs", "-q"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [line for line in err if "--runs-dir: cannot use s3://no-such-bucket-run/runs/"
                   "demo/" in line and line.endswith("bucket 'no-such-bucket-run' does not "
                                                     "exist")] and len(err) == 1
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    assert baton(["run", spec, "--runs-dir", f"{s3}/runs", "-q"]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"--runs-dir: cannot use {s3}/runs/demo/" in line and "access denied" in line
    assert baton(["run", spec, "--runs-dir", "hdfs://x/runs"]) == 2
    assert "hdfs:// is not supported" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["inspect", "rollback", "gc"])
def test_the_bucket_commands_fail_in_one_line_naming_the_url(s3, capsys, monkeypatch, command):
    """A missing bucket, then wrong credentials: one line on stderr, naming the URL, exit 1."""
    from baton.pipeline.cli import main as baton

    assert baton([command, "s3://no-such-bucket-cmd/runs/demo"]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "s3://no-such-bucket-cmd/runs/demo" in line, line
    assert line.endswith("bucket 'no-such-bucket-cmd' does not exist"), line
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    assert baton([command, f"{s3}/runs/demo"]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"{s3}/runs/demo" in line and "access denied (check the credentials" in line, line
