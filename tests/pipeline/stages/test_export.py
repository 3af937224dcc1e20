"""export: a versioned SavedModel with raw-feature signatures, warmup and expected outputs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from baton.pipeline.testing import run_stage
from tests.pipeline.release.helpers import record, upstream_inputs


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    outs, metrics = run_stage("export", {"warmup_rows": 4, "model_name": "penguins"},
                              upstream_inputs(), root, run_id="r1")
    return root, outs, metrics


def test_layout_is_tf_serving_ready(exported):
    _, outs, metrics = exported
    sm = outs["saved_model"]
    assert metrics["version"] == 1 and metrics["warmup_requests"] == 8
    assert sorted(p.name for p in sm.iterdir()) == ["1", "expected_outputs.json", "export.json"]
    for rel in ("saved_model.pb", "variables/variables.index",
                "assets.extra/tf_serving_warmup_requests"):
        assert (sm / "1" / rel).is_file(), rel
    info = json.loads((sm / "export.json").read_text())
    assert info["signatures"][:2] == ["serving_default", "classify"]
    assert [f["name"] for f in info["raw_inputs"]] == [
        "bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g", "island", "sex"]


def test_serving_default_takes_raw_features_with_missing_values(exported):
    import tensorflow as tf

    _, outs, _ = exported
    loaded = tf.saved_model.load(str(outs["saved_model"] / "1"))
    fn = loaded.signatures["serving_default"]
    out = fn(bill_length_mm=tf.constant([39.1, 50.0, np.nan]),
             bill_depth_mm=tf.constant([18.7, 15.0, np.nan]),
             flipper_length_mm=tf.constant([181.0, 220.0, np.nan]),
             body_mass_g=tf.constant([3750.0, 5500.0, np.nan]),
             island=tf.constant(["Torgersen", "Biscoe", ""]),
             sex=tf.constant(["male", "female", ""]))
    probs = out["probabilities"].numpy()
    assert probs.shape == (3, 3) and np.allclose(probs.sum(axis=1), 1.0, atol=1e-5)
    assert out["class_ids"].dtype == tf.int64
    assert [c.decode() for c in out["classes"].numpy()[:2]] == ["Adelie", "Gentoo"]


def test_classify_signature_is_what_tf_serving_accepts(exported):
    from tensorflow.core.protobuf import saved_model_pb2

    _, outs, _ = exported
    sm = saved_model_pb2.SavedModel()
    sm.ParseFromString((outs["saved_model"] / "1" / "saved_model.pb").read_bytes())
    sigs = sm.meta_graphs[0].signature_def
    classify = sigs["classify"]
    assert classify.method_name == "tensorflow/serving/classify"
    assert list(classify.inputs) == ["inputs"] and classify.inputs["inputs"].dtype == 7  # string
    assert set(classify.outputs) == {"classes", "scores"}
    assert sigs["serving_default"].method_name == "tensorflow/serving/predict"
    assert "regress" not in sigs and "transform_features" in sigs


def test_warmup_outputs_match_the_in_process_model(exported):
    import tensorflow as tf

    from baton.graphs import signatures as S

    _, outs, _ = exported
    d = outs["saved_model"] / "1"
    loaded = tf.saved_model.load(str(d))
    logs = S.read_warmup(d / "assets.extra" / S.WARMUP_FILE)
    expected = json.loads((outs["saved_model"] / "expected_outputs.json").read_text())
    kinds = [log.WhichOneof("log_type") for log in logs]
    assert kinds == ["predict_log"] * 4 + ["classify_log"] * 4
    assert logs[0].predict_log.request.model_spec.name == "penguins"
    for log, want in zip(logs, expected, strict=True):
        got = S.run_log(loaded, log)
        key = "probabilities" if "probabilities" in want else "scores"
        np.testing.assert_allclose(got[key], np.array(want[key]), atol=1e-5)


def test_version_is_one_more_than_the_last_export_in_lineage(exported, tmp_path):
    root, outs, metrics = exported
    record(outs, metrics, "export")
    outs2, m2 = run_stage("export", {"warmup_rows": 1}, upstream_inputs(), root, run_id="r2")
    assert m2["version"] == 2 and (outs2["saved_model"] / "2" / "saved_model.pb").is_file()
