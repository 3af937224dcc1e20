"""Federated building blocks without Flower: the partition, the analyzers merged from client
summaries (equal to the centralized transform's), local training and evaluation."""

from __future__ import annotations

import json

import numpy as np
import pytest

from baton.errors import StageError
from baton.pipeline.dataplane.partition import Partition, client_names, split
from baton.pipeline.dataplane.records.schema_file import ExamplesSchema
from baton.pipeline.federated import codec
from baton.pipeline.federated.local import ClientData, FnSpec, Local, analyze
from baton.pipeline.federated.server import federated_transform
from baton.strategies.federated_settings import FederatedSettings  # noqa: E402
from tests.pipeline.dataplane.helpers import penguins


@pytest.fixture(scope="module")
def art(tmp_path_factory):
    return penguins(tmp_path_factory.mktemp("penguins"))


@pytest.fixture(scope="module")
def islands(art, tmp_path_factory):
    root = tmp_path_factory.mktemp("clients")
    schema = ExamplesSchema.load(art["examples"])
    names = client_names(Partition(by="island"), schema, art["examples"], None)
    counts = split(art["examples"], [root / n for n in names], Partition(by="island"))
    return root, names, counts


def test_partition_by_a_column_gives_each_value_its_own_client_and_keeps_every_row(art, islands):
    root, names, counts = islands
    assert names == ["biscoe", "dream", "torgersen"]
    schema = ExamplesSchema.load(art["examples"])
    for s in ("train", "eval"):
        assert sum(counts[n][s] for n in names) == schema.splits[s]
    for n in names:
        data = ClientData(root / n)
        islands_seen = {v for v in data.raw("train")["island"].tolist()}
        assert islands_seen == {n.capitalize().encode()}
        assert json.loads((root / n / "schema.json").read_text())["source"]["client"] == n


def test_dirichlet_and_iid_partitions_are_deterministic_and_skewed_as_asked(art, tmp_path):
    a = split(art["examples"], [tmp_path / "a" / f"c{i}" for i in range(3)],
              Partition(dirichlet=0.3, seed=7))
    b = split(art["examples"], [tmp_path / "b" / f"c{i}" for i in range(3)],
              Partition(dirichlet=0.3, seed=7))
    assert a == b
    iid = split(art["examples"], [tmp_path / "i" / f"c{i}" for i in range(3)], Partition(iid=True))
    assert min(v["train"] for v in iid.values()) > 60
    species = [set(ClientData(tmp_path / "a" / f"c{i}").raw("train")["species"].tolist())
               for i in range(3)]
    mixes = [np.unique(ClientData(tmp_path / "a" / f"c{i}").raw("train")["species"],
                       return_counts=True)[1] for i in range(3)]
    assert any(len(s) < 3 or m.max() > 0.6 * m.sum() for s, m in zip(species, mixes, strict=True))


def test_bad_partitions_name_the_field(art, tmp_path):
    schema = ExamplesSchema.load(art["examples"])
    with pytest.raises(StageError, match="no column 'islands'.*did you mean 'island'"):
        client_names(Partition(by="islands"), schema, art["examples"], None)
    with pytest.raises(StageError, match="one client per value: 3"):
        client_names(Partition(by="island"), schema, art["examples"], 2)
    with pytest.raises(ValueError, match="exactly one of"):
        Partition(by="island", iid=True)


def _ask(datas):
    def ask(request):
        resolved = codec.loads(codec.dumps(request["resolved"]))
        out = []
        for name, data in datas.items():
            reply = analyze(FnSpec(columns=PLAN), resolved, data, request["with_label"])
            reply = codec.loads(codec.dumps(reply))  # what crosses the wire, without pickle
            out.append({**reply, "client": name, "schema": data.schema.to_dict()})
        return out
    return ask


PLAN = {"bill_length_mm": {"kind": "zscore"}, "body_mass_g": {"kind": "bucketize", "buckets": 4},
        "island": {"kind": "vocabulary", "oov_buckets": 1, "min_frequency": 1, "top_k": None},
        "sex": {"kind": "hash", "buckets": 3}}


def test_analyzers_merged_from_client_summaries_equal_the_centralized_ones(art, islands):
    from baton.graphs.column_kinds import ColumnsFn
    from baton.graphs.tft import engine as tft_engine

    root, names, _ = islands
    datas = {n: ClientData(root / n) for n in names}
    fed = federated_transform(FnSpec(columns=PLAN), _ask(datas))
    central = ClientData(art["examples"])
    raw = [(n, "float32" if central.schema.column(n).is_numeric else "string", ())
           for n in PLAN] + [("species", "string", ())]
    train = central.raw("train")
    want = tft_engine.analyze(ColumnsFn(PLAN), tft_engine.raw_specs(raw),
                              lambda: [{n: train[n] for n, _, _ in raw}])
    assert fed.resolved.keys() == want.keys()
    for k in want:
        for got, exp in zip(fed.resolved[k], want[k], strict=True):
            if np.asarray(exp).dtype == object:
                assert list(got) == list(exp)
            else:
                np.testing.assert_allclose(got, exp, rtol=1e-6)
    assert fed.label["vocabulary"] == ["Adelie", "Chinstrap", "Gentoo"]
    assert sum(fed.rows.values()) == central.rows("train")
    assert {f.name for f in fed.spec.features} == set(PLAN)


