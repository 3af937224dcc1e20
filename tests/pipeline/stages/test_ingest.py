"""ingest: penguins through TFDS, TFDS by name from a data_dir, CSV with bad rows, synthetic."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from pipeline.dataplane.schema_file import ExamplesSchema, shard_files
from pipeline.errors import StageError
from pipeline.stages import ingest
from pipeline.testing import run_stage
from tests.pipeline.dataplane.helpers import penguins


def _read(examples: Path, split: str) -> list[tf.train.Example]:
    return [tf.train.Example.FromString(r.numpy())
            for f in shard_files(examples, split) for r in tf.data.TFRecordDataset(str(f))]


def test_penguins_examples_follow_the_contract(tmp_path_factory):
    examples = penguins(tmp_path_factory.mktemp("penguins"))["examples"]
    schema = ExamplesSchema.load(examples)
    assert schema.label == "species" and schema.task == "classification"
    assert schema.splits["train"] + schema.splits["eval"] == 344
    assert 0.7 < schema.splits["train"] / 344 < 0.9
    assert {c.name: c.dtype for c in schema.columns}["island"] == "string"
    rows = _read(examples, "train")
    assert len(rows) == schema.splits["train"]
    feats = rows[0].features.feature
    assert feats["species"].bytes_list.value and feats["year"].float_list.value
    # NA in the CSV is an absent feature, never NaN or "NA"
    absent = sum("sex" not in r.features.feature for r in rows + _read(examples, "eval"))
    assert absent == 11


def test_tfds_by_name_reads_a_prepared_data_dir(tmp_path):
    from pipeline.datasets.penguins import BatonPenguins

    data_dir = tmp_path / "tfds"
    BatonPenguins(data_dir=str(data_dir)).download_and_prepare()
    cfg = {"source": "tfds", "dataset": "baton_penguins", "data_dir": str(data_dir),
           "download": False, "label": "species", "splits": {"train": 1, "eval": 1}}
    out, metrics = run_stage("ingest", cfg, {}, tmp_path)
    assert metrics["rows"] == 344
    assert ExamplesSchema.load(out["examples"]).source["kind"] == "tfds"
    sliced = dict(cfg, split_names={"train": "train[:75%]", "eval": "train[75%:]"})
    sliced.pop("splits")
    out2, m2 = run_stage("ingest", sliced, {}, tmp_path, run_id="sliced")
    assert (m2["rows_train"], m2["rows_eval"]) == (258, 86)
    bad = dict(sliced, split_names={"train": "test"})
    with pytest.raises(StageError, match=r"no split 'test'; its splits are \['train'\]"):
        run_stage("ingest", bad, {}, tmp_path, run_id="bad")
    paths = ingest.external_inputs(ingest.Config(source="tfds", dataset="baton_penguins",
                                                 data_dir=data_dir), tmp_path)
    assert paths == [data_dir / "baton_penguins"]


def test_tfds_missing_data_names_dataset_and_directory(tmp_path):
    cfg = {"source": "tfds", "dataset": "mnist", "data_dir": str(tmp_path / "empty"),
           "download": False}
    with pytest.raises(StageError, match=r"'mnist' is not prepared in data_dir .*empty"):
        run_stage("ingest", cfg, {}, tmp_path)


BAD_CSV = (b"species,island,mass\nA,x,1.5\nB,y,2\nA,x,oops\nB,\xff\xfe,3\nA,x,1,2\nB,,NA\n,x,4\n"
           + b"A,z,5\nB,y,6\n" * 20)


def test_csv_bad_rows_are_quarantined_with_reasons(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.csv").write_bytes(BAD_CSV)
    (data / "empty.csv").write_bytes(b"")
    cfg = {"source": "csv", "path": "data/*.csv", "label": "species", "max_bad_fraction": 0.1}
    out, m = run_stage("ingest", cfg, {}, tmp_path)
    assert m["quarantined"] == 3 and m["empty_files"] == 1 and m["dropped_missing_label"] == 1
    assert m["rows"] == 2 + 1 + 40  # good rows with a label
    bad = [json.loads(line) for line in (out["examples"] / "quarantine" / "rows.jsonl").open()]
    reasons = " | ".join(b["reason"] for b in bad)
    assert "expected 3 fields, found 4" in reasons
    assert "'mass': not a number" in reasons and "not valid UTF-8" in reasons
    schema = ExamplesSchema.load(out["examples"])
    assert {c.name: c.dtype for c in schema.columns} == {
        "species": "string", "island": "string", "mass": "float32"}
    assert ingest.external_inputs(ingest.Config(source="csv", path="data/*.csv"), tmp_path) == [
        data / "a.csv", data / "empty.csv"]


def test_csv_fails_above_the_bad_fraction_without_traceback(tmp_path):
    (tmp_path / "a.csv").write_bytes(BAD_CSV)
    with pytest.raises(StageError, match=r"3 of 47 CSV rows rejected .* max_bad_fraction=0.01"):
        run_stage("ingest", {"source": "csv", "path": "a.csv", "label": "species"}, {}, tmp_path)


def test_csv_only_empty_files_is_a_stage_error(tmp_path):
    (tmp_path / "e.csv").write_bytes(b"")
    with pytest.raises(StageError, match="empty"):
        run_stage("ingest", {"source": "csv", "path": "*.csv", "label": "y"}, {}, tmp_path)
    with pytest.raises(StageError, match="no CSV files match"):
        run_stage("ingest", {"source": "csv", "path": "nope/*.csv"}, {}, tmp_path, run_id="r2")


def test_synthetic_is_deterministic_and_sharded(tmp_path):
    cfg = {"source": "synthetic", "rows_per_shard": 3000,
           "synthetic": {"rows": 10_000, "seed": 7, "classes": 3, "missing": 0.05}}
    a, ma = run_stage("ingest", cfg, {}, tmp_path, run_id="a")
    b, _ = run_stage("ingest", cfg, {}, tmp_path, run_id="b")
    files_a = shard_files(a["examples"], "train")
    assert len(files_a) == int(np.ceil(ma["rows_train"] / 3000))
    assert [f.read_bytes() for f in files_a] == [
        f.read_bytes() for f in shard_files(b["examples"], "train")]
    labels = [r.features.feature["label"].bytes_list.value[0] for r in _read(a["examples"], "eval")]
    counts = np.unique(labels, return_counts=True)[1]
    assert len(counts) == 3 and counts.min() > 0.2 * len(labels)  # balanced classes


def test_tfds_download_offline_fails_fast_naming_dataset_and_directory(tmp_path, monkeypatch):
    from pipeline.dataplane import tfds_source

    monkeypatch.setattr(tfds_source, "network_problem", lambda: "cannot connect to x: offline")
    cfg = {"source": "tfds", "dataset": "mnist", "data_dir": str(tmp_path / "d")}
    with pytest.raises(StageError, match=r"'mnist' is not prepared in data_dir .*/d .*network "
                                         r"is unreachable \(cannot connect to x: offline\)"):
        run_stage("ingest", cfg, {}, tmp_path)


def test_baton_synthetic_tfds_builder_has_the_same_rows_as_the_synthetic_source(tmp_path):
    via_tfds, m1 = run_stage("ingest", {"source": "tfds", "dataset": "baton_synthetic",
                                        "data_dir": str(tmp_path / "tfds")}, {}, tmp_path,
                             run_id="a")
    direct, m2 = run_stage("ingest", {"source": "synthetic", "synthetic": {"rows": 1000}}, {},
                           tmp_path, run_id="b")
    assert m1["rows"] == m2["rows"] == 1000

    def rows(examples):
        out = []
        for split in ("train", "eval"):
            for ex in _read(examples, split):
                f = ex.features.feature
                out.append((round(f["x0"].float_list.value[0], 5), f["c0"].bytes_list.value[0],
                            f["label"].bytes_list.value[0]))
        return sorted(out)

    assert rows(via_tfds["examples"]) == rows(direct["examples"])
