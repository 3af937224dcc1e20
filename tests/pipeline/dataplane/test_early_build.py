"""pipeline.dataplane.beam.early_build: with one train shard the driver builds the apply
module from the analyzer's partial between the passes; otherwise the DoFn builds it."""

from __future__ import annotations

import pickle

from baton.pipeline.dataplane.beam import early_build


def test_one_train_shard_the_partial_is_built_and_taken():
    box = early_build.prepare({}, train_shards=1)
    seen = []
    builder = early_build.EarlyBuild(box, lambda p: seen.append(pickle.loads(p)) or "module")
    builder.start()
    early_build.analyzed(box, pickle.dumps({"tft": {0: 1}, "label": None}))
    assert early_build.take(box) == "module"
    builder.finish()
    assert seen == [{"tft": {0: 1}, "label": None}]


def test_several_train_shards_the_dofn_builds_from_beams_merge():
    box = early_build.prepare({}, train_shards=2)
    builder = early_build.EarlyBuild(box, lambda p: "module")
    builder.start()
    early_build.analyzed(box, b"partial of shard 1")  # not the merged value: ignored
    assert early_build.take(box) is None  # at once: nothing to wait for
    builder.finish()
    assert box["partials"] == []


def test_a_failed_early_build_leaves_the_dofn_to_build_and_report():
    box = early_build.prepare({}, train_shards=1)

    def fails(partial):
        raise ValueError("user function broke")

    builder = early_build.EarlyBuild(box, fails)
    builder.start()
    early_build.analyzed(box, b"p")
    assert early_build.take(box) is None
    builder.finish()


def test_a_pipeline_that_ends_before_the_handover_stops_the_thread():
    box = early_build.prepare({}, train_shards=1)
    builder = early_build.EarlyBuild(box, lambda p: "module")
    builder.start()
    builder.finish()  # e.g. the analyzer pass failed
    assert not builder.is_alive() and early_build.take(box) is None


def test_dofns_elsewhere_or_unprepared_boxes_take_nothing():
    assert early_build.take(None) is None and early_build.take({}) is None
    early_build.analyzed(None, b"p")
    early_build.analyzed({}, b"p")


def test_the_stage_uses_the_early_module_and_writes_the_same_rows(tmp_path, monkeypatch):
    """In process with one train shard the apply DoFn takes the driver's module; the rows it
    writes equal those of a run whose DoFn built the module itself."""
    from baton.pipeline.testing import run_stage

    ex, _ = run_stage("ingest", {"source": "synthetic", "synthetic": {"rows": 400}}, {},
                      tmp_path / "in", run_id="r")
    took = []
    real = early_build.take

    def take(box):
        got = real(box)
        took.append(got is not None)
        return got

    monkeypatch.setattr(early_build, "take", take)
    early, _ = run_stage("transform", {}, {"examples": ex["examples"]}, tmp_path / "a", run_id="r")
    monkeypatch.setattr(early_build, "take", lambda box: None)  # the DoFn builds for itself
    late, _ = run_stage("transform", {}, {"examples": ex["examples"]}, tmp_path / "b", run_id="r")
    assert took == [True]
    files = sorted(p.relative_to(early["transformed"])
                   for p in early["transformed"].rglob("*.tfrecord"))
    assert files and files == sorted(p.relative_to(late["transformed"])
                                     for p in late["transformed"].rglob("*.tfrecord"))
    for f in files:
        assert (early["transformed"] / f).read_bytes() == (late["transformed"] / f).read_bytes()
