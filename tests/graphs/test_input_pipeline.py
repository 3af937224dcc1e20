"""make_dataset: batches, shuffling, repeat, cache and per-worker sharding of `transformed`."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from baton.graphs.feature_spec import FeatureSpec
from baton.graphs.input_pipeline import make_dataset
from baton.pipeline.testing import run_stage


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("ip")
    cfg = {"source": "synthetic", "rows_per_shard": 1500, "splits": {"train": 3, "eval": 1},
           "synthetic": {"rows": 6000, "seed": 3, "numeric": 3, "categorical": 1}}
    ex, _ = run_stage("ingest", cfg, {}, root)
    out, metrics = run_stage("transform", {"chunk_rows": 256}, {"examples": ex["examples"]}, root)
    return out["transformed"], FeatureSpec.load(out["transform_graph"]), metrics


def _ids(ds):
    """A row fingerprint: the transformed x0 values identify rows (continuous, distinct)."""
    return np.concatenate([f["x0"].numpy() for f, _ in ds])


def test_batches_have_the_contract_shapes(data):
    path, spec, metrics = data
    batches = list(make_dataset(path, "train", spec, 100))
    feats, label = batches[0]
    assert set(feats) == {"x0", "x1", "x2", "c0"} and label.dtype == tf.int64
    assert all(v.shape == (100,) for v in feats.values()) and label.shape == (100,)
    assert sum(int(lb.shape[0]) for _, lb in batches) == metrics["rows_train"]
    dropped = list(make_dataset(path, "train", spec, 1000, drop_remainder=True))
    assert all(lb.shape[0] == 1000 for _, lb in dropped)


def test_shuffle_is_seeded_and_covers_every_row(data):
    path, spec, _ = data
    plain = _ids(make_dataset(path, "train", spec, 512))
    a = _ids(make_dataset(path, "train", spec, 512, shuffle=True, seed=1))
    b = _ids(make_dataset(path, "train", spec, 512, shuffle=True, seed=1))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, plain)
    np.testing.assert_array_equal(np.sort(a), np.sort(plain))


def test_repeat_and_cache(data):
    path, spec, metrics = data
    ds = make_dataset(path, "eval", spec, 64, repeat=True, cache=True)
    rows = sum(int(lb.shape[0]) for _, lb in ds.take(3 * metrics["rows_eval"] // 64 + 3))
    assert rows > 2 * metrics["rows_eval"]


@pytest.mark.parametrize("split", ["train", "eval"])  # train: 4 files (by file); eval: 1 (by row)
def test_input_context_shards_are_disjoint_and_complete(data, split):
    path, spec, _ = data
    everything = _ids(make_dataset(path, split, spec, 256))
    parts = [_ids(make_dataset(path, split, spec, 256, input_context=tf.distribute.InputContext(
        num_input_pipelines=2, input_pipeline_id=i))) for i in range(2)]
    assert abs(len(parts[0]) - len(parts[1])) < 0.5 * len(everything)
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.sort(everything))


def test_missing_split_names_the_directory(data):
    path, spec, _ = data
    with pytest.raises(FileNotFoundError, match="split 'test'"):
        make_dataset(path, "test", spec, 8)


def test_read_chunks_is_the_split_once_in_order_as_stored(data):
    """What the balance table loads: every row once, in the same order on every read (every
    task's table must agree), in the stored chunks (no rebatch: chunk_rows 256 here)."""
    from baton.graphs.input_pipeline import read_chunks

    path, spec, metrics = data
    chunks = list(read_chunks(path, "train", spec))
    sizes = [int(lb.shape[0]) for _, lb in chunks]
    assert max(sizes) == 256 and sum(sizes) == metrics["rows_train"], sizes  # a file's last is short
    rows = _ids(chunks)  # file after file (make_dataset interleaves the files' chunks)
    np.testing.assert_array_equal(np.sort(rows), np.sort(_ids(make_dataset(path, "train", spec, 100))))
    np.testing.assert_array_equal(rows, _ids(read_chunks(path, "train", spec)))  # stable
    assert set(chunks[0][0]) == {"x0", "x1", "x2", "c0"} and chunks[0][1].dtype == tf.int64


def test_int64_arrays_of_any_stored_width_read_back_as_int64(tmp_path):
    """Chunks narrowed to different widths in one file (ids, ragged row lengths, sparse
    indices, the label: transformed_io.narrow), and a chunk kept int64, read by make_dataset
    as the same int64 values; a width the writer never uses is an error, not garbage."""
    import tensorflow as tf

    from baton.graphs.feature_spec import Feature, FeatureSpec, Label, RawFeature
    from baton.pipeline.dataplane.records.transformed_io import Ragged, encode_chunk

    spec = FeatureSpec((RawFeature("t", "string"),),
                       (Feature("id", "integer"), Feature("tok", "integer", shape=(None,),
                                                          encoding="ragged"),
                        Feature("sp", "numeric", shape=(3, None), encoding="sparse")),
                       Label("label", "classification", ("a", "b")))
    rows, records = [], []
    for scale in (1, 300, 70_000, 2**40):  # int8, int16, int32, int64 ids
        ids = (np.arange(4, dtype=np.int64) - 1) * scale
        lengths = np.array([0, 2, 1, 3], np.int64) * (1 if scale < 2**40 else 200)
        tok = np.arange(int(lengths.sum()), dtype=np.int64) * scale
        sp_lengths = np.array([1, 0, 2, 1], np.int64)
        sp_idx = np.array([[2, 0], [0, 5], [1, 300], [0, 0]], np.int64)
        cols = {"id": ids, "tok": Ragged(tok, [lengths]),
                "sp": Ragged(np.arange(4, dtype=np.float32), [sp_lengths], sp_idx),
                "label": np.array([0, 1, 1, 0], np.int64)}
        records.append(encode_chunk(cols))
        rows.append((ids, tok, lengths))
    (tmp_path / "train").mkdir()
    with tf.io.TFRecordWriter(str(tmp_path / "train" / "part-00000.tfrecord")) as w:
        for r in records:
            w.write(r)
    got = list(make_dataset(tmp_path, "train", spec, 4))
    assert len(got) == 4
    for (feats, label), (ids, tok, lengths) in zip(got, rows, strict=True):
        assert feats["id"].dtype == tf.int64 and feats["id"].numpy().tolist() == ids.tolist()
        assert feats["tok"].flat_values.numpy().tolist() == tok.tolist()
        assert feats["tok"].row_lengths().numpy().tolist() == lengths.tolist()
        assert feats["sp"].indices.numpy().tolist() == [[0, 2, 0], [2, 0, 5], [2, 1, 300],
                                                        [3, 0, 0]]
        assert label.dtype == tf.int64 and label.numpy().tolist() == [0, 1, 1, 0]

    bad = tf.train.Example.FromString(records[0])
    bad.features.feature["id$width"].int64_list.value[:] = [3]
    with tf.io.TFRecordWriter(str(tmp_path / "train" / "part-00000.tfrecord")) as w:
        w.write(bad.SerializeToString())
    with pytest.raises(tf.errors.InvalidArgumentError, match="width"):
        list(make_dataset(tmp_path, "train", spec, 4))
