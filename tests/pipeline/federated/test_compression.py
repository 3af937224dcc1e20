"""Update compression: bytes, reconstruction error, and error feedback over rounds."""

from __future__ import annotations

import numpy as np
import pytest

from baton.pipeline.federated import compression as C


def _update(seed=0):
    g = np.random.default_rng(seed)
    return [g.normal(0, 0.05, (64, 32)).astype(np.float32), g.normal(0, 1, (32,)).astype(np.float32),
            np.zeros((3, 3), np.float32)]


@pytest.mark.parametrize("method,ratio,tol", [("none", 1.0, 0.0), ("fp16", 2.0, 1e-3),
                                              ("int8", 3.5, 0.01)])
def test_each_method_cuts_the_bytes_and_reconstructs_within_its_step(method, ratio, tol):
    u = _update()
    sent, _ = C.encode(u, method)
    back = C.decode(sent, len(u))
    full = sum(a.nbytes for a in u)
    assert full / C.payload_bytes(sent) >= ratio
    for a, b in zip(u, back, strict=True):
        step = (a.max() - a.min()) / 255 if method == "int8" else 0
        assert np.abs(a - b).max() <= max(tol * np.abs(a).max(), step / 2 + 1e-7)


def test_error_feedback_keeps_the_sum_of_sent_updates_close_to_the_sum_of_true_ones():
    rounds = [_update(seed) for seed in range(20)]
    residual = None
    sent_total = [np.zeros_like(a) for a in rounds[0]]
    plain_total = [np.zeros_like(a) for a in rounds[0]]
    for u in rounds:
        sent, residual = C.encode(u, "int8", residual)
        sent_total = [s + d for s, d in zip(sent_total, C.decode(sent, len(u)), strict=True)]
        plain, _ = C.encode(u, "int8")
        plain_total = [s + d for s, d in zip(plain_total, C.decode(plain, len(u)), strict=True)]
    true_total = [sum(r[i] for r in rounds) for i in range(len(rounds[0]))]
    ef = sum(float(np.abs(t - s).sum()) for t, s in zip(true_total, sent_total, strict=True))
    no_ef = sum(float(np.abs(t - s).sum()) for t, s in zip(true_total, plain_total, strict=True))
    assert ef < no_ef / 3  # the residual is carried, not lost every round


def test_a_non_float_weight_is_named():
    assert C.check([np.zeros(3, np.float32), np.zeros(2, np.int64)], "int8", ["dense/kernel",
                                                                             "step"]) == [
        "compression 'int8' applies to float weights; weight step is int64"]
    assert C.check([np.zeros(2, np.int64)], "none") == []
    with pytest.raises(ValueError, match="compression must be one of"):
        C.encode(_update(), "int4")
