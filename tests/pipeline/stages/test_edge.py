"""edge: TFLite variants measured against the SavedModel; the release decision follows parity."""

from __future__ import annotations

import json

import numpy as np
import pytest

from baton.pipeline.release import tflite
from baton.pipeline.release.testing import upstream
from baton.pipeline.testing import run_stage
from tests.pipeline.release.helpers import exported


def _inputs():
    u = upstream()
    return {"saved_model": exported(), "examples": u.examples,
            "transform_graph": u.transform_graph}


@pytest.fixture(scope="module")
def edge(tmp_path_factory):
    outs, metrics = run_stage("edge", {"latency_rows": 10}, _inputs(),
                              tmp_path_factory.mktemp("edge"))
    return outs["edge_model"], metrics


@pytest.mark.slow
def test_every_variant_is_measured_against_the_saved_model(edge):
    d, metrics = edge
    info = json.loads((d / "edge.json").read_text())
    assert set(info["variants"]) == {"float", "dynamic", "int8", "raw"}
    for name, m in info["variants"].items():
        assert "error" not in m, (name, m)
        assert m["size_bytes"] == (d / m["file"]).stat().st_size > 0
        assert m["latency_ms"] > 0
        p = m["parity"]
        assert p["metric"] == "accuracy" and p["cloud"] >= 0.9
        assert abs(p["delta"]) <= 0.02 and p["agreement"] >= 0.98
    assert info["released"] and info["variant"] == "int8"
    assert sorted(info["release_files"]) == ["analysis.json", "feature_spec.json", "model.tflite"]
    assert metrics["released"] is True and "int8_size_bytes" in metrics


@pytest.mark.slow
def test_released_file_answers_like_the_cloud_model(edge):
    import tensorflow as tf

    from baton.pipeline.release import data

    d, _ = edge
    u = upstream()
    split = data.read_split(u.examples, u.spec).take(20)
    feats = data.transform_split(data.load_transform(u.transform_graph), split, u.spec)
    probs = tflite.predict(tflite.runner((d / "model.tflite").read_bytes()), feats)["probabilities"]
    cloud = tf.saved_model.load(str(exported() / "1")).signatures["serving_default"](
        **{k: tf.constant(v) for k, v in split.columns.items()})["probabilities"].numpy()
    assert (probs.argmax(1) == cloud.argmax(1)).all()
    np.testing.assert_allclose(probs, cloud, atol=0.05)


@pytest.mark.slow
def test_an_edge_model_that_disagrees_is_not_released(tmp_path, monkeypatch):
    real_runner = tflite.runner

    def broken_runner(model):  # a conversion that shifts every answer by one class
        run = real_runner(model)
        return lambda **kw: {k: np.roll(v, 1, axis=-1) for k, v in run(**kw).items()}

    monkeypatch.setattr(tflite, "runner", broken_runner)
    outs, metrics = run_stage("edge", {"variants": ["float"], "prefer": ["float"],
                                       "latency_rows": 2}, _inputs(), tmp_path)
    info = json.loads((outs["edge_model"] / "edge.json").read_text())
    parity = info["variants"]["float"]["parity"]
    assert parity["worsening"] > 0.5 and parity["agreement"] < 0.5
    assert info["released"] is False and metrics["released"] is False
    assert "worse by" in info["reason"] and info["release_files"] == []
    assert not (outs["edge_model"] / "model.tflite").exists()


def _measured(worsening):
    return {"parity": {"metric": "accuracy", "edge": 0.9 - worsening, "cloud": 0.9,
                       "worsening": worsening}}


def test_decision_takes_the_first_preferred_variant_within_the_delta():
    measured = {"int8": _measured(0.05), "dynamic": _measured(0.004),
                "float": _measured(0.0), "raw": {"error": "ConverterError: no"}}
    d = tflite.decide(measured, ("int8", "dynamic", "float"), max_delta=0.01)
    assert d["released"] and d["variant"] == "dynamic"
    d = tflite.decide(measured, ("raw", "int8"), max_delta=0.01)
    assert not d["released"] and "raw: ConverterError" in d["reason"]
    assert "int8: accuracy 0.8500 vs cloud 0.9000, worse by 0.0500" in d["reason"]
    assert tflite.decide(measured, ("int8",), max_delta=0.05)["variant"] == "int8"
