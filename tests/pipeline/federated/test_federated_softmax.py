"""A model ending in a softmax, trained federated on real Flower processes (2 clients, 1
round): trained on its probabilities (the round's loss is the cross-entropy of the
probabilities, not of their softmax) and served as it answers, with no second softmax (issue
35 finding 1, on the federated stage's own loop and export)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from baton.pipeline.testing import run_stage

pytestmark = [pytest.mark.slow, pytest.mark.multi_worker]

MODEL = '''
import keras


def build(spec):
    parts = [keras.layers.Flatten()(spec.inputs[f.name]) for f in spec.feature_spec.numeric]
    d = keras.layers.Dense(8, activation="relu")(keras.layers.Concatenate()(parts))
    return keras.Model(spec.inputs, keras.layers.Dense(spec.num_classes, activation="softmax")(d))
'''


def test_a_softmax_model_is_trained_federated_on_probabilities_and_served_as_it_answers(
        examples, tmp_path):
    import keras
    import tensorflow as tf

    from baton.graphs.feature_spec import FeatureSpec
    from baton.graphs.signatures import raw_inputs
    from baton.pipeline.release import data

    code = tmp_path / "code"
    code.mkdir()
    (code / "fed_softmax.py").write_text(MODEL)
    cfg = {"clients": 2, "partition": {"iid": True}, "rounds": 1, "min_clients": 2,
           "round_timeout_s": 90, "batch_size": 32, "local_epochs": 2,
           "model": "fed_softmax:build"}
    out, _ = run_stage("federated", cfg, {"examples": examples}, tmp_path, spec_dir=code)
    info = json.loads((out["model"] / "train_info.json").read_text())
    assert info["outputs"]["kind"] == "probabilities", info
    upstream = {"model": out["model"], "transform_graph": out["transform_graph"],
                "examples": examples}
    ex, _ = run_stage("export", {"warmup_rows": 2}, upstream, tmp_path, spec_dir=code)

    spec = FeatureSpec.load(out["transform_graph"])
    split = data.read_split(examples, spec, "eval")
    feats = data.transform_split(data.load_transform(out["transform_graph"]), split, spec)
    model = data.load_model(out["model"])
    own = np.asarray(model(feats, training=False))
    assert np.allclose(own.sum(axis=1), 1.0, atol=1e-5)
    vdir = next(p for p in ex["saved_model"].iterdir() if p.name.isdigit())
    serve = tf.saved_model.load(str(vdir)).signatures["serving_default"]
    served = serve(**{n: tf.constant(split.columns[n]) for n, _ in raw_inputs(spec)})
    np.testing.assert_allclose(served["probabilities"].numpy(), own, atol=1e-6)

    # the round's eval loss (the clients' losses weighted by their eval rows, which are the
    # split's) is the cross-entropy of the model's probabilities, not of their softmax
    rounds = json.loads((out["model"] / "rounds.json").read_text())
    y = np.asarray(split.labels)
    keep = y >= 0
    ce = keras.losses.SparseCategoricalCrossentropy
    want = float(ce(from_logits=False)(y[keep], own[keep]))
    as_logits = float(ce(from_logits=True)(y[keep], own[keep]))
    assert rounds[-1]["loss"] == pytest.approx(want, rel=1e-3), (rounds, want, as_logits)
    assert abs(as_logits - want) > 0.05
