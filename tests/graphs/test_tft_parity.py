"""baton.tft against tensorflow-transform 1.21 itself: one preprocessing_fn, the same rows, the
peer on its own path in its own venv (`.venv-tft`, made by `make bench`). Skipped when that
venv is absent; bench/data runs the comparison always."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

import baton.tft as baton_tft
from baton.graphs.tft import engine as tft_engine
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
    failures, differ = fn.compare(ours, peer)
    assert not failures, failures
    for k, share in differ.items():
        print(f"{k}: {share:.4%} of bucket ids differ")
