"""The federated stage on real Flower processes, the server side of faults: the SuperLink and
its ServerApp SIGKILLed at round 2 and restarted, with client-level DP, FedProx, SecAgg+ and the
edge model in the same run."""

from __future__ import annotations

import json

import pytest

from baton.pipeline.context import RunOptions
from baton.pipeline.testing import run_stage

pytestmark = [pytest.mark.slow, pytest.mark.multi_worker]


def test_a_restarted_server_resumes_with_privacy_and_secure_aggregation_and_the_edge_model(
        examples, tmp_path):
    """The SuperLink and its ServerApp are SIGKILLed when round 2 starts: the new run resumes
    after round 1 (no round lost or repeated); epsilon composes over both rounds; every round's
    update arrives through SecAgg+ (the server receives masked vectors only; that their sum is
    FedAvg's is test_secagg_inprocess's); the edge model is measured on the clients."""
    cfg = {"clients": 2, "partition": {"iid": True}, "rounds": 2, "min_clients": 2,
           "round_timeout_s": 90, "algorithm": "fedprox", "batch_size": 32, "edge": "float",
           "privacy": {"clip_norm": 1.0, "noise_multiplier": 1.0}, "secure_aggregation": True,
           "model_params": {"hidden_units": [8]}}
    out, metrics = run_stage("federated", cfg, {"examples": examples}, tmp_path,
                             options=RunOptions(inject_failure="server@round:2"))
    from dp_accounting import dp_event, rdp

    def eps(rounds):
        acc = rdp.RdpAccountant()
        acc.compose(dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(1.0), rounds))
        return acc.get_epsilon(1e-5)

    assert metrics["server_restarts"] == 1
    rounds = json.loads((out["model"] / "rounds.json").read_text())
    assert [r["round"] for r in rounds] == [1, 2]
    assert [r["epsilon"] for r in rounds] == pytest.approx([eps(1), eps(2)], rel=1e-6)
    assert metrics["epsilon"] == pytest.approx(eps(2), rel=1e-6)
    assert all(r["clients"] == ["client-0", "client-1"] for r in rounds)
    for r in rounds:  # two masked vectors came in; not one array the server could read
        sa = r["secure_aggregation"]
        assert sa["masked_vectors"] == 2 and sa["unmasked_arrays_seen"] == 0, sa
        assert set(sa["stage_seconds"]) == {"setup", "share_keys", "collect_masked_vectors",
                                            "unmask"}
        assert r["bytes_up"] > 0 and r["bytes_down"] > 0 and "accuracy" in r
    assert metrics["secagg_seconds_per_round"] > 0
    edge = json.loads((out["model"] / "edge.json").read_text())
    assert set(edge["clients"]) == {"client-0", "client-1"}
    for r in edge["clients"].values():  # float TFLite: the same predictions as the cloud model
        assert r["edge_accuracy"] == pytest.approx(r["cloud_accuracy"], abs=0.02)
    assert (out["model"] / "model.tflite").stat().st_size == edge["size_bytes"]
