"""The federated client's loop decides what a classifier outputs as the train stage does
(graphs.model_outputs, issue 35 finding 1): a model ending in a softmax is trained and evaluated
on probabilities (its loss without from_logits), and the clients' decisions make the run's. A
non-finite loss is traced to its first cause on the client and stops the run on the server,
naming the round and the client (issue 35 finding 2)."""

from __future__ import annotations

import types

import numpy as np
import pytest

from baton.errors import StageError
from baton.pipeline.federated.local import ClientData, FnSpec, Local, agreed_outputs
from baton.pipeline.federated.server import federated_transform
from baton.strategies.federated_settings import FederatedSettings  # noqa: E402
from tests.pipeline.dataplane.helpers import penguins
from tests.pipeline.federated.test_local import PLAN, _ask

MODELS = '''
import keras


def _features(spec):
    parts = [keras.layers.Flatten()(spec.inputs[f.name]) for f in spec.feature_spec.numeric]
    parts += [keras.layers.Flatten()(keras.layers.Embedding(f.vocab_size, 2)(spec.inputs[f.name]))
              for f in spec.feature_spec.categorical]
    return keras.layers.Concatenate()(parts)


def _ending_in(activation):
    def build(spec):
        d = keras.layers.Dense(8, activation="relu")(_features(spec))
        head = keras.layers.Dense(spec.num_classes, activation=activation)
        return keras.Model(spec.inputs, head(d))
    return build


softmax, sigmoid = _ending_in("softmax"), _ending_in("sigmoid")


class Normalized(keras.layers.Layer):
    """Rows that sum to 1 inside a custom layer: found from the rows, not the structure."""

    def call(self, x):
        return keras.ops.softmax(x, axis=-1)


def custom(spec):
    d = keras.layers.Dense(spec.num_classes)(_features(spec))
    return keras.Model(spec.inputs, Normalized()(d))


class Passthrough(keras.layers.Layer):
    def call(self, x):
        return x


def zero_start(spec):
    """Logits whose rows sum to 1 before training only, behind a custom layer."""
    k = spec.num_classes
    d = keras.layers.Dense(k, kernel_initializer="zeros",
                           bias_initializer=keras.initializers.Constant(1.0 / k))(_features(spec))
    return keras.Model(spec.inputs, Passthrough()(d))
'''


@pytest.fixture(scope="module")
def clients(tmp_path_factory):
    from baton.pipeline.dataplane.partition import Partition, client_names, split
    from baton.pipeline.dataplane.records.schema_file import ExamplesSchema

    art = penguins(tmp_path_factory.mktemp("penguins"))
    root = tmp_path_factory.mktemp("clients")
    names = client_names(Partition(by="island"), ExamplesSchema.load(art["examples"]),
                         art["examples"], None)
    split(art["examples"], [root / n for n in names], Partition(by="island"))
    datas = {n: ClientData(root / n) for n in names}
    code = tmp_path_factory.mktemp("code")
    (code / "fed_models.py").write_text(MODELS)
    return datas, federated_transform(FnSpec(columns=PLAN), _ask(datas)), code


def _local(clients, model, client="biscoe"):
    datas, fed, code = clients
    return Local(FnSpec(columns=PLAN), fed.resolved, fed.label, datas[client],
                 FederatedSettings(model=model, batch_size=16), str(code))


def test_a_softmax_model_is_trained_and_evaluated_on_its_probabilities(clients):
    import keras

    local = _local(clients, "fed_models:softmax")
    assert local.outputs.probabilities and "applies a softmax" in local.outputs.reason
    w1, _, train_loss = local.train(local.model.get_weights(), epochs=3)
    got = local.evaluate(w1)
    feats, y = local.splits["eval"]
    probs = np.asarray(local.model(feats, training=False))
    want = keras.losses.SparseCategoricalCrossentropy(from_logits=False)(y, probs)
    as_logits = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(y, probs)
    assert got["loss"] == pytest.approx(float(want), rel=1e-4)  # cross-entropy of probabilities
    assert abs(float(as_logits) - float(want)) > 0.05  # not the softmax of the probabilities
    assert np.isfinite(train_loss) and local.nonfinite is None


def test_logits_stay_logits_and_a_sigmoid_over_classes_is_refused(clients):
    assert not _local(clients, "mlp").outputs.probabilities
    with pytest.raises(StageError, match=r"applies a sigmoid to 3 classes.*activation='softmax'"):
        _local(clients, "fed_models:sigmoid")


def test_probabilities_found_from_the_rows_are_confirmed_after_training(clients):
    local = _local(clients, "fed_models:custom")
    assert local.outputs.from_rows and local.outputs.probabilities
    w1, _, _ = local.train(local.model.get_weights(), epochs=2)
    assert local.confirm(w1) is None
    logits = _local(clients, "fed_models:zero_start")
    assert logits.outputs.from_rows and logits.outputs.probabilities
    w1, _, _ = logits.train(logits.model.get_weights(), epochs=3)
    assert "after training they do not" in logits.confirm(w1) and "it outputs logits" in \
        logits.confirm(w1)


