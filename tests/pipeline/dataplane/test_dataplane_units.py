"""Units of the data plane: example codec, quantile sketch, Beam runner options, example specs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from pipeline.dataplane import accumulators, beam_runner
from pipeline.dataplane.example_codec import encode_batch

ROOT = Path(__file__).resolve().parents[3]


def test_codec_writes_what_protobuf_parses():
    names = ["a", "island", "b"]
    a = np.array([1.5, np.nan, -3.25, 1e30], np.float32)
    s = np.array(["x", "", "ünïcode" * 30, "y"], object)  # long value: multi-byte varints
    b = np.array([np.nan, 2, 3, np.inf], np.float32)
    for i, rec in enumerate(encode_batch(names, [a, s, b], [True, False, True])):
        feats = tf.train.Example.FromString(rec).features.feature
        assert ("a" in feats) == (not np.isnan(a[i]))
        if "a" in feats:
            assert feats["a"].float_list.value == [a[i]]
        assert ("island" in feats) == (s[i] != "")
        if "island" in feats:
            assert feats["island"].bytes_list.value == [s[i].encode()]
        if "b" in feats:
            assert feats["b"].float_list.value == [b[i]]


def test_quantile_sketch_is_accurate_after_many_merges():
    rng = np.random.default_rng(0)
    acc = accumulators.NumericAcc()
    data = []
    for _ in range(60):
        part = accumulators.NumericAcc()
        x = rng.lognormal(size=5000).astype(np.float32)
        part.add(x)
        acc.merge(part)
        data.append(x)
    allx = np.concatenate(data)
    qs = np.array([0.1, 0.5, 0.9])
    got = acc.sketch.quantiles(qs)
    ranks = np.searchsorted(np.sort(allx), got) / len(allx)
    np.testing.assert_allclose(ranks, qs, atol=0.01)
    assert acc.count == len(allx)
    assert acc.mean == pytest.approx(allx.astype(np.float64).mean(), rel=1e-9)
    assert acc.var == pytest.approx(allx.astype(np.float64).var(), rel=1e-6)


def test_runner_defaults_to_fnapirunner_and_passes_others_through():
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    runner, _ = beam_runner.make_runner([])
    assert isinstance(runner, FnApiRunner)
    runner, opts = beam_runner.make_runner(["--direct_num_workers=2",
                                            "--direct_running_mode=multi_processing"])
    assert isinstance(runner, FnApiRunner)
    assert opts.get_all_options()["direct_num_workers"] == 2
    assert beam_runner.make_runner(["--runner=FlinkRunner"])[0] == "FlinkRunner"
    assert beam_runner.runner_name(["--runner", "SparkRunner"]) == "SparkRunner"


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "examples").glob("*.yaml")))
def test_example_specs_plan_cleanly(name):
    from pipeline.plan import plan
    from pipeline.spec import load_spec

    p = plan(load_spec(ROOT / "examples" / name))
    assert "ingest" in p.order
