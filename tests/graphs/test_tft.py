"""baton.tft against tf.Transform's own semantics (the reference values of its code and tests,
tensorflow/transform mappers.py / analyzers.py / bucketize_integration_test.py), in memory."""

from __future__ import annotations

import numpy as np
import pytest

import baton.tft as tft
from baton.graphs.tft import engine as tft_engine


def _run(fn, data, raw=None):
    raw = raw or [(k, "string" if v.dtype == object else "float32", v.shape[1:])
                  for k, v in data.items()]
    specs = tft_engine.raw_specs(raw)
    resolved = tft_engine.analyze(fn, specs, lambda: [data])
    trace, concrete = tft_engine.transform_fn(fn, specs, resolved)
    return tft_engine.apply(concrete, data), trace


def _x(*values):
    return {"x": np.array(values, np.float32)}


def test_z_score_zero_variance_gives_x_minus_mean_and_nan_is_skipped_by_the_statistics():
    out, _ = _run(lambda i: {"z": tft.scale_to_z_score(i["x"])}, _x(3, 3, 3, 3))
    np.testing.assert_array_equal(out["z"], [0, 0, 0, 0])
    out, _ = _run(lambda i: {"z": tft.scale_to_z_score(i["x"])}, _x(1, np.nan, np.nan, 2))
    np.testing.assert_allclose(out["z"], [-1, np.nan, np.nan, 1])  # tft's `with_nans` case


def test_min_max_scaling_uses_sigmoid_when_min_equals_max():
    out, _ = _run(lambda i: {"s": tft.scale_by_min_max(i["x"], 0.0, 10.0)}, _x(4, 4))
    np.testing.assert_allclose(out["s"], [9.8201379, 9.8201379], rtol=1e-6)
    out, _ = _run(lambda i: {"s": tft.scale_to_0_1(i["x"])}, _x(1, 2, 3, 5))
    np.testing.assert_allclose(out["s"], [0, 0.25, 0.5, 1])
    with pytest.raises(ValueError, match="output_min must be less than output_max"):
        _run(lambda i: {"s": tft.scale_by_min_max(i["x"], 1.0, 1.0)}, _x(1, 2))


def test_numeric_analyzers_dtypes_and_nan_rules():
    def fn(i):
        x = i["x"]
        z = np.zeros(1, np.float32)
        return {"mean": tft.mean(x) + z, "var": tft.var(x) + z, "min": tft.min(x) + z,
                "max": tft.max(x) + z, "sum": tft.sum(x) + z,
                "size": tft.size(x) + np.zeros(1, np.int64)}

    out, _ = _run(fn, _x(1, 2, 3, np.nan))
    assert out["mean"][0] == pytest.approx(2.0) and out["var"][0] == pytest.approx(2 / 3)
    assert np.isnan(out["min"][0]) and np.isnan(out["max"][0]) and np.isnan(out["sum"][0])
    assert out["size"][0] == 4 and out["size"].dtype == np.int64  # NaN counted


def test_vocabulary_order_threshold_top_k_and_oov_buckets():
    data = {"s": np.array([b"a"] * 5 + [b"c"] * 3 + [b"b"] * 3 + [b"d", b"", b"x\ny"], object)}

    def fn(i):
        return {"ids": tft.compute_and_apply_vocabulary(i["s"], frequency_threshold=3,
                                                        vocab_filename="letters"),
                "oov": tft.compute_and_apply_vocabulary(i["s"], top_k=2, num_oov_buckets=2)}

    out, trace = _run(fn, data)
    # count descending, then token bytes descending: a(5), c(3), b(3); d (1) under threshold
    ids = dict(zip([t for t in data["s"]], out["ids"], strict=True))
    assert (ids[b"a"], ids[b"c"], ids[b"b"], ids[b"d"]) == (0, 1, 2, -1)
    import tensorflow as tf

    oov_d = int(tf.strings.to_hash_bucket_fast([b"d"], 2)[0]) + 2  # Fingerprint64 % 2 + size
    oov = dict(zip([t for t in data["s"]], out["oov"], strict=True))
    assert (oov[b"a"], oov[b"c"], oov[b"d"]) == (0, 1, oov_d)
    assert sorted(trace.domains.values()) == [(-1, 2), (0, 3)]


