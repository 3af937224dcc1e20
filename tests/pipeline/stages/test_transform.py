"""transform stage: the built-in column kinds analyzed and applied on Beam (as a preprocessing_fn,
graphs.column_kinds), the exported graph, and the transformed artifact."""

from __future__ import annotations

import json

import numpy as np
import pytest

from baton.errors import StageError
from baton.graphs.feature_spec import FeatureSpec
from baton.graphs.input_pipeline import make_dataset
from baton.pipeline.testing import run_stage
from tests.pipeline.dataplane.helpers import penguins


@pytest.fixture(scope="module")
def art(tmp_path_factory):
    return penguins(tmp_path_factory.mktemp("penguins"))


def test_ingest_then_transform_then_make_dataset(art):
    spec = FeatureSpec.load(art["transform_graph"])
    assert spec.label.vocabulary == ("Adelie", "Chinstrap", "Gentoo")
    assert {f.name for f in spec.categorical} == {"island", "sex"}
    assert {f.name for f in spec.numeric} == {
        "bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g", "year"}
    feats, label = next(iter(make_dataset(art["transformed"], "train", spec, 32)))
    assert set(feats) == {f.name for f in spec.features}
    assert label.shape == (32,) and label.dtype.name == "int64"
    assert feats["island"].dtype.name == "int64" and feats["body_mass_g"].dtype.name == "float32"
    assert set(np.unique(label.numpy())) <= {0, 1, 2}


def test_analysis_matches_numpy_on_the_train_rows(art):
    from baton.pipeline.dataplane.records.reader import numeric_values, read_batches
    from baton.pipeline.dataplane.records.schema_file import ExamplesSchema, shard_files

    analysis = json.loads((art["transform_graph"] / "analysis.json").read_text())
    spec = FeatureSpec.load(art["transform_graph"])
    rows = sum(1 for _ in make_dataset(art["transformed"], "train", spec, 1))
    meta = json.loads((art["transformed"] / "metadata.json").read_text())
    assert rows == meta["splits"]["train"]
    op = next(o for o in analysis["features"] if o["name"] == "body_mass_g")
    # z-scored train column: mean 0 and std 1 over the rows that were present (missing -> 0)
    col = np.concatenate([f["body_mass_g"].numpy()
                          for f, _ in make_dataset(art["transformed"], "train", spec, 64)])
    present = col[col != 0]
    assert abs(present.mean()) < 0.02 and abs(present.std() - 1) < 0.02
    schema = ExamplesSchema.load(art["examples"])
    raw = np.concatenate([numeric_values(b.column("body_mass_g"))
                          for f in shard_files(art["examples"], "train")
                          for b in read_batches(f, schema.columns)])
    raw = raw[~np.isnan(raw)]
    assert op["mean"] == pytest.approx(raw.mean(), rel=1e-6)
    assert op["var"] == pytest.approx(raw.var(), rel=1e-5)  # biased, as tf.Transform's
    sex = next(o for o in analysis["features"] if o["name"] == "sex")
    assert "" not in sex["vocabulary"]  # penguins has NA sexes; missing gets its own id, V
    sizes = {f.name: f.vocab_size for f in spec.categorical}
    assert sizes["sex"] == len(sex["vocabulary"]) + 1 + 1  # + missing + one OOV bucket
    island = next(o for o in analysis["features"] if o["name"] == "island")
    assert sorted(island["vocabulary"]) == ["Biscoe", "Dream", "Torgersen"]
    assert analysis["phases"] == 1 and analysis["analyzers"] == 7


def test_unknown_override_column_is_a_stage_error(art, tmp_path):
    with pytest.raises(StageError, match="island2.*did you mean 'island'"):
        run_stage("transform", {"columns": {"island2": {"kind": "hash"}}},
                  {"examples": art["examples"]}, tmp_path)


ALL_KINDS = {"columns": {
    "island": {"kind": "hash", "buckets": 5},
    "sex": {"kind": "vocabulary", "top_k": 1, "oov_buckets": 2},
    "bill_length_mm": {"kind": "bucketize", "buckets": 4},
    "bill_depth_mm": {"kind": "minmax"},
    "year": {"kind": "identity"},
    "body_mass_g": {"kind": "drop"},
}}


