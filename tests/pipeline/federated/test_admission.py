"""What a registered node can do to the aggregate, in one process (Flower's own strategies and
SecAgg+ workflow, Baton's wrappers): it cannot re-weight itself past the examples it declared at
setup, an unregistered node's reply weighs nothing, and under SecAgg+ (where one client's
weight travels inside the masked sum) a round whose weights exceed what its clients declared is
refused whole."""

from __future__ import annotations

import types

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import ArrayRecord, MetricRecord, RecordDict  # noqa: E402
from flwr.app.message.message import make_message  # noqa: E402
from flwr.app.metadata import Metadata  # noqa: E402

from baton.pipeline.federated.flower_server import flower_strategy, strategy_core  # noqa: E402
from baton.pipeline.federated.plan import Plan, RoundLog  # noqa: E402
from baton.strategies.federated_settings import FederatedSettings, SecureAggregation  # noqa: E402


def _reply(node: int, value: float, examples: int, kind: str = "train", **metrics):
    md = Metadata(run_id=1, message_id=f"m{node}", src_node_id=node, dst_node_id=0,
                  reply_to_message_id=f"i{node}", group_id="1", created_at=1.8e9, ttl=10,
                  message_type=kind)
    content = {"metrics": MetricRecord({"num-examples": examples, **metrics})}
    if kind == "train":
        content["arrays"] = ArrayRecord([np.full(4, value, np.float32)])
        content["metrics"]["train_loss"] = 0.5
    return make_message(metadata=md, content=RecordDict(content))


def _run(tmp_path, declared: dict[int, tuple[int, int]]):
    from baton.pipeline.federated.admission import Admission

    plan = Plan(clients=["a", "b"], out_dir=str(tmp_path), wire_path="", fn={},
                settings=FederatedSettings(clients=2, learning_rate=0.01, rounds=2,
                                           min_clients=2, round_timeout_s=30),
                nodes={"a": 1, "b": 2})
    admission = Admission(plan.nodes)
    for node, (train, eval_rows) in declared.items():
        admission.declare(node, train, eval_rows)
    run = types.SimpleNamespace(plan=plan, names={1: "a", 2: "b"}, admission=admission,
                                log=RoundLog(tmp_path / "rounds.jsonl"))
    return run, flower_strategy(plan, run)


def test_an_inflated_example_count_weighs_what_its_node_declared(tmp_path):
    """a declared 10 train rows and reports 1000 to pull the average to its model: it weighs
    10, as b does, so the new global model is the plain mean (not 1000/1010 of a's)."""
    _, strategy = _run(tmp_path, {1: (10, 5), 2: (10, 5)})
    arrays, _ = strategy.aggregate_train(1, [_reply(1, 1.0, 1000), _reply(2, 0.0, 10)])
    np.testing.assert_allclose(arrays.to_numpy_ndarrays()[0], np.full(4, 0.5))
    pending = strategy_core(strategy).pending
    assert pending["clients"] == ["a", "b"]
    assert {"bounded": "train", "client": "a", "node": 1, "reported": 1000.0,
            "declared": 10} in pending["admission"]


def test_an_honest_count_below_the_declared_one_keeps_its_weight(tmp_path):
    _, strategy = _run(tmp_path, {1: (30, 5), 2: (10, 5)})
    arrays, _ = strategy.aggregate_train(1, [_reply(1, 1.0, 30), _reply(2, 0.0, 10)])
    np.testing.assert_allclose(arrays.to_numpy_ndarrays()[0], np.full(4, 0.75))
    assert "admission" not in strategy_core(strategy).pending


def test_an_unregistered_nodes_reply_contributes_nothing(tmp_path):
    """Node 9 is not in the plan's registry: its update and its weight are dropped (and the
    round still has its two registered clients)."""
    _, strategy = _run(tmp_path, {1: (10, 5), 2: (10, 5)})
    arrays, _ = strategy.aggregate_train(1, [_reply(1, 1.0, 10), _reply(2, 0.0, 10),
                                             _reply(9, 100.0, 10_000)])
    np.testing.assert_allclose(arrays.to_numpy_ndarrays()[0], np.full(4, 0.5))
    pending = strategy_core(strategy).pending
    assert pending["refused"] == 1 and pending["clients"] == ["a", "b"]
    assert {"refused": "unregistered node", "node": 9} in pending["admission"]


def test_evaluation_is_weighed_by_the_declared_eval_rows(tmp_path):
    _, strategy = _run(tmp_path, {1: (10, 5), 2: (10, 5)})
    metrics = strategy.aggregate_evaluate(1, [
        _reply(1, 0, 5000, "evaluate", accuracy=1.0, loss=0.0),
        _reply(2, 0, 5, "evaluate", accuracy=0.0, loss=1.0)])
    assert metrics["accuracy"] == pytest.approx(0.5)


def test_a_node_cannot_raise_its_declaration_by_declaring_again():
    from baton.pipeline.federated.admission import Admission

    a = Admission({"a": 1})
    a.declare(1, 10, 5)
    a.declare(1, 10_000, 5_000)  # a second setup answer (a resumed run) never raises it
    assert a.limit(1, "train") == 10 and a.limit(1, "evaluate") == 5
    assert a.name(1, "anything") == "a" and not a.claims(1, "b")
    assert a.allowed([1, 2]) == [1]


def test_under_secure_aggregation_an_inflated_weight_refuses_the_round(tmp_path, monkeypatch):
    """SecAgg+ hides each client's weight inside its masked vector; the unmasked sum of the
    weights is visible. Client c declared 42 rows and weighs its update by 4200: the sum passes
    what the three declared, and the round leaves the global model as it was."""
    from flwr.supercore.task_identity import TaskIdentity

    from baton.pipeline.federated.admission import Admission

    from .test_secagg_inprocess import Core, _clients, secagg_round

    monkeypatch.setattr(TaskIdentity, "_run_id", 1)
    monkeypatch.setattr(TaskIdentity, "_node_id", 0)
    monkeypatch.setattr(TaskIdentity, "_task_id", 0)
    rng = np.random.default_rng(0)
    weights = [rng.normal(size=(4, 3)).astype("float32")]
    declared = {11: 134, 22: 102, 33: 42}

    def refused(reported):
        _, call = _clients(weights, reported)
        plan = Plan(clients=["a", "b", "c"], out_dir=str(tmp_path), wire_path="", fn={},
                    settings=FederatedSettings(
                        clients=3, min_clients=2,
                        secure_aggregation=SecureAggregation(num_shares=1.0)),
                    nodes={"a": 11, "b": 22, "c": 33})
        admission = Admission(plan.nodes)
        for node, rows in declared.items():
            admission.declare(node, rows, 10)
        run = types.SimpleNamespace(plan=plan, names={11: "a", 22: "b", 33: "c"},
                                    admission=admission, log=RoundLog(tmp_path / "r.jsonl"))
        core = Core()
        core.pending = {}
        _, mean, _ = secagg_round(run, core, weights, list(declared), call)
        assert mean.result is not None
        moved = not np.allclose(mean.result[0], weights[0])
        return moved, core.pending.get("admission", [])

    moved, events = refused(declared)  # honest: the round moves the model
    assert moved and events == []
    moved, events = refused({**declared, 33: 4200})
    assert not moved
    (event,) = events
    assert event["declared"] == 278.0 and event["weight_sum"] > 4000
    assert event["clients"] == ["a", "b", "c"]
