"""ingest: penguins through TFDS, TFDS by name from a data_dir, CSV with bad rows, synthetic."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from baton.errors import StageError
from baton.pipeline.dataplane.records.schema_file import ExamplesSchema, shard_files
from baton.pipeline.stages import ingest
from baton.pipeline.testing import run_stage
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
    from baton.pipeline.datasets.penguins import BatonPenguins

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
    from baton.pipeline.dataplane.sources import tfds_source

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


def _quarantined(examples: Path) -> list[dict]:
    path = examples / "quarantine" / "rows.jsonl"
    return [json.loads(line) for line in path.open()] if path.exists() else []


def test_csv_unterminated_quote_quarantines_only_its_line(tmp_path):
    """100k rows, one unterminated quote at row 50,000: that line alone is quarantined."""
    lines = [b"species,island,mass"] + [b'A,"Biscoe, North",%d' % i for i in range(100_000)]
    lines[50_000] = b'A,"Dream,7'  # row 50,000 (0-based 49,999) is physical line 50,001
    (tmp_path / "a.csv").write_bytes(b"\n".join(lines) + b"\n")
    out, m = run_stage("ingest", {"source": "csv", "path": "a.csv", "label": "species"}, {},
                       tmp_path)
    assert (m["rows"], m["quarantined"]) == (99_999, 1)
    [bad] = _quarantined(out["examples"])
    assert bad["line"] == 50_001 and bad["text"] == 'A,"Dream,7'
    assert "unterminated quote" in bad["reason"]
    schema = ExamplesSchema.load(out["examples"])
    assert schema.dropped["quarantined_unterminated_quote"] == 1
    rows = _read(out["examples"], "eval")
    assert {r.features.feature["island"].bytes_list.value[0] for r in rows} == {b"Biscoe, North"}


def test_csv_quotes_resync_at_the_next_line_in_every_position(tmp_path):
    """Open quotes at chunk ends, at the end of the file, in a row that would still have the
    right field count; legal quotes (delimiters, doubled quotes, a literal quote) are kept."""
    good = [b'B,"a ""quoted"", value",1', b'B,12" screen,2', b"B,y,3"]
    bad = [b'A,x,"5', b'A,"y,z', b'A,"Dream",7,"8', b'A,x",",9']
    body = []
    for i in range(12_000):  # ~240 kB: several 64 kB chunks with batch_rows=1024
        body.append(good[i % 3])
        if i % 997 == 0:
            body.append(bad[(i // 997) % len(bad)])
    body.append(b'A,z,"6')  # unterminated on the last line, no line break after it
    data = b"\r\n".join([b"species,island,mass", *body])
    (tmp_path / "a.csv").write_bytes(data)
    cfg = {"source": "csv", "path": "a.csv", "label": "species", "batch_rows": 1024,
           "splits": {"train": 1}}
    out, m = run_stage("ingest", cfg, {}, tmp_path)
    n_bad = sum(line in bad for line in body) + 1
    assert (m["rows"], m["quarantined"]) == (12_000, n_bad)
    quarantined = _quarantined(out["examples"])
    assert all("unterminated quote" in q["reason"] for q in quarantined)
    assert [q["line"] for q in quarantined] == [
        i + 2 for i, line in enumerate(body) if line in bad or line == b'A,z,"6']
    islands = {r.features.feature["island"].bytes_list.value[0]
               for r in _read(out["examples"], "train")}
    assert islands == {b'a "quoted", value', b'12" screen', b"y"}


def test_csv_header_with_a_utf8_bom(tmp_path):
    (tmp_path / "a.csv").write_bytes(b"\xef\xbb\xbfspecies,mass\nA,1\nB,2\nA,3\n")
    out, m = run_stage("ingest", {"source": "csv", "path": "a.csv", "label": "species"}, {},
                       tmp_path)
    assert m["rows"] == 3
    assert [c.name for c in ExamplesSchema.load(out["examples"]).columns] == ["species", "mass"]


@pytest.mark.parametrize(("data", "problem"), [
    (b"species,isl\xffand,mass\nA,x,1\n",
     r"header line is not valid UTF-8 \(byte 0xff at offset 11"),
    (gzip.compress(b"species,mass\nA,1\n" * 50, mtime=0), "not CSV text: it is gzip-compressed"),
    (b"PK\x03\x04" + bytes(range(256)) * 4, "not CSV text: it is a zip archive"),
    (b"\x00\x01\x02\x03binary\n\x00\xff\n", "not CSV text: its first line contains NUL bytes"),
    ("species,mass\nA,1\n".encode("utf-16"), r"not CSV text: it is UTF-16 text"),
    (b'species,"mass\nA,1\n', "cannot parse the header line"),
], ids=["bad-utf8", "gzip", "zip", "nul", "utf16", "bad-header"])
def test_csv_unreadable_file_is_a_stage_error_naming_it(tmp_path, data, problem):
    (tmp_path / "data.csv").write_bytes(data)
    with pytest.raises(StageError, match=rf"CSV file \S*data\.csv.*{problem}"):
        run_stage("ingest", {"source": "csv", "path": "data.csv", "label": "species"}, {},
                  tmp_path)


NAN_CSV = b"species,mass\n" + b"A,1.5\nB,NaN\nA,NA\nB,2.5\nA,nan\n" * 40


def test_csv_literal_nan_reaches_statistics_and_validate_reports_it(tmp_path):
    """ingest -> statistics -> validate on real rows: a NaN that is not an NA value is counted
    as NaN (not as missing) and validate reports it as non_finite; NA stays missing."""
    (tmp_path / "a.csv").write_bytes(NAN_CSV)
    cfg = {"source": "csv", "path": "a.csv", "label": "species", "na_values": ["", "NA"]}
    ex, _ = run_stage("ingest", cfg, {}, tmp_path)
    rows = _read(ex["examples"], "train") + _read(ex["examples"], "eval")
    masses = [r.features.feature["mass"].float_list.value for r in rows]
    assert sum(1 for v in masses if not v) == 40  # NA: an absent feature
    assert sum(1 for v in masses if v and np.isnan(v[0])) == 80  # NaN: a NaN float

    def stats_of(examples, run_id):
        out, _ = run_stage("statistics", {}, {"examples": examples}, tmp_path, run_id=run_id)
        data = json.loads((out["statistics"] / "statistics.json").read_text())
        feats = [s["features"]["mass"] for s in data["splits"].values()]
        return out, {k: sum(f[k] for f in feats) for k in ("nan", "missing", "count")}

    st, counts = stats_of(ex["examples"], "arrow")
    assert counts == {"nan": 80, "missing": 40, "count": 80}
    tfrecords_only = tmp_path / "tfrecords_only"  # the reader's fallback path agrees
    shutil.copytree(ex["examples"], tfrecords_only, ignore=shutil.ignore_patterns("columnar"))
    assert stats_of(tfrecords_only, "tfrecords")[1] == counts
    inputs = {"statistics": st["statistics"], "schema": st["schema"]}
    with pytest.raises(StageError, match=r"mass: non_finite: \d+ NaN and 0 infinite"):
        run_stage("validate", {}, inputs, tmp_path, run_id="arrow")
    run_stage("validate", {"allow": ["non_finite"]}, inputs, tmp_path, run_id="allowed")


def test_csv_nan_listed_in_na_values_stays_missing(tmp_path):
    """The default na_values include NaN: those values are missing, as before."""
    (tmp_path / "a.csv").write_bytes(NAN_CSV)
    ex, _ = run_stage("ingest", {"source": "csv", "path": "a.csv", "label": "species"}, {},
                      tmp_path)
    st, _ = run_stage("statistics", {}, {"examples": ex["examples"]}, tmp_path)
    data = json.loads((st["statistics"] / "statistics.json").read_text())
    feats = [s["features"]["mass"] for s in data["splits"].values()]
    assert sum(f["nan"] for f in feats) == 0 and sum(f["missing"] for f in feats) == 120


def test_csv_every_label_missing_is_a_stage_error(tmp_path):
    (tmp_path / "a.csv").write_bytes(b"species,mass\n,1\nNA,2\n,3\n")
    with pytest.raises(StageError, match=r"0 of 3 rows kept .*every row lacks label 'species'"):
        run_stage("ingest", {"source": "csv", "path": "a.csv", "label": "species"}, {},
                  tmp_path)
    (tmp_path / "b.csv").write_bytes(b"species,mass\n" + b",1\n" * 20 + b"A,oops\n")
    with pytest.raises(StageError, match=r"0 of 21 rows kept .*1 quarantined .*20 lack label"):
        run_stage("ingest", {"source": "csv", "path": "b.csv", "label": "species"}, {},
                  tmp_path, run_id="mixed")
