"""Secure aggregation (Flower's SecAgg+) in the federated stage: the settings it cannot run
with are refused before a stage starts (exit 2, naming the field), and a real run (SuperLink
and three SuperNodes on 127.0.0.1, penguins by island) trains a round in which the server
receives masked vectors only, and the rounds keep their records (clients, loss, accuracy,
bytes on the wire); test_secagg_inprocess checks the sum against FedAvg's."""

from __future__ import annotations

import json

import pytest

from baton.errors import ConfigError
from baton.pipeline.configs import build_config
from baton.pipeline.stages.federated import Config, SecureAggregation
from baton.pipeline.testing import run_stage


def _config(**kw):
    return build_config(Config, {"clients": 3, **kw}, "stages.fl.config")


def test_secure_aggregation_settings():
    assert _config().secagg is None
    assert _config(secure_aggregation=True).secagg == SecureAggregation()
    sa = _config(secure_aggregation={"num_shares": 3, "reconstruction_threshold": 2}).secagg
    assert sa is not None and (sa.num_shares, sa.reconstruction_threshold) == (3, 2)
    # privacy and fedprox compose: clipping is the clients', noise goes on the unmasked mean
    assert _config(secure_aggregation=True, algorithm="fedprox",
                   privacy={"clip_norm": 1.0}).secagg is not None


@pytest.mark.parametrize(("settings", "message"), [
    ({"compression": "int8"}, "compression='int8'"),
    ({"compression": "fp16"}, "compression='fp16'"),
    ({"algorithm": "fedadam"}, "algorithm='fedadam'"),
    ({"clients": 1, "min_clients": 1}, "clients=1, min_clients=1"),
    ({"min_clients": 1}, "min_clients=1"),
    ({"secure_aggregation": {"num_shares": 4}}, "num_shares \\(4\\) is above the number"),
    ({"secure_aggregation": {"num_shares": 2}}, "num_shares as a count must be at least 3"),
    ({"secure_aggregation": {"reconstruction_threshold": 1.5}}, "in \\(0, 1\\]. Received: 1.5"),
    ({"secure_aggregation": {"num_shares": 3, "reconstruction_threshold": 3}},
     "below num_shares. Received: 3"),
    ({"secure_aggregation": {"quantization_range": 2**31 - 1}}, "quantization_range=2147483647"),
    ({"secure_aggregation": "yes"}, "expected bool or SecureAggregation"),
])
def test_what_secure_aggregation_does_not_run_with_is_a_config_error(settings, message):
    settings = {"secure_aggregation": True, **settings}
    with pytest.raises(ConfigError, match=message) as info:
        _config(**settings)
    assert "stages.fl.config" in str(info.value)


def test_a_bad_secure_aggregation_spec_exits_2_before_any_stage(tmp_path):
    from baton.errors import SpecError
    from baton.pipeline.plan import plan
    from baton.pipeline.spec import load_spec

    spec = tmp_path / "spec.yaml"
    spec.write_text("pipeline: p\nstages:\n  - {name: ingest, type: ingest}\n"
                    "  - name: fl\n    type: federated\n    inputs: {examples: ingest.examples}\n"
                    "    config: {clients: 3, secure_aggregation: true, compression: int8}\n")
    with pytest.raises(SpecError) as info:
        plan(load_spec(spec))
    assert info.value.exit_code == 2
    assert "secure_aggregation" in str(info.value) and "compression='int8'" in str(info.value)


@pytest.mark.slow
@pytest.mark.multi_worker
# four train messages a round, each a fresh ClientApp process: 165-200 s a round at a load
# average of 12 on 2 cores, past the suite's 600 s
@pytest.mark.timeout(900)
def test_the_server_sees_only_the_sum_and_the_round_records_stay(tmp_path):
    """That the sum is FedAvg's, through Flower's own protocol code, is test_secagg_inprocess's
    (a second cluster for a plain run to compare with costs minutes)."""
    examples, _ = run_stage("ingest", {}, {}, tmp_path / "ingest")
    examples = examples["examples"]
    cfg = {"clients": 3, "partition": {"by": "island"}, "rounds": 1, "min_clients": 2,
           "round_timeout_s": 90, "batch_size": 16, "model_params": {"hidden_units": [8]}}
    secure, metrics = run_stage("federated", {**cfg, "secure_aggregation": True},
                                {"examples": examples}, tmp_path / "secure")
    rounds = json.loads((secure["model"] / "rounds.json").read_text())
    assert [r["round"] for r in rounds] == [1]
    for r in rounds:
        assert r["clients"] == ["biscoe", "dream", "torgersen"]
        sa = r["secure_aggregation"]
        # three masked vectors came in; not one array the server could read
        assert sa["masked_vectors"] == 3 and sa["unmasked_arrays_seen"] == 0, sa
        assert (sa["num_shares"], sa["threshold"]) == (3, 2)
        assert set(sa["stage_seconds"]) == {"setup", "share_keys", "collect_masked_vectors",
                                            "unmask"}
        assert r["bytes_up"] > 0 and r["bytes_down"] > 0 and "accuracy" in r
    assert metrics["rounds"] == 1 and 0.3 <= metrics["accuracy"] <= 1.0
    assert metrics["secagg_seconds_per_round"] > 0
    info = json.loads((secure["model"] / "train_info.json").read_text())
    assert info["secure_aggregation"]["num_shares"] == 1.0
