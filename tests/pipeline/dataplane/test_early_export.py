"""pipeline.dataplane.beam.early_export: the transform SavedModel is written as soon as every
shard is applied (while Beam winds the pipeline down), once, and only then."""

from __future__ import annotations

import threading

import pytest

from baton.pipeline.dataplane.beam import early_export


@pytest.fixture()
def saves(monkeypatch):
    from baton.graphs.tft import module as tft_module

    calls: list[tuple[object, object]] = []
    done = threading.Event()

    def save(built, directory):
        calls.append((built, directory))
        done.set()

    monkeypatch.setattr(tft_module, "save", save)
    return calls, done


def test_written_once_every_shard_is_applied(saves, tmp_path):
    calls, done = saves
    box = early_export.prepare({})
    ex = early_export.EarlyExport(box, 3, tmp_path)
    ex.start()
    box["built"] = "module"
    early_export.applied(box)
    early_export.applied(box)
    assert not done.wait(0.2) and calls == []  # a shard is still being applied
    early_export.applied(box)
    assert done.wait(10)
    assert ex.finish() is True and calls == [("module", tmp_path)]


def test_not_written_when_the_pipeline_ends_without_every_shard(saves, tmp_path):
    calls, _ = saves
    box = early_export.prepare({})
    ex = early_export.EarlyExport(box, 2, tmp_path)
    ex.start()
    box["built"] = "module"
    early_export.applied(box)  # the DoFns ran elsewhere, or the pipeline failed
    assert ex.finish() is False and calls == []  # the driver saves as before


def test_the_exports_error_is_raised_by_finish(monkeypatch, tmp_path):
    from baton.graphs.tft import module as tft_module

    def save(built, directory):
        raise RuntimeError("cannot save")

    monkeypatch.setattr(tft_module, "save", save)
    box = early_export.prepare({"built": "module"})
    ex = early_export.EarlyExport(box, 1, tmp_path)
    ex.start()
    early_export.applied(box)
    with pytest.raises(RuntimeError, match="cannot save"):
        ex.finish()


def test_a_dofn_in_another_process_counts_nothing():
    early_export.applied(None)  # borrow() gave nothing: no box here
    early_export.applied({})  # a box without the count (not prepared): left alone


def test_the_stage_writes_its_saved_model_early_in_process(tmp_path, monkeypatch):
    """The in-process transform hands the export to the early thread: the stage's final save
    finds it done (and the SavedModel loads and serves, checked by test_transform)."""
    from baton.pipeline.dataplane.transform import analysis
    from baton.pipeline.testing import run_stage

    seen = []
    real = analysis.save_transform_graph

    def save_transform_graph(*a, **k):
        seen.append(k.get("model_saved"))
        return real(*a, **k)

    monkeypatch.setattr(analysis, "save_transform_graph", save_transform_graph)
    ex, _ = run_stage("ingest", {"source": "synthetic", "synthetic": {"rows": 300}}, {},
                      tmp_path, run_id="r")
    out, _ = run_stage("transform", {"preprocessing_fn": None}, {"examples": ex["examples"]},
                       tmp_path, run_id="r")
    assert seen == [True]
    assert (out["transform_graph"] / "saved_model.pb").exists()
