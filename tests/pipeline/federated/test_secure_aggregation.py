"""Secure aggregation (Flower's SecAgg+) in the federated stage: the settings it cannot run
with are refused before a stage starts (exit 2, naming the field). A real run (SuperLink and
SuperNodes on 127.0.0.1) with it, restarted server included, is test_federated_restart's; the
sum against FedAvg's, and dropouts, are test_secagg_inprocess's."""

from __future__ import annotations

import re

import pytest

from baton.configs import build_config
from baton.errors import ConfigError
from baton.pipeline.stages.federated import Config, SecureAggregation


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


@pytest.mark.parametrize(("settings", "fault", "message"), [
    ({}, "client:1@round:7", r"round 7; the stage runs rounds 1..5 \(config.rounds\)"),
    ({"secure_aggregation": True}, "client:1@round:1:slow", "SecAgg"),
    ({}, "server@round:2:slow", "'client:1@round:2:slow'"),
])
def test_a_fault_the_run_cannot_rehearse_is_refused_before_any_stage(settings, fault, message):
    from types import SimpleNamespace

    from baton.pipeline.stages.federated import check_options

    problems = check_options(_config(rounds=5, **settings),
                             SimpleNamespace(inject_failure=fault, superlink=None), None, None)
    assert len(problems) == 1 and re.search(message, problems[0]), problems
