"""The global model keeps the model's dtypes between rounds. Flower 1.42's FedAdam computes its
step with numpy float64 scalars, which numpy 2 promotes float32 arrays by, and the DP wrapper's
noise is float64: left alone, the global model went down the wire at twice its float32 size
(seen as a `full` downlink message of 4.4 MB for a 2.2 MB model) and was checkpointed so."""

from __future__ import annotations

import types

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import ArrayRecord, ConfigRecord, MetricRecord, RecordDict  # noqa: E402
from flwr.app.message.message import make_message  # noqa: E402
from flwr.app.metadata import Metadata  # noqa: E402

from baton.pipeline.federated.admission import Admission  # noqa: E402
from baton.pipeline.federated.flower_server import flower_strategy, strategy_core  # noqa: E402
from baton.pipeline.federated.plan import Plan, RoundLog  # noqa: E402
from baton.strategies.federated_settings import FederatedSettings, Privacy  # noqa: E402


class _Grid:
    def get_node_ids(self):
        return [1, 2]


def _reply(node: int, value: float):
    md = Metadata(run_id=1, message_id=f"m{node}", src_node_id=node, dst_node_id=0,
                  reply_to_message_id=f"i{node}", group_id="1", created_at=1.8e9, ttl=10,
                  message_type="train")
    content = RecordDict({"arrays": ArrayRecord([np.full(4, value, np.float32),
                                                 np.arange(3, dtype=np.int64)]),
                          "metrics": MetricRecord({"num-examples": 10, "train_loss": 0.5})})
    return make_message(metadata=md, content=content)


@pytest.mark.parametrize("algorithm", ["fedadam", "fedavg"])
@pytest.mark.parametrize("privacy", [{}, {"clip_norm": 10.0, "noise_multiplier": 0.5}])
def test_the_global_model_sent_and_kept_is_in_the_models_dtypes(tmp_path, monkeypatch,
                                                               algorithm, privacy):
    from flwr.supercore.task_identity import TaskIdentity

    monkeypatch.setattr(TaskIdentity, "_run_id", 1)  # what a ServerApp process has set
    monkeypatch.setattr(TaskIdentity, "_node_id", 0)
    monkeypatch.setattr(TaskIdentity, "_task_id", 1)
    plan = Plan(clients=["a", "b"], out_dir=str(tmp_path), wire_path="", fn={},
                settings=FederatedSettings(clients=2, learning_rate=0.01, rounds=2,
                                           min_clients=2, round_timeout_s=30,
                                           algorithm=algorithm,
                                           privacy=Privacy(**privacy) if privacy else None))
    run = types.SimpleNamespace(plan=plan, admission=Admission(), names={1: "a", 2: "b"},
                                log=RoundLog(tmp_path / "rounds.jsonl"))
    strategy = flower_strategy(plan, run)
    strategy_core(strategy).dtypes = [np.dtype(np.float32), np.dtype(np.int64)]
    initial = ArrayRecord([np.zeros(4, np.float32), np.arange(3, dtype=np.int64)])
    strategy.configure_train(1, initial, ConfigRecord(), _Grid())
    arrays, _ = strategy.aggregate_train(1, [_reply(1, 1.0), _reply(2, 2.0)])
    new = arrays.to_numpy_ndarrays()
    assert [a.dtype for a in new] == [np.float32, np.int64]
    assert np.all(new[0] != 0.0)  # a step was taken (FedAdam's or the mean's, with noise)
    # what the server sends next: a round's arrays as it receives them from the strategy loop,
    # even if a wrapper outside the recording strategy handed them over in float64
    wide = ArrayRecord([new[0].astype(np.float64), new[1]])
    for msg in strategy.configure_train(2, wide, ConfigRecord(), _Grid()):
        sent = msg.content["arrays"].to_numpy_ndarrays()
        assert [a.dtype for a in sent] == [np.float32, np.int64]
    for msg in strategy.configure_evaluate(2, wide, ConfigRecord(), _Grid()):
        sent = msg.content["arrays"].to_numpy_ndarrays()
        assert [a.dtype for a in sent] == [np.float32, np.int64]
