"""The federated stage on real Flower processes (a SuperLink, one SuperNode per client on
127.0.0.1): penguins split by island, a client SIGKILLed when round 2 starts, int8 updates
and downlink; the model and transform_graph go through evaluate unchanged. Then the privacy
path."""

from __future__ import annotations

import json

import pytest

from baton.errors import StageError
from baton.pipeline.context import RunOptions
from baton.pipeline.stages.federated import parse_fault
from baton.pipeline.testing import run_stage

pytestmark = [pytest.mark.slow, pytest.mark.multi_worker]


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    out, _ = run_stage("ingest", {}, {}, tmp_path_factory.mktemp("ingest"))
    return out["examples"]


def test_rounds_go_on_without_a_killed_client_and_the_model_evaluates(examples, tmp_path):
    cfg = {"clients": 3, "partition": {"by": "island"}, "rounds": 2, "min_clients": 2,
           "round_timeout_s": 90, "compression": "int8", "batch_size": 16,
           # wide enough (about 1 MB of float32) for the weights to show on the wire
           "model_params": {"hidden_units": [512, 512]}}
    out, metrics = run_stage("federated", cfg, {"examples": examples}, tmp_path,
                             options=RunOptions(inject_failure="client:2@round:2"))
    rounds = json.loads((out["model"] / "rounds.json").read_text())
    assert [r["round"] for r in rounds] == [1, 2]
    assert rounds[0]["clients"] == ["biscoe", "dream", "torgersen"]
    assert rounds[1]["clients"] == ["biscoe", "dream"]  # torgersen (client 2) was killed
    assert all(r["bytes_up"] > 0 and r["bytes_down"] > 0 for r in rounds)
    # the global model goes down as int8 deltas against each client's copy. Round 1's train
    # message refers to the initial model a client built at setup when its digest is the
    # server's (same seed), else it carries the float32 weights (the fallback); round 2's
    # refers to the copy round 1's evaluate delta left. Full weights in round 2 at most for
    # torgersen, killed before it answered its train message (no confirmed copy for it)
    d1, d2 = rounds[0]["downlink"], rounds[1]["downlink"]
    assert d1["delta"] == 3 and d1["full"] + d1["copy"] == 3, rounds
    assert d2["full"] <= 1 and d2["delta"] >= 2, rounds
    float32 = (out["model"] / "model.keras").stat().st_size  # the weights, and a little JSON
    per_client = [r["bytes_down"] / len(r["clients"]) for r in rounds]
    assert per_client[1] < 0.4 * float32, (per_client, float32)
    if d1["full"]:
        assert per_client[1] < 0.4 * per_client[0], (per_client, float32)
    else:
        assert per_client[0] < 0.4 * float32, (per_client, float32)
    assert metrics["rounds"] == 2 and 0.0 <= metrics["accuracy"] <= 1.0
    analysis = json.loads((out["transform_graph"] / "analysis.json").read_text())
    assert analysis["federated"] and analysis["analyzers"] == 7
    info = json.loads((out["model"] / "train_info.json").read_text())
    assert info["compression"] == "int8" and info["clients"] == ["biscoe", "dream", "torgersen"]
    ev, ev_metrics = run_stage("evaluate", {}, {"model": out["model"],
                                                "transform_graph": out["transform_graph"],
                                                "examples": examples}, tmp_path)
    assert 0.0 <= ev_metrics["accuracy"] <= 1.0


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


def test_bad_federated_settings_name_the_field(examples, tmp_path):
    with pytest.raises(Exception, match="min_clients \\(4\\) is above the number of clients"):
        run_stage("federated", {"clients": 3, "min_clients": 4}, {"examples": examples},
                  tmp_path / "1")
    with pytest.raises(StageError, match="no column 'isle'"):
        run_stage("federated", {"clients": 3, "partition": {"by": "isle"}},
                  {"examples": examples}, tmp_path / "2")
    with pytest.raises(StageError, match=r"federated.clients.a: no examples at"):
        run_stage("federated", {"clients": [{"name": "a", "examples": str(tmp_path / "none")},
                                            {"name": "b", "examples": str(examples)}]},
                  {}, tmp_path / "3")
    with pytest.raises(Exception, match="clip_norm"):
        run_stage("federated", {"clients": 2, "privacy": {"noise_multiplier": 1.0}},
                  {"examples": examples}, tmp_path / "4")
    with pytest.raises(ValueError, match="inject-failure names client 5"):
        parse_fault("client:5@round:1", 3)
    with pytest.raises(ValueError, match="must look like 'client:1@round:2'"):
        parse_fault("worker:1@step:3", 3)
