"""baton.graphs.signatures: the serving signatures TF Serving clients expect, for both tasks."""

from __future__ import annotations

import numpy as np
import pytest


def _export(up, path):
    import keras
    import tensorflow as tf

    from baton.graphs import signatures as S

    transform = tf.saved_model.load(str(up.transform_graph))
    model = keras.saving.load_model(up.model / "model.keras", compile=False)
    S.save(S.build_module(transform, model, up.spec), path, up.spec)
    return transform, model


@pytest.fixture(scope="module")
def regression(tmp_path_factory):
    from baton.pipeline.release.testing import regression_upstream

    up = regression_upstream()
    path = tmp_path_factory.mktemp("reg") / "1"
    transform, model = _export(up, path)
    return up, path, transform, model


def test_regression_model_has_a_regress_signature_tf_serving_accepts(regression):
    from tensorflow.core.protobuf import saved_model_pb2

    from baton.pipeline.release import infra

    up, path, _, _ = regression
    sm = saved_model_pb2.SavedModel.FromString((path / "saved_model.pb").read_bytes())
    sigs = sm.meta_graphs[0].signature_def
    assert "classify" not in sigs
    assert sigs["regress"].method_name == "tensorflow/serving/regress"
    assert list(sigs["regress"].inputs) == ["inputs"] and list(sigs["regress"].outputs) == ["outputs"]
    info = {"task": "regression", "signatures": ["serving_default", "regress"],
            "raw_inputs": [{"name": f.name, "dtype": f.dtype} for f in up.spec.raw_features]}
    assert infra.static_problems(path, info) == []
    assert "body_mass_g" not in sigs["serving_default"].inputs  # the label is not an input


def test_regress_and_predict_agree_with_the_keras_model(regression):
    import tensorflow as tf

    from baton.graphs import signatures as S
    from baton.pipeline.release import data

    up, path, transform, model = regression
    split = data.read_split(up.examples, up.spec).take(3)
    assert split.labels.dtype == np.float32 and len(split) == 3
    want = data.predict(model, data.transform_split(transform, split, up.spec)).reshape(-1)
    logs = S.warmup_logs(split.columns, split.serialized, up.spec, "mass")
    assert [lg.WhichOneof("log_type") for lg in logs] == ["predict_log"] * 3 + ["regress_log"] * 3
    loaded = tf.saved_model.load(str(path))
    got_predict = np.concatenate([S.run_log(loaded, lg)["predictions"] for lg in logs[:3]])
    got_regress = np.concatenate([S.run_log(loaded, lg)["outputs"] for lg in logs[3:]])
    np.testing.assert_allclose(got_predict, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_regress, want, rtol=1e-5, atol=1e-5)


def test_regression_metrics_and_gate(tmp_path):
    from baton.pipeline.release.testing import regression_upstream
    from baton.pipeline.testing import run_stage

    up = regression_upstream()
    inputs = {"model": up.model, "transform_graph": up.transform_graph, "examples": up.examples}
    outs, metrics = run_stage("evaluate", {"slices": ["island"],
                                           "gate": {"thresholds": {"mae": 0.001}}}, inputs,
                              tmp_path)
    assert metrics["mse"] == pytest.approx(metrics["mae"] ** 2, rel=0.5)
    assert metrics["rmse"] == pytest.approx(metrics["mse"] ** 0.5)
    assert metrics["blessed"] is False  # an untrained model is thousands of grams off


def test_a_missing_example_feature_is_parsed_as_missing():
    import tensorflow as tf

    from baton.graphs import signatures as S
    from baton.pipeline.release.testing import to_example
    from tests.pipeline.release.helpers import exported

    loaded = tf.saved_model.load(str(exported() / "1"))
    ex = to_example({"bill_length_mm": 39.1, "island": "Dream"}).SerializeToString()
    out = loaded.signatures["classify"](inputs=tf.constant([ex]))
    assert out["scores"].shape == (1, 3) and np.isfinite(out["scores"].numpy()).all()
    assert [c.decode() for c in out["classes"].numpy()[0]] == ["Adelie", "Chinstrap", "Gentoo"]
    assert S.EXAMPLES_KEY == "inputs"

