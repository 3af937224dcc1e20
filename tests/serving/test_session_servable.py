"""Loading TF Serving's upstream test models the way TF Serving does.

TF1 SavedModels that `tf.saved_model.load` cannot restore load in a Session over the
MetaGraph (session_servable.py) and answer as TF Serving does; `model.tflite` loads in
LiteRT with `--prefer_tflite_model` (tflite_servable.py); ops outside TensorFlow are
registered from the packages that ship them (custom_ops.py). The models are upstream's
own files (testdata/tf_serving/README.md).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from baton.serving import custom_ops
from baton.serving.loader import load_servable
from baton.serving.servable import meta_graph_for, read_saved_model_proto
from baton.serving.session_servable import load_session_signatures
from baton.serving.status import Code, ServingError

TESTDATA = os.path.join(os.path.dirname(__file__), "testdata", "tf_serving")


def version_dir(model: str, version: str = "00000123") -> str:
    return os.path.join(TESTDATA, model, version)


def test_tf2_loader_cannot_restore_half_plus_three():
    """The issue's report: the TF2 loader's pruning trips on a declared shape ("Shapes
    must be equal rank, but are 2 and 0"; which signature it prunes first, and so the
    shape named, varies between processes)."""
    import tensorflow as tf

    with pytest.raises(ValueError, match="Shapes? must be (equal )?rank"):
        tf.saved_model.load(version_dir("saved_model_half_plus_three"))


def test_half_plus_three_loads_in_a_session_and_answers_as_tf_serving():
    s = load_servable("half_plus_three", 123, version_dir("saved_model_half_plus_three"))
    assert s.kind == "session"
    assert sorted(s.signatures) == ["serving_default", "tensorflow/serving/regress"]
    y = s.signature("")({"x": np.array([[1.0], [2.0], [4.0]], np.float32)})["y"]
    np.testing.assert_array_equal(y, [[3.5], [4.0], [5.0]])
    # fed [1] where it declares [-1, 1]: Session::Run checks no feed shape (nor does TF Serving)
    np.testing.assert_array_equal(s.signature("")({"x": np.array([2.0], np.float32)})["y"],
                                  [4.0])


def test_counter_with_reference_variables_runs_each_call_once():
    s = load_servable("counter", 123, version_dir("saved_model_counter"))
    assert s.kind == "session"

    def call(name, **feeds):
        return float(s.signature(name)(feeds)["output"])

    assert call("reset_counter") == 0.0
    assert [call("incr_counter") for _ in range(3)] == [1.0, 2.0, 3.0]
    assert call("incr_counter_by", delta=np.array(10.0, np.float32)) == 13.0
    assert call("get_counter") == 13.0


def test_session_and_restored_function_give_the_same_answers():
    """upstream's half_plus_two_cpu loads both ways: every signature agrees."""
    import tensorflow as tf

    path = version_dir("saved_model_half_plus_two_cpu")
    tf2 = load_servable("hp2", 123, path)
    assert tf2.kind == "saved_model"
    defs = dict(meta_graph_for(read_saved_model_proto(path), ("serve",), path).signature_def)
    model, sigs = load_session_signatures(path, ("serve",), defs)
    example = tf.train.Example(features=tf.train.Features(feature={
        "x": tf.train.Feature(float_list=tf.train.FloatList(value=[7.0])),
        "x2": tf.train.Feature(float_list=tf.train.FloatList(value=[5.0]))}))
    examples = np.array([example.SerializeToString()] * 2, dtype=object)
    feeds = {"serving_default": {"x": np.array([[1.0], [3.0]], np.float32)},
             "regress_x_to_y": {"inputs": examples}, "regress_x_to_y2": {"inputs": examples},
             "classify_x_to_y": {"inputs": examples},
             "regress_x2_to_y3": {"inputs": np.array([[5.0]], np.float32)}}
    try:
        for name, f in feeds.items():
            a, b = tf2.signature(name)(f), sigs[name](f)
            assert a.keys() == b.keys()
            for k in a:
                np.testing.assert_array_equal(a[k], b[k])
    finally:
        model.close()


def test_a_directory_neither_loader_reads_fails_naming_both():
    with pytest.raises(ServingError) as e:
        load_servable("bad", 123, version_dir("bad_half_plus_two"))
    assert e.value.code == Code.DATA_LOSS and "saved_model.pb" in e.value.message


def test_a_signature_naming_a_missing_tensor_fails_the_load(tmp_path):
    from tensorflow.core.protobuf import saved_model_pb2

    src = version_dir("saved_model_half_plus_three")
    with open(os.path.join(src, "saved_model.pb"), "rb") as f:
        sm = saved_model_pb2.SavedModel.FromString(f.read())
    sm.meta_graphs[0].signature_def["serving_default"].outputs["y"].name = "nope:0"
    dst = tmp_path / "1"
    dst.mkdir()
    (dst / "saved_model.pb").write_bytes(sm.SerializeToString())
    os.symlink(os.path.join(src, "variables"), dst / "variables")
    os.symlink(os.path.join(src, "assets"), dst / "assets")
    with pytest.raises(ServingError, match="as a TF1 Session: .*nope"):
        load_servable("m", 1, str(dst))


@pytest.mark.parametrize("model", ["saved_model_half_plus_two_tflite",
                                   "saved_model_half_plus_two_tflite_with_sigdef"])
def test_tflite_model_serves_through_litert(model):
    s = load_servable("m", 123, version_dir(model), prefer_tflite=True, tflite_pools=2)
    assert s.kind == "tflite"
    sd = s.signature_defs["serving_default"]
    assert list(sd.inputs) == ["x"] and list(sd.outputs) == ["y"]
    sig = s.signature("")
    # any batch: the input tensor is resized to what is fed, as TfLiteSession does
    np.testing.assert_array_equal(sig({"x": np.array([2.0], np.float32)})["y"], [3.0])
    np.testing.assert_array_equal(
        sig({"x": np.array([[1.0], [2.0], [6.0]], np.float32)})["y"], [[2.5], [3.0], [5.0]])
    with pytest.raises(ServingError) as e:
        sig({"z": np.array([2.0], np.float32)})
    assert e.value.code == Code.INVALID_ARGUMENT


def test_without_prefer_tflite_a_tflite_only_directory_does_not_load():
    with pytest.raises(ServingError, match="saved_model.pb"):
        load_servable("m", 123, version_dir("saved_model_half_plus_two_tflite"))


def test_unknown_ops_name_the_package_to_install(monkeypatch):
    from tensorflow.core.protobuf import meta_graph_pb2

    mg = meta_graph_pb2.MetaGraphDef()
    mg.graph_def.node.add(name="a", op="NoSuchBatonTestOp")
    monkeypatch.setattr(custom_ops, "PROVIDERS", (("no_such_module_xyz", "the-pkg"),))
    with pytest.raises(ServingError) as e:
        custom_ops.ensure_ops(mg, "/m/1")
    assert e.value.code == Code.NOT_FOUND
    assert "NoSuchBatonTestOp" in e.value.message and "install the-pkg" in e.value.message
    mg.graph_def.node[0].op = "AddV2"  # TensorFlow's own: nothing imported
    assert custom_ops.ensure_ops(mg, "/m/1") == []
