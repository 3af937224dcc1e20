"""A sparse output of the preprocessing_fn (tf.Transform's VarLenFeature) through every stage
after transform (issue 34): the user's own model takes it as `keras.Input(sparse=True)`, trains
on it, evaluate scores it, and the exported serving signature, given raw features, runs the same
transform graph, so the served probabilities are the trained model's on
`transform_raw_features`."""

from __future__ import annotations

import json

import numpy as np
import pytest

from baton.pipeline.testing import run_stage
from tests.pipeline.dataplane.helpers import penguins
from tests.pipeline.stages.user_code import code_dir, train

CODE = '''
import keras
import tensorflow as tf

import baton.tft as tft


def preprocessing_fn(inputs):
    def z(name):
        x = inputs[name]
        return tft.scale_to_z_score(tf.where(tf.math.is_nan(x), tft.mean(x), x))

    sizes = tf.stack([z("bill_length_mm"), z("flipper_length_mm"), z("body_mass_g")], axis=1)
    return {"sizes": tf.sparse.from_dense(sizes),  # 2-D sparse: a VarLenFeature
            "island": tft.compute_and_apply_vocabulary(inputs["island"]),
            "species": inputs["species"]}


def build(spec):
    sizes = spec.inputs["sizes"]  # keras.Input(shape=(3,), sparse=True)
    assert sizes.sparse, sizes
    island = keras.layers.Embedding(4, 2)(spec.inputs["island"] + 1)  # ids from -1
    x = keras.layers.Concatenate()([keras.layers.Dense(8, activation="relu")(sizes), island])
    return keras.Model(dict(spec.inputs), keras.layers.Dense(spec.num_classes)(x))
'''


@pytest.mark.slow
def test_a_sparse_output_trains_evaluates_exports_and_serves_as_trained(tmp_path_factory,
                                                                         tmp_path):
    import keras
    import tensorflow as tf

    import baton.tft as tft

    art = penguins(tmp_path_factory.mktemp("penguins"))
    code = code_dir(tmp_path_factory, {"sparse_user.py": CODE})
    out, _ = run_stage("transform", {"preprocessing_fn": "sparse_user:preprocessing_fn"},
                       {"examples": art["examples"]}, tmp_path, spec_dir=code)
    spec = json.loads((out["transform_graph"] / "feature_spec.json").read_text())
    sizes = next(f for f in spec["features"] if f["name"] == "sizes")
    assert (sizes["encoding"], sizes["kind"]) == ("sparse", "numeric"), sizes
    art = {**art, **out}
    trained, _ = train(art, code, tmp_path, model="sparse_user:build", epochs=8)
    inputs = {"model": trained["model"], "transform_graph": out["transform_graph"],
              "examples": art["examples"]}
    ev, _ = run_stage("evaluate", {}, inputs, tmp_path)
    overall = json.loads((ev["evaluation"] / "metrics.json").read_text())["overall"]
    assert overall["accuracy"] > 0.8, overall
    exp, _ = run_stage("export", {"warmup_rows": 2}, inputs, tmp_path)

    raw = {"bill_length_mm": [39.1, 46.5, 50.0], "bill_depth_mm": [18.7, 17.9, 15.2],
           "flipper_length_mm": [181.0, 192.0, 218.0], "body_mass_g": [3750.0, 3500.0, 5700.0],
           "island": ["Torgersen", "Dream", "Biscoe"], "sex": ["male", "female", "male"],
           "year": [2007.0, 2007.0, 2007.0]}
    tfo = tft.TFTransformOutput(str(out["transform_graph"]))
    feats = tfo.transform_raw_features({k: tf.constant(v) for k, v in raw.items()})
    assert isinstance(feats["sizes"], tf.SparseTensor)
    model = keras.models.load_model(trained["model"] / "model.keras", compile=False)
    want = tf.nn.softmax(model(dict(feats), training=False)).numpy()

    loaded = tf.saved_model.load(str(exp["saved_model"] / "1"))
    serve = loaded.signatures["serving_default"]
    args = {k: tf.constant(v) for k, v in raw.items() if k in serve.structured_input_signature[1]}
    got = serve(**args)["probabilities"].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