def test_vocabulary_of_ragged_tokens_and_of_numbers_refused():
    data = {"text": np.array([b"the cat", b"the dog", b"a cat the"], object)}
    import tensorflow as tf

    out, _ = _run(lambda i: {"t": tft.compute_and_apply_vocabulary(
        tf.strings.split(i["text"]))}, data)
    # the (3), cat (2), then the ties by bytes, descending: dog, a
    assert [list(r) for r in out["t"]] == [[0, 1], [0, 2], [3, 1, 0]]
    with pytest.raises(ValueError, match="expected tf.string or integer but got float32"):
        _run(lambda i: {"v": tft.compute_and_apply_vocabulary(i["x"])}, _x(1, 2))


@pytest.mark.parametrize("values,buckets,boundaries", [
    ([1, 2, 3, 4], 2, [3]), ([1, 2, 3, 4], 3, [2, 3]), ([1, 2, 3, 4], 4, [2, 3, 4]),
    ([1, 2, 3, 4], 10, [1, 1, 2, 2, 3, 3, 3, 4, 4]), (list(range(1, 10)), 3, [4, 7]),
    (list(range(1, 100)), 4, [25, 50, 75]),
])
def test_quantile_boundaries_match_tf_transforms_tests(values, buckets, boundaries):
    def fn(i):
        return {"q": tft.quantiles(i["x"], buckets, 0.01) + np.zeros((1, 1), np.float32)}

    out, _ = _run(fn, _x(*values))
    np.testing.assert_array_equal(out["q"][0], boundaries)


def test_apply_buckets_puts_a_boundary_value_in_the_upper_bucket_and_nan_last():
    def fn(i):
        return {"b": tft.apply_buckets(i["x"], np.array([[2, 5, 10]], np.float32))}

    out, trace = _run(fn, _x(4, np.nan, 1, -np.inf, 7.5, 10))
    np.testing.assert_array_equal(out["b"], [1, 3, 0, 0, 2, 3])  # tft's docstring example
    assert list(trace.domains.values()) == [(0, 3)]


def test_an_analyzer_of_another_analyzers_result_runs_one_phase_later():
    phases = []

    def fn(i):
        x = i["x"]
        return {"range": tft.max(x - tft.min(x)) + np.zeros(1, np.float32)}

    specs = tft_engine.raw_specs([("x", "float32", ())])
    p = tft_engine.Phases(fn, specs)
    while (phase := p.next()) is not None:
        phases.append(sorted(r.kind for r in phase.analyzers.values()))
        p.finish(phase, tft_engine.merge_all(phase, [phase.accumulate(_x(3, 5, 9))]))
    assert phases == [["min_max"], ["min_max"]]
    out, _ = _run(fn, _x(3, 5, 9))
    assert out["range"][0] == 6


def test_unsupported_arguments_and_names_are_named():
    with pytest.raises(ValueError, match=r'"csv" is not an accepted file_format. It should be '
                                         r"one of: \('text', 'tfrecord_gzip'\)"):
        _run(lambda i: {"v": tft.compute_and_apply_vocabulary(i["s"], file_format="csv")},
             {"s": np.array([b"a"], object)})
    with pytest.raises(AttributeError, match=r"tft.tfidf is not supported by baton.tft; "
                                             r"supported: TFTransformOutput, apply_buckets, "):
        _ = tft.tfidf
    assert sorted(tft.__all__) == sorted(tft.SUPPORTED)
    with pytest.raises(RuntimeError, match="run inside a preprocessing_fn that Baton traces"):
        tft.mean(np.zeros(2, np.float32))


def test_hash_strings_is_fingerprint64_like_tf_transform():
    import tensorflow as tf

    out, _ = _run(lambda i: {"h": tft.hash_strings(i["s"], 10)},
                  {"s": np.array([b"x", b"y"], object)})
    np.testing.assert_array_equal(out["h"], tf.strings.to_hash_bucket_fast([b"x", b"y"], 10))