def test_beam_output_equals_the_exported_graph_on_the_same_rows(art, tmp_path):
    """The parity proof: Beam-transformed rows == SavedModel transform_features(raw rows)."""
    import tensorflow as tf

    from baton.pipeline.dataplane.records.reader import read_batches
    from baton.pipeline.dataplane.records.schema_file import ExamplesSchema, shard_files

    out, _ = run_stage("transform", ALL_KINDS, {"examples": art["examples"]}, tmp_path)
    spec = FeatureSpec.load(out["transform_graph"])
    assert "body_mass_g" not in {f.name for f in spec.features}
    assert spec.feature("bill_length_mm").vocab_size == 4 + 1  # 4 buckets + missing
    assert spec.feature("island").vocab_size == 5 + 1  # 5 hash buckets + missing
    assert spec.feature("sex").vocab_size == 1 + 1 + 2  # top_k 1 + missing + 2 OOV buckets
    graph = tf.saved_model.load(str(out["transform_graph"]))
    schema = ExamplesSchema.load(art["examples"])
    for split in ("train", "eval"):
        beam_rows = list(make_dataset(out["transformed"], split, spec, 10_000))
        assert len(beam_rows) == 1
        beam_feats, beam_label = beam_rows[0]
        batches = [b for f in shard_files(art["examples"], split)
                   for b in read_batches(f, schema.columns)]
        assert len(batches) == 1
        batch = batches[0]
        raw = {r.name: tf.constant(batch.column(r.name).to_pylist()
                                   if r.dtype == "string" else batch.column(r.name).to_numpy())
               for r in spec.raw_features}
        graph_feats = graph.transform_features(raw)
        for name, value in beam_feats.items():
            np.testing.assert_array_equal(value.numpy(), graph_feats[name].numpy(), err_msg=name)
        labels = graph.transform_label(tf.constant(batch.column("species").to_pylist()))
        np.testing.assert_array_equal(beam_label.numpy(), labels.numpy())


def test_examples_without_the_columnar_copy_give_the_same_result(art, tmp_path):
    """Examples written by another tool (TFRecords only): parsed by TF, same output."""
    import shutil

    examples = tmp_path / "examples"
    shutil.copytree(art["examples"], examples, ignore=shutil.ignore_patterns("columnar"))
    out, _ = run_stage("transform", {}, {"examples": examples}, tmp_path)
    assert json.loads((out["transform_graph"] / "analysis.json").read_text()) == json.loads(
        (art["transform_graph"] / "analysis.json").read_text())
    for split in ("train", "eval"):
        assert [p.read_bytes() for p in sorted((out["transformed"] / split).iterdir())] == [
            p.read_bytes() for p in sorted((art["transformed"] / split).iterdir())]
    assert not (tmp_path / "runs" / "test" / "test-run" / "transform" / ".spill").exists()


@pytest.mark.slow
def test_two_worker_processes_give_the_same_result(art, tmp_path):
    """beam_pipeline_args reach the runner: FnApiRunner with 2 SDK worker processes."""
    args = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]
    out, metrics = run_stage("transform", {"beam_pipeline_args": args},
                             {"examples": art["examples"]}, tmp_path)
    assert metrics["rows"] == 344
    assert (metrics["beam_workers"], metrics["beam_running_mode"],  # explicit args win
            metrics["beam_workers_reason"]) == (2, "multi_processing", "beam_pipeline_args")
    for split in ("train", "eval"):
        assert [p.read_bytes() for p in sorted((out["transformed"] / split).iterdir())] == [
            p.read_bytes() for p in sorted((art["transformed"] / split).iterdir())]


def test_data_error_inside_a_dofn_is_a_stage_error(art, tmp_path):
    """A corrupt shard fails the stage with a message, not a Beam traceback."""
    import shutil

    examples = tmp_path / "examples"
    shutil.copytree(art["examples"], examples, ignore=shutil.ignore_patterns("columnar"))
    shard = next((examples / "train").glob("*.tfrecord"))
    shard.write_bytes(shard.read_bytes()[:-100])  # truncated record
    with pytest.raises(StageError, match=r"cannot read examples shard .*part-00000.tfrecord"):
        run_stage("transform", {}, {"examples": examples}, tmp_path)
