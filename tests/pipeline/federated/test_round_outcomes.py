"""A round with too few trained clients says what became of each client it asked, and a round
that goes on records who did not count and why: the only clue a user (or CI) has when a round
fails is this message, since the SuperNodes' logs live elsewhere."""

from __future__ import annotations

import types

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import ArrayRecord, MetricRecord, RecordDict  # noqa: E402
from flwr.app.error import Error  # noqa: E402
from flwr.app.message.message import make_message  # noqa: E402
from flwr.app.metadata import Metadata  # noqa: E402
from flwr.common.constant import SUPERLINK_NODE_ID, ErrorCode  # noqa: E402

from baton.pipeline.federated.admission import Admission  # noqa: E402
from baton.pipeline.federated.flower_server import flower_strategy, strategy_core  # noqa: E402
from baton.pipeline.federated.plan import Plan, RoundLog  # noqa: E402
from baton.strategies.federated_settings import FederatedSettings  # noqa: E402

NAMES = {1: "a", 2: "b", 3: "c", 4: "d"}


def _metadata(node: int, src: int | None = None) -> Metadata:
    return Metadata(run_id=1, message_id=f"m{node}", src_node_id=node if src is None else src,
                    dst_node_id=0,
                    reply_to_message_id=f"i{node}", group_id="1", created_at=1.8e9, ttl=10,
                    message_type="train")


def _trained(node: int) -> object:
    content = RecordDict({"arrays": ArrayRecord([np.full(4, 1.0, np.float32)]),
                          "metrics": MetricRecord({"num-examples": 10, "train_loss": 0.5})})
    return make_message(metadata=_metadata(node), content=content)


def _error(node: int, code: int, reason: str, src: int | None = None) -> object:
    """The node's error reply; with `src`, one another party made (the SuperLink's own, for a
    node gone offline, comes from the SuperLink's node id and names the message it answers)."""
    return make_message(metadata=_metadata(node, src), error=Error(code=code, reason=reason))


def _strategy(tmp_path, min_clients: int):
    plan = Plan(clients=list(NAMES.values()), out_dir=str(tmp_path), wire_path="", fn={},
                settings=FederatedSettings(clients=4, learning_rate=0.01, rounds=2,
                                           min_clients=min_clients, round_timeout_s=30),
                nodes={name: node for node, name in NAMES.items()})
    admission = Admission(plan.nodes)
    for node in (1, 2, 3):  # d (4) declared nothing at setup: its update is refused
        admission.declare(node, 10, 5)
    run = types.SimpleNamespace(plan=plan, names=dict(NAMES), admission=admission,
                                log=RoundLog(tmp_path / "rounds.jsonl"))
    strategy = flower_strategy(plan, run)
    core = strategy_core(strategy)
    # as configure_train keeps them: the round's train messages, their ids set by the push
    core._asked = [types.SimpleNamespace(metadata=types.SimpleNamespace(
        message_id=f"i{node}", dst_node_id=node)) for node in NAMES]
    core.pending["sampled"] = list(NAMES.values())
    return strategy, core


def test_too_few_trained_names_each_clients_fate(tmp_path):
    strategy, _ = _strategy(tmp_path, min_clients=2)
    replies = [_trained(1), _error(2, ErrorCode.NODE_UNAVAILABLE, "Node Unavailable",
                                   src=SUPERLINK_NODE_ID), _trained(4)]
    with pytest.raises(RuntimeError) as err:
        strategy.aggregate_train(1, replies)
    text = str(err.value)
    assert text.startswith("round 1: 1 clients trained (of 4 asked) within round_timeout_s=30;")
    assert text.endswith(f"a: trained; b: error {ErrorCode.NODE_UNAVAILABLE} (Node Unavailable); "
                         "c: no reply; d: refused (admission)"), text


def test_a_round_that_goes_on_records_who_did_not_count(tmp_path):
    strategy, core = _strategy(tmp_path, min_clients=1)
    strategy.aggregate_train(1, [_trained(1), _error(3, ErrorCode.CLIENT_APP_RAISED_EXCEPTION,
                                                     "ValueError: x" * 100)])
    missing = core.pending["missing"]
    assert list(missing) == ["b", "c", "d"]
    assert missing["b"] == "no reply" and missing["d"] == "no reply"
    assert missing["c"].startswith(f"error {ErrorCode.CLIENT_APP_RAISED_EXCEPTION} (ValueError")
    assert len(missing["c"]) < 220  # a long reason is cut, the record stays one line
    assert core.pending["clients"] == ["a"]


def test_a_round_where_everyone_trained_records_nothing_missing(tmp_path):
    strategy, core = _strategy(tmp_path, min_clients=2)
    core.run.admission.declare(4, 10, 5)
    strategy.aggregate_train(1, [_trained(n) for n in NAMES])
    assert "missing" not in core.pending and len(core.pending["clients"]) == 4


def test_a_failed_runs_message_carries_each_supernodes_clues(tmp_path):
    """follow.node_clues: the lines of each local SuperNode's log that explain a lost message
    (its host's errors, Flower's failed sends, the launcher's restarts), the rest left out,
    start-up warnings included."""
    from baton.pipeline.federated.follow import node_clues

    class Node:
        def __init__(self, text: str) -> None:
            self.log = tmp_path / "node.log"
            self.text = text

        def tail(self, n: int) -> str:
            return self.text[-n:]

    fed = types.SimpleNamespace(nodes={
        "b": Node("INFO : Received successfully\n"
                  "2026 baton-host ERROR ClientApp raised\nTraceback (most recent call last):\n"
                  "ERROR : Failed to send message m1: timed out\n"),
        # the warnings every SuperNode prints at its start explain nothing
        "a": Node("WARNING: All log messages before absl::InitializeLog() is called are "
                  "written to STDERR\nWARNING :   EXPERIMENTAL: SuperExec authentication is "
                  "experimental and may change in future releases.\nINFO : all well\n")})
    clues = node_clues(fed)
    assert clues.startswith("; SuperNode b (")
    assert "baton-host ERROR ClientApp raised | Traceback" in clues
    assert "Failed to send message m1: timed out" in clues and "all well" not in clues
    assert "SuperNode a" not in clues and "absl" not in clues, clues
    assert node_clues(types.SimpleNamespace()) == ""  # nodes elsewhere (Kubernetes)
