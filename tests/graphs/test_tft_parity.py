"""baton.tft against tensorflow-transform 1.21 itself: one preprocessing_fn, the same rows, the
peer on its own path in its own venv (`.venv-tft`, made by `make bench`). Skipped when that
venv is absent; bench/data runs the comparison always."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

import baton.tft as baton_tft
from baton.graphs import tft_engine
from tests.graphs import tft_parity_fn as fn

ROOT = Path(__file__).resolve().parents[2]
PEER = ROOT / ".venv-tft" / "bin" / "python"


@pytest.mark.slow
@pytest.mark.skipif(not PEER.is_file(), reason="no .venv-tft (make bench creates it)")
def test_same_outputs_as_tensorflow_transform(tmp_path):
    import tensorflow as tf

    out = tmp_path / "peer.npz"
    res = subprocess.run([str(PEER), str(ROOT / "tests" / "graphs" / "tft_parity_peer.py"),
                          str(out)], capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-4000:]
    peer = dict(np.load(out))
    data = fn.rows()
    raw = [(k, "string" if v.dtype == object else "float32", ()) for k, v in data.items()]
    specs = tft_engine.raw_specs(raw)
    preprocessing_fn = fn.make(baton_tft, tf)
    resolved = tft_engine.analyze(preprocessing_fn, specs, lambda: [data])
    _, concrete = tft_engine.transform_fn(preprocessing_fn, specs, resolved)
    ours = tft_engine.apply(concrete, data)
    assert sorted(ours) == sorted(peer)
    np.testing.assert_array_equal(ours["row_out"], peer["row_out"])
    for k in ("a_z", "b_z", "c_z", "d_z", "a_01", "b_mm", "nested"):  # scalings
        np.testing.assert_allclose(ours[k], peer[k], rtol=1e-5, atol=1e-6, err_msg=k)
    for k in ("a_mean", "a_var", "c_min", "c_max", "d_sum", "d_size"):  # analyzer values
        np.testing.assert_allclose(ours[k], peer[k], rtol=1e-6, err_msg=k)
    assert len(np.unique(peer["text_ids"])) > 40  # a real vocabulary, not all OOV
    for k in ("cat1_id", "cat2_id", "cat3_id", "cat2_top", "cat1_h", "text_ids"):
        np.testing.assert_array_equal(ours[k], peer[k], err_msg=k)  # vocabularies, hashes
    for k, buckets in (("c_b", 8), ("d_b", 4)):  # within tf.Transform's quantile epsilon
        differ = float(np.mean(ours[k] != peer[k]))
        assert differ <= min(1.0 / buckets, 0.01) * 2, (k, differ)
        print(f"{k}: {differ:.4%} of bucket ids differ")