def test_local_training_lowers_the_loss_and_fedprox_stays_closer_to_the_global_weights(islands):
    root, names, _ = islands
    datas = {n: ClientData(root / n) for n in names}
    fed = federated_transform(FnSpec(columns=PLAN), _ask(datas))
    local = Local(FnSpec(columns=PLAN), fed.resolved, fed.label, datas["biscoe"],
                  FederatedSettings(model="mlp", model_params={"hidden_units": [8]},
                                    batch_size=16))
    w0 = local.model.get_weights()
    before = local.evaluate(w0, "train")
    w1, n, _ = local.train(w0, epochs=5)
    after = local.evaluate(w1, "train")
    assert n == 5 * local.examples("train") and after["loss"] < before["loss"]
    w_prox, _, _ = local.train(w0, epochs=5, mu=10.0)

    def dist(w):
        return sum(float(np.sum((a - b) ** 2)) for a, b in zip(w, w0, strict=True))
    assert dist(w_prox) < dist(w1)
    assert 0.0 <= local.evaluate(w1)["accuracy"] <= 1.0


def test_one_clientapp_process_serving_several_nodes_keeps_each_on_its_own_data(islands):
    """A warm process answers many messages, and a simulation actor several virtual nodes:
    the setup is the same for every client, so the client's data must be part of what its
    built transform and model are cached by (each island trains on its own rows)."""
    from flwr.app import ConfigRecord, Context, RecordDict

    from baton.pipeline.federated import flower_client

    root, names, counts = islands
    datas = {n: ClientData(root / n) for n in names}
    fed = federated_transform(FnSpec(columns=PLAN), _ask(datas))
    setup = codec.dumps({"fn": FnSpec(columns=PLAN).to_dict(), "resolved": fed.resolved,
                         "label": fed.label, "search_dir": None,
                         "settings": FederatedSettings(model_params={"hidden_units": [4]})
                         .for_clients().to_dict()})
    seen = {}
    for n in names:
        ctx = Context(run_id=1, node_id=1, node_config={"data-dir": str(root / n), "client": n},
                      state=RecordDict({flower_client.STATE: ConfigRecord({"setup": setup})}),
                      run_config={})
        seen[n] = flower_client._local(ctx).examples("train")
    assert seen == {n: counts[n]["train"] for n in names}


COMPILED_MODEL = '''
import keras


def sparse_scaled(y_true, y_pred):  # "sparse" in its name: class ids (graphs.keras_names)
    return 3.0 * keras.losses.sparse_categorical_crossentropy(y_true, y_pred, from_logits=True)


def build(spec):
    parts = [keras.layers.Flatten()(spec.inputs[f.name]) for f in spec.feature_spec.numeric]
    x = keras.layers.Concatenate()(parts) if len(parts) > 1 else parts[0]
    model = keras.Model(spec.inputs, keras.layers.Dense(spec.num_classes)(x))
    model.compile(loss=sparse_scaled, optimizer=keras.optimizers.SGD(learning_rate=0.0123))
    return model
'''


def test_a_clients_model_trains_with_its_compile_loss_and_optimizer_unless_the_stage_sets_them(
        islands, tmp_path):
    """As in the train stage (docs/federated.md: optimizer and loss "as train"): a model
    function's compile() loss and optimizer train the client's model where the stage sets
    none; the stage's `loss:` and `optimizer:` win."""
    import keras
    import tensorflow as tf

    (tmp_path / "compiled_model.py").write_text(COMPILED_MODEL)
    root, names, _ = islands
    datas = {n: ClientData(root / n) for n in names}
    fed = federated_transform(FnSpec(columns=PLAN), _ask(datas))

    def client(**settings):
        return Local(FnSpec(columns=PLAN), fed.resolved, fed.label, datas["biscoe"],
                     FederatedSettings(model="compiled_model:build", batch_size=16, **settings),
                     search_dir=str(tmp_path))

    y = tf.constant([0, 1, 2])
    logits = tf.constant([[2.0, 0.0, -1.0], [0.5, 0.5, 0.0], [0.0, 1.0, 3.0]])
    plain = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True).numpy()

    own = client()
    np.testing.assert_allclose(own._loss()(y, logits).numpy(), 3.0 * plain, rtol=1e-5)
    w0 = own.model.get_weights()
    own.train(w0, epochs=1)
    assert own._opt is own.model.optimizer
    assert isinstance(own._opt, keras.optimizers.SGD)
    assert float(own._opt.learning_rate.numpy()) == pytest.approx(0.0123)

    spec = client(loss="sparse_categorical_crossentropy", optimizer="adam")
    np.testing.assert_allclose(spec._loss()(y, logits).numpy(), plain, rtol=1e-5)
    spec.train(w0, epochs=1)
    assert isinstance(spec._opt, keras.optimizers.Adam)