def test_the_clients_decisions_make_the_runs_or_disagree_by_name():
    p = {"kind": "probabilities", "reason": "the last layer 'd' applies a softmax"}
    out = agreed_outputs({"a": p, "b": p})
    assert out.probabilities and out.to_dict() == p
    with pytest.raises(StageError, match=r"disagree.*logits for 'a'; probabilities for 'b'"):
        agreed_outputs({"a": {"kind": "logits", "reason": "r"}, "b": p})


def test_a_nan_feature_is_named_as_the_cause_of_a_clients_nan_loss(clients):
    local = _local(clients, "fed_models:softmax", "dream")
    feats, y = local.splits["train"]
    feats["bill_length_mm"][3] = np.nan
    w1, _, loss = local.train(local.model.get_weights(), epochs=1)
    # the NaN reaches the loss, or (a fused MatMul+Relu kernel turns it into 0 on the way
    # forward: graphs.nonfinite) only the weights, on the way back
    assert np.isnan(loss) or not all(np.isfinite(w).all() for w in w1)
    assert local.nonfinite.startswith("feature 'bill_length_mm' is NaN in 1 of the 16 train "
                                      "rows of batch 1 (first at train row 3)"), local.nonfinite


def _reply(node: int, loss: float, kind: str = "train", cause: str | None = None):
    from flwr.app import ArrayRecord, ConfigRecord, MetricRecord, RecordDict
    from flwr.app.message.message import make_message
    from flwr.app.metadata import Metadata

    md = Metadata(run_id=1, message_id=f"m{node}", src_node_id=node, dst_node_id=0,
                  reply_to_message_id=f"i{node}", group_id="1", created_at=1.8e9, ttl=10,
                  message_type=kind)
    key = "train_loss" if kind == "train" else "loss"
    content = RecordDict({"metrics": MetricRecord({"num-examples": 10, key: loss})})
    if kind == "train":
        content["arrays"] = ArrayRecord([np.full(4, 1.0, np.float32)])
    if cause is not None:
        content["baton-nonfinite"] = ConfigRecord({"cause": cause})
    return make_message(metadata=md, content=content)


@pytest.fixture
def strategy(tmp_path, monkeypatch):
    from flwr.supercore.task_identity import TaskIdentity

    from baton.pipeline.federated.admission import Admission
    from baton.pipeline.federated.flower_server import flower_strategy, strategy_core
    from baton.pipeline.federated.plan import Plan, RoundLog

    monkeypatch.setattr(TaskIdentity, "_run_id", 1)  # what a ServerApp process has set
    monkeypatch.setattr(TaskIdentity, "_node_id", 0)
    monkeypatch.setattr(TaskIdentity, "_task_id", 1)
    plan = Plan(clients=["a", "b"], out_dir=str(tmp_path), wire_path="", fn={},
                settings=FederatedSettings(clients=2, learning_rate=0.01, rounds=3,
                                           min_clients=2, round_timeout_s=30,
                                           algorithm="fedavg"))
    run = types.SimpleNamespace(plan=plan, admission=Admission(), names={1: "a", 2: "b"},
                                log=RoundLog(tmp_path / "rounds.jsonl"))
    s = flower_strategy(plan, run, first_round=2)  # a resumed run: round numbers are absolute
    strategy_core(s).dtypes = [np.dtype(np.float32)]
    return s


def test_a_clients_nan_loss_stops_the_run_naming_the_round_the_client_and_the_cause(strategy):
    cause = "feature 'bill_length_mm' is NaN in 1 of the 16 train rows of batch 1"
    arrays, _ = strategy.aggregate_train(1, [_reply(1, 0.5), _reply(2, 0.4)])
    assert np.isfinite(arrays.to_numpy_ndarrays()[0]).all()
    with pytest.raises(StageError) as caught:
        strategy.aggregate_train(2, [_reply(1, 0.5), _reply(2, float("nan"), cause=cause)])
    assert str(caught.value) == ("federated: the training loss is not finite in round 3 on "
                                 f"client 'b': {cause}")
    with pytest.raises(StageError, match=r"^federated: the weights are not finite in round 2 on "
                                         r"client 'a': the weight"):
        strategy.aggregate_train(1, [_reply(1, 0.5, cause="the weight 'd/kernel' holds NaN"),
                                     _reply(2, 0.4)])
    with pytest.raises(StageError, match=r"^federated: the eval loss is not finite in round 2 on "
                                         r"client 'a'$"):
        strategy.aggregate_evaluate(1, [_reply(1, float("inf"), "evaluate"),
                                        _reply(2, 0.4, "evaluate")])


def test_the_stage_says_when_the_model_outputs_probabilities():
    from baton.pipeline.federated.follow import say

    lines: list[str] = []
    ctx = types.SimpleNamespace(log=lines.append)
    say(ctx, {"event": "outputs", "kind": "logits", "reason": "r"})
    say(ctx, {"event": "outputs", "kind": "probabilities",
              "reason": "the last layer 'dense' applies a softmax"})
    assert lines == ["the model outputs probabilities (the last layer 'dense' applies a "
                     "softmax): trained and evaluated with the loss on probabilities "
                     "(from_logits=False), served as it answers"]
