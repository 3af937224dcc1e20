"""The built-in column kinds are a preprocessing_fn on baton.tft (graphs.column_kinds): each
kind's documented ids and scalings, computed here independently with numpy, on the module the
transform stage exports."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from baton.graphs.column_kinds import ColumnsFn
from baton.graphs.tft import engine as tft_engine
from baton.graphs.tft import module as tft_module

PLAN = {
    "a": {"kind": "zscore"},
    "a_mm": {"kind": "minmax"},
    "a_id": {"kind": "identity"},
    "b": {"kind": "bucketize", "buckets": 4},
    "z": {"kind": "zscore"},
    "s": {"kind": "vocabulary", "top_k": None, "min_frequency": 1, "oov_buckets": 3},
    "s1": {"kind": "vocabulary", "top_k": 1, "min_frequency": 1, "oov_buckets": 1},
    "s_hash": {"kind": "hash", "buckets": 7},
}
RAW = [("a", "float32", ()), ("a_mm", "float32", ()), ("a_id", "float32", ()),
       ("b", "float32", ()), ("z", "float32", ()), ("s", "string", ()), ("s1", "string", ()),
       ("s_hash", "string", ())]
LABEL = {"name": "y", "dtype": "string", "task": "classification", "vocabulary": ["no", "yes"]}


def _rows(n: int = 500, seed: int = 0) -> dict[str, np.ndarray]:
    g = np.random.default_rng(seed)
    a = (g.standard_normal(n) * 3 + 1).astype(np.float32)
    a[g.random(n) < 0.1] = np.nan
    b = np.concatenate([[-1.0, 0.0, 0.5, 2.0, 2.0001, -1.0001],
                        g.standard_normal(n - 6) * 2]).astype(np.float32)
    b[g.random(n) < 0.1] = np.nan
    pool = np.array([b"x", b"yy", "é".encode(), b"", b"zzz", b"x "], object)
    s = pool[g.choice(len(pool), n, p=[0.3, 0.25, 0.2, 0.1, 0.1, 0.05])]
    return {"a": a, "a_mm": a, "a_id": a, "b": b, "z": np.full(n, 4.0, np.float32),
            "s": s, "s1": s, "s_hash": s}


@pytest.fixture(scope="module")
def built():
    fn = ColumnsFn(PLAN)
    rows = _rows()
    resolved = tft_engine.analyze(fn, tft_engine.raw_specs(RAW), lambda: [rows])
    module = tft_module.build_module(fn, RAW, LABEL, resolved)
    ops = {op["name"]: op for op in fn.analysis_ops(resolved, {})}
    out = {k: v.numpy() for k, v in module.module.transform_features(
        {k: tf.constant(v) for k, v in rows.items()}).items()}
    return rows, module, ops, out


def test_numeric_kinds_scale_the_finite_values_and_zero_the_missing(built):
    rows, _, ops, out = built
    a = rows["a"]
    finite = a[np.isfinite(a)]
    assert ops["a"]["mean"] == pytest.approx(finite.mean(), rel=1e-6)
    assert ops["a"]["var"] == pytest.approx(finite.var(), rel=1e-5)
    want = np.where(np.isnan(a), 0, (a - finite.mean()) / finite.std())
    np.testing.assert_allclose(out["a"], want, rtol=1e-5, atol=1e-6)
    lo, hi = finite.min(), finite.max()
    assert (ops["a_mm"]["min"], ops["a_mm"]["max"]) == (lo, hi)
    np.testing.assert_allclose(out["a_mm"], np.where(np.isnan(a), 0, (a - lo) / (hi - lo)),
                               rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(out["a_id"], np.where(np.isnan(a), 0, a))
    np.testing.assert_array_equal(out["z"], np.zeros_like(out["z"]))  # variance 0: x - mean
    assert all(out[k].dtype == np.float32 for k in ("a", "a_mm", "a_id", "z"))


def test_bucketize_counts_boundaries_at_or_below_and_gives_missing_its_own_id(built):
    rows, module, ops, out = built
    bounds = np.array(ops["b"]["boundaries"], np.float32)
    assert len(bounds) == 3 and (np.diff(bounds) >= 0).all()
    b = rows["b"]
    want = np.where(np.isnan(b), 4, np.searchsorted(bounds, b, side="right"))
    np.testing.assert_array_equal(out["b"], want)
    counts = np.bincount(out["b"][~np.isnan(b)], minlength=4)
    assert counts.min() > 0.2 * len(b) * 0.9 / 4 * 4 * 0.25  # quantile buckets, each populated
    assert module.outputs["b"] == {"dtype": "int64", "shape": [], "min": 0, "max": 4}


def test_vocabulary_ranks_by_count_then_bytes_with_missing_and_oov_after_it(built):
    rows, module, ops, out = built
    s = rows["s"]
    present = [v for v in s if v != b""]
    values, counts = np.unique(np.array(present, object).astype(bytes), return_counts=True)
    ranked = [v for _, v in sorted(zip(counts, values, strict=True), reverse=True)]
    assert [t.encode() for t in ops["s"]["vocabulary"]] == ranked  # count, then bytes, desc
    size = len(ranked)
    index = {v: i for i, v in enumerate(ranked)}
    np.testing.assert_array_equal(out["s"], [size if v == b"" else index[v] for v in s])
    unknown = tf.constant([b"never seen", b"also new"])
    got = module.module.transform_features(
        {k: (unknown if k.startswith("s") else tf.constant([1.0, 2.0])) for k, _, _ in RAW})
    oov = tf.strings.to_hash_bucket_fast(unknown, 3).numpy()
    np.testing.assert_array_equal(got["s"].numpy(), size + 1 + oov)
    assert module.outputs["s"]["max"] == size + 3  # vocab_size = V + 1 + oov_buckets
    top = ranked[0]
    np.testing.assert_array_equal(out["s1"][s == top], 0)
    assert set(out["s1"][(s != top) & (s != b"")]) == {2}  # top_k 1: the rest is OOV (1 + 1)
    np.testing.assert_array_equal(out["s1"][s == b""], 1)


def test_hash_is_fingerprint64_mod_buckets_and_missing_is_its_own_id(built):
    rows, module, _, out = built
    s = rows["s_hash"]
    want = tf.strings.to_hash_bucket_fast(tf.constant(list(s)), 7).numpy()
    np.testing.assert_array_equal(out["s_hash"], np.where(s == b"", 7, want))
    assert module.outputs["s_hash"]["max"] == 7


def test_the_feature_spec_follows_the_kinds(built):
    _, module, _, _ = built
    kinds = {f.name: (f.kind, f.vocab_size) for f in module.features}
    assert kinds["a"] == ("numeric", 0) and kinds["b"] == ("categorical", 5)
    assert kinds["s_hash"] == ("categorical", 8)
    assert kinds["s"] == ("categorical", 5 + 1 + 3)  # 5 distinct non-missing tokens


@pytest.mark.parametrize("kind", ["zscore", "minmax", "identity"])
def test_a_tensor_column_is_scaled_with_one_mean_over_all_of_its_values(kind):
    shape = (6, 5, 3)
    rng = np.random.default_rng(0)
    x = rng.random((4, *shape), dtype=np.float32)
    x[1, 0, 0, 0] = np.nan  # a missing value inside an image
    x[2] = np.nan  # a missing image
    fn = ColumnsFn({"image": {"kind": kind}})
    raw = [("image", "float32", shape)]
    resolved = tft_engine.analyze(fn, tft_engine.raw_specs(raw), lambda: [{"image": x}])
    module = tft_module.build_module(fn, raw, LABEL, resolved)
    got = module.module.transform_features({"image": tf.constant(x)})["image"].numpy()
    assert got.shape == x.shape
    v = x[np.isfinite(x)]
    scaled = {"zscore": (x - v.mean()) / v.std(), "minmax": (x - v.min()) / (v.max() - v.min()),
              "identity": x}[kind]
    np.testing.assert_allclose(got, np.where(np.isnan(x), 0, scaled), rtol=2e-5, atol=2e-6)
    assert [f.shape for f in module.features] == [shape]
    op = fn.analysis_ops(resolved, {"image": shape})[0]
    assert op["shape"] == list(shape)


def test_a_vocabulary_of_only_missing_values_holds_tft_s_placeholder_token():
    from baton.graphs.tft.analyzers import EMPTY_VOCABULARY_TOKEN

    fn = ColumnsFn({"s": {"kind": "vocabulary", "oov_buckets": 1}})
    raw = [("s", "string", ())]
    rows = {"s": np.array([b"", b""], object)}
    resolved = tft_engine.analyze(fn, tft_engine.raw_specs(raw), lambda: [rows])
    module = tft_module.build_module(fn, raw, LABEL, resolved)
    got = module.module.transform_features({"s": tf.constant([b"", b"new"])})["s"].numpy()
    assert module.vocabularies == {"s": [EMPTY_VOCABULARY_TOKEN]}  # as tf.Transform writes it
    assert got.tolist() == [1, 2]  # V = 1: missing -> 1, unknown -> 1 + 1 + 0
    assert module.features[0].vocab_size == 3
