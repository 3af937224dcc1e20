"""Client-level DP with fewer players: Flower 1.42's DP wrapper skips a round's aggregation when
any reply is an error (what a killed or late client's message becomes); Baton's wrapper
(pipeline.federated.carrying_on.CarryingOn) aggregates the clients that answered, counts the failure, keeps
`min_clients`, and scales the noise to the clients that answered."""

from __future__ import annotations

import types

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import ArrayRecord, Error, MetricRecord, RecordDict  # noqa: E402
from flwr.app.message.message import make_message  # noqa: E402
from flwr.app.metadata import Metadata  # noqa: E402

from baton.pipeline.federated.admission import Admission  # noqa: E402
from baton.pipeline.federated.flower_server import flower_strategy, strategy_core  # noqa: E402
from baton.pipeline.federated.plan import Plan, RoundLog  # noqa: E402
from baton.strategies.federated_settings import FederatedSettings, Privacy  # noqa: E402


def _reply(node: int, error: bool = False):
    md = Metadata(run_id=1, message_id=f"m{node}", src_node_id=node, dst_node_id=0,
                  reply_to_message_id=f"i{node}", group_id="1", created_at=1.8e9, ttl=10,
                  message_type="train")
    if error:
        return make_message(metadata=md, error=Error(code=3, reason="message expired"))
    content = RecordDict({"arrays": ArrayRecord([np.full(4, float(node), np.float32)]),
                          "metrics": MetricRecord({"num-examples": 10, "train_loss": 0.5})})
    return make_message(metadata=md, content=content)


def _strategy(tmp_path, privacy, min_clients=2):
    plan = Plan(clients=["a", "b", "c"], out_dir=str(tmp_path), wire_path="", fn={},
                settings=FederatedSettings(clients=3, learning_rate=0.01, rounds=2,
                                           min_clients=min_clients, round_timeout_s=30,
                                           privacy=Privacy(**privacy) if privacy else None))
    run = types.SimpleNamespace(plan=plan, admission=Admission(), names={1: "a", 2: "b", 3: "c"},
                                log=RoundLog(tmp_path / "rounds.jsonl"))
    strategy = flower_strategy(plan, run)
    if privacy:
        strategy.current_arrays = ArrayRecord([np.zeros(4, np.float32)])
    return strategy


def test_with_privacy_a_failed_client_leaves_the_round_to_the_others(tmp_path, monkeypatch):
    from flwr.serverapp.strategy import dp_fixed_clipping

    noise = []
    monkeypatch.setattr(dp_fixed_clipping, "add_gaussian_noise_inplace",
                        lambda arrays, std: noise.append(std))
    strategy = _strategy(tmp_path, {"clip_norm": 1.0, "noise_multiplier": 0.8})
    arrays, _ = strategy.aggregate_train(1, [_reply(1), _reply(2), _reply(3, error=True)])
    assert arrays is not None  # Flower's own wrapper returns None here and keeps the old model
    np.testing.assert_allclose(arrays.to_numpy_ndarrays()[0], np.full(4, 1.5))  # mean of a, b
    pending = strategy_core(strategy).pending
    assert pending["clients"] == ["a", "b"] and pending["failed"] == 1
    assert noise == [pytest.approx(0.8 * 1.0 / 2)]  # scaled to the 2 who answered, not 3
    assert strategy.num_sampled_clients == 3  # restored for the next round's accounting


def test_with_privacy_too_few_answers_still_stop_the_run(tmp_path):
    strategy = _strategy(tmp_path, {"clip_norm": 1.0, "noise_multiplier": 0.8}, min_clients=3)
    with pytest.raises(RuntimeError, match="2 clients trained .*min_clients is 3"):
        strategy.aggregate_train(1, [_reply(1), _reply(2), _reply(3, error=True)])


def test_without_privacy_the_same_failure_is_counted_the_same_way(tmp_path):
    strategy = _strategy(tmp_path, {})
    arrays, _ = strategy.aggregate_train(1, [_reply(1), _reply(2), _reply(3, error=True)])
    np.testing.assert_allclose(arrays.to_numpy_ndarrays()[0], np.full(4, 1.5))
    pending = strategy_core(strategy).pending
    assert pending["clients"] == ["a", "b"] and pending["failed"] == 1
