"""The transform graph equals the Beam-side numpy apply, value for value, for every kind."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import tensorflow as tf

from baton.graphs import transform as tgraph
from baton.pipeline.dataplane.apply import Applier

ANALYSIS = {
    "version": 1,
    "raw_features": [{"name": "a", "dtype": "float32"}, {"name": "b", "dtype": "float32"},
                     {"name": "s", "dtype": "string"}],
    "features": [
        {"name": "a", "source": "a", "kind": "zscore", "mean": 1.2345678, "var": 3.3},
        {"name": "a_mm", "source": "a", "kind": "minmax", "min": -2.5, "max": 7.1},
        {"name": "a_id", "source": "a", "kind": "identity"},
        {"name": "b", "source": "b", "kind": "bucketize", "boundaries": [-1.0, 0.0, 0.5, 2.0]},
        {"name": "z", "source": "b", "kind": "zscore", "mean": 0.0, "var": 0.0},
        {"name": "s", "source": "s", "kind": "vocabulary", "vocabulary": ["x", "yy", "é"],
         "oov_buckets": 3},
        {"name": "s1", "source": "s", "kind": "vocabulary", "vocabulary": ["x"], "oov_buckets": 1},
        {"name": "s_hash", "source": "s", "kind": "hash", "buckets": 7},
    ],
    "label": {"name": "y", "dtype": "string", "task": "classification",
              "vocabulary": ["no", "yes"]},
}


def _rows(n: int = 500, seed: int = 0):
    g = np.random.default_rng(seed)
    a = (g.standard_normal(n) * 3).astype(np.float32)
    a[g.random(n) < 0.1] = np.nan
    b = np.concatenate([[-1.0, 0.0, 0.5, 2.0, 2.0001, -1.0001, np.inf, -np.inf],
                        g.standard_normal(n - 8) * 2]).astype(np.float32)
    b[g.random(n) < 0.1] = np.nan
    pool = np.array(["x", "yy", "é", "", "zzz", "unknown", "x "], object)
    s = pool[g.integers(0, len(pool), n)]
    y = np.array(["no", "yes", "maybe"], object)[g.integers(0, 3, n)]
    return {"a": a, "b": b, "s": s}, y


def _batch(raw, y):
    def dict_array(values):
        uniq, idx = np.unique(values.astype(str), return_inverse=True)
        return pa.DictionaryArray.from_arrays(
            pa.array(idx.astype(np.int32)), pa.array([u.encode() for u in uniq], pa.binary()))

    return pa.RecordBatch.from_arrays(
        [pa.array(raw["a"]), pa.array(raw["b"]), dict_array(raw["s"]), dict_array(y)],
        names=["a", "b", "s", "y"])


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    path = tgraph.save(ANALYSIS, tmp_path_factory.mktemp("tg") / "transform_graph")
    return tf.saved_model.load(str(path))


def test_graph_and_numpy_agree_exactly(loaded):
    raw, y = _rows()
    applier = Applier(ANALYSIS)
    expected = applier.features(_batch(raw, y))
    tensors = {"a": tf.constant(raw["a"]), "b": tf.constant(raw["b"]),
               "s": tf.constant([v.encode() for v in raw["s"]])}
    for module in (tgraph.build_module(ANALYSIS), loaded):
        got = {k: v.numpy() for k, v in module.transform_features(tensors).items()}
        assert set(got) == set(expected)
        for name in expected:
            assert got[name].dtype == expected[name].dtype, name
            np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
    ids, keep = applier.label(_batch(raw, y))
    np.testing.assert_array_equal(loaded.transform_label(tf.constant(list(y))).numpy(), ids)
    assert (keep == (y != "maybe")).all()


def test_ids_follow_the_documented_layout():
    raw = {"a": np.array([np.nan, 1.2345678], np.float32),
           "b": np.array([np.nan, 0.5], np.float32),
           "s": np.array(["", "yy"], object)}
    out = Applier(ANALYSIS).features(_batch(raw, np.array(["no", "yes"], object)))
    assert out["a"][0] == 0.0 and abs(out["a"][1]) < 1e-6  # missing -> 0 = the mean
    assert out["b"].tolist() == [5, 3]  # NaN -> len(boundaries) + 1; 0.5 -> 3 boundaries <= it
    assert out["s"].tolist() == [3, 1]  # "" -> V; "yy" -> 1
    assert out["s_hash"][0] == 7  # "" -> buckets
    sizes = {op["name"]: tgraph.vocab_size(op) for op in ANALYSIS["features"]}
    assert sizes["s"] == 3 + 1 + 3 and sizes["b"] == 6 and sizes["s_hash"] == 8
