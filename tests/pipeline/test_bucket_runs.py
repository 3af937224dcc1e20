"""Run directories on a real S3 server (SeaweedFS): commits, staging, the cache, and faults.

The stages are the pure-Python fakes of test_runner (no TensorFlow): what is tested is how the
runner puts a run on a bucket, not what the stages compute.
"""

from __future__ import annotations

import json
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
    key = entry["key"]
    assert key.startswith(f"{res.run_id}/upper/data-") and key.endswith("/upper/data.txt")
    assert objects.read_bytes(L.join(runs, "demo", key)) == b"A\nB\n!"
    assert upper["outputs"]["upper"]["url"] == L.join(runs, "demo", key.rsplit("/", 1)[0])
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
        assert objects.read_bytes(L.join(s3, "runs", "direct", key)) == \
            b"rows written by a worker"


def test_the_cache_on_a_bucket_reuses_objects_without_copying(s3, tmp_path):
    runs = L.join(s3, "runs")
    spec = make(tmp_path)
    first = run(spec, runs)
    second = run(spec, runs)
    assert second.ok and fake_stages.CALLS == []
    assert {s.status for s in second.stages} == {"cached"}
    # the second run holds commits only: they name the first run's objects
    assert all(not rel.split("/")[1].startswith("data-")
               for rel in objects.list_tree(second.url) if "/" in rel)
    again = commits(second.url)["upper"]
    assert again["manifest"] == commits(first.url)["upper"]["manifest"]
    assert again["cache"]["from"] == f"{first.run_id}/upper"
    # a changed config reruns that stage only; a deleted object makes the hit stale
    spec.write_text(spec.read_text().replace('suffix: "!"', 'suffix: "?"'))
    assert run(spec, runs).ok and fake_stages.CALLS == ["upper"]
    (key,) = [e["key"] for e in commits(first.url)["count"]["manifest"].values()]
    objects.delete(L.join(runs, "demo", key))
    assert run(spec, runs).ok and fake_stages.CALLS == ["count"]


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
    assert "slow" not in commits(url) and sorted(commits(url)) == ["count", "source", "upper"]
    assert run(spec, runs, run_id="r1", only=["source", "upper", "count"]).ok


def test_the_server_stopped_mid_upload_fails_the_run_naming_the_url(tmp_path, monkeypatch):
    """A server of its own (stopped and started again here); a reader watching the bucket
    during the upload never sees the stage committed; the rerun completes."""
    from baton.storage import trees
    from baton.storage.testing import LocalS3
    from baton.strategies.cluster import free_ports

    with LocalS3(free_ports(LocalS3.PORTS)).start() as server:
        for k, v in server.env().items():
            monkeypatch.setenv(k, v)
        monkeypatch.setenv("BATON_CACHE_DIR", str(tmp_path / "cache"))
        runs = L.join(server.bucket("faults"), "runs")
        spec = make(tmp_path)
        spec.write_text(spec.read_text().replace("{path: data.txt}", "{path: data.txt, repeat: 3}"))
        uploaded: list[str] = []
        real = trees.upload_file

        def upload_then_stop(local, loc):
            assert not objects.exists(L.join(L.parent(L.parent(L.parent(loc))), "lineage.json"))
            real(local, loc)
            uploaded.append(loc)
            if "/upper/" in loc:
                server.stop()  # mid-upload: the stage's files are on their way

        monkeypatch.setattr(trees, "upload_file", upload_then_stop)
        res = run(spec, runs, run_id="r1")
        # (count may start before the stop: upper's files upload in the background)
        assert not res.ok and fake_stages.CALLS[:2] == ["source", "upper"]
        failed = next(s for s in res.stages if s.status == "failed")
        assert failed.name == "upper" and f"{runs}/demo/r1/upper/" in failed.error
        assert re.search("cannot reach|the store failed", failed.error), failed.error
        assert "\n" not in failed.error
        monkeypatch.setattr(trees, "upload_file", real)
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
