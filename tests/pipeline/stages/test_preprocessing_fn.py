"""transform with the user's preprocessing_fn: phases on Beam, the applied graph is the served
graph, the feature spec follows the outputs, and bad functions are named stage errors."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest

from baton.errors import StageError
from baton.pipeline.stages import transform
from baton.pipeline.testing import run_stage
from tests.pipeline.dataplane.helpers import penguins

MODULE = '''\
import tensorflow as tf

import baton.tft as tft
from penguin_helpers import NUMERIC


def preprocessing_fn(inputs):
    outputs = {}
    for key in NUMERIC:
        x = tf.where(tf.math.is_nan(inputs[key]), tft.mean(inputs[key]), inputs[key])
        outputs[key + "_xf"] = tft.scale_to_z_score(x)  # phase 2: uses the mean of phase 1
    outputs["island_xf"] = tft.compute_and_apply_vocabulary(
        inputs["island"], num_oov_buckets=1, vocab_filename="island")
    outputs["sex_hash"] = tft.hash_strings(inputs["sex"], 4)
    mass = tf.where(tf.math.is_nan(inputs["body_mass_g"]), 0.0, inputs["body_mass_g"])
    outputs["mass_bucket"] = tft.bucketize(mass, 4)
    outputs["species"] = inputs["species"]  # the label passes through: Baton encodes it
    return outputs
'''
HELPERS = 'NUMERIC = ["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g"]\n'


@pytest.fixture(scope="module")
def code(tmp_path_factory):
    d = tmp_path_factory.mktemp("code")
    (d / "penguin_pre.py").write_text(MODULE)
    (d / "penguin_helpers.py").write_text(HELPERS)
    return d


@pytest.fixture(scope="module")
def ran(tmp_path_factory, code):
    root = tmp_path_factory.mktemp("pre")
    examples = penguins(root)["examples"]
    out, metrics = run_stage("transform", {"preprocessing_fn": "penguin_pre:preprocessing_fn"},
                             {"examples": examples}, root, spec_dir=code, run_id="pre")
    return out, metrics, examples


def test_phases_feature_spec_and_vocabulary_asset(ran):
    out, metrics, _ = ran
    # phase 1: 4 means, the vocabulary, the quantiles; phase 2: the 4 z-scores (of the imputed)
    assert (metrics["phases"], metrics["analyzers"]) == (2, 10)
    assert metrics["rows"] == 344
    assert metrics["label_transformed"] is False  # passed through
    spec = json.loads((out["transform_graph"] / "feature_spec.json").read_text())
    feats = {f["name"]: f for f in spec["features"]}
    assert feats["bill_length_mm_xf"]["kind"] == "numeric"
    islands = (out["transform_graph"] / "assets" / "island").read_text().splitlines()
    assert sorted(islands) == ["Biscoe", "Dream", "Torgersen"]
    assert feats["island_xf"] == {"name": "island_xf", "kind": "categorical", "vocab_size": 4,
                                  **{k: v for k, v in feats["island_xf"].items()
                                     if k not in ("name", "kind", "vocab_size")}}
    assert feats["sex_hash"]["vocab_size"] == 4 and feats["mass_bucket"]["vocab_size"] == 4
    assert spec["label"]["vocabulary"] == ["Adelie", "Chinstrap", "Gentoo"]


def test_the_graph_applied_in_beam_is_the_served_graph(ran):
    """Raw eval rows through the exported SavedModel equal the transformed rows written."""
    import tensorflow as tf

    from baton.graphs.feature_spec import FeatureSpec
    from baton.graphs.input_pipeline import make_dataset
    from baton.pipeline.release import data

    out, _, examples = ran
    spec = FeatureSpec.load(out["transform_graph"])
    split = data.read_split(examples, spec, "eval")
    module = tf.saved_model.load(str(out["transform_graph"]))
    served = {k: v.numpy() for k, v in module.transform_features(
        {n: split.columns[n] for n in (r.name for r in spec.raw_features)}).items()}
    written = next(iter(make_dataset(out["transformed"], "eval", spec, batch_size=1000,
                                     shuffle=False)))[0]
    for name in served:
        np.testing.assert_array_equal(served[name], written[name].numpy(), err_msg=name)
    z = served["flipper_length_mm_xf"]
    assert abs(float(np.mean(z))) < 0.5 and 0.5 < float(np.std(z)) < 1.5


def test_tf_transform_output_reads_the_transform_graph(ran):
    import tensorflow as tf

    import baton.tft as tft

    out, _, _ = ran
    tfo = tft.TFTransformOutput(str(out["transform_graph"]))
    spec = tfo.transformed_feature_spec()
    assert spec["island_xf"] == tf.io.FixedLenFeature([], tf.int64)
    assert spec["body_mass_g_xf"] == tf.io.FixedLenFeature([], tf.float32)
    assert tfo.num_buckets_for_transformed_feature("island_xf") == 4  # 3 islands + 1 OOV
    assert tfo.num_buckets_for_transformed_feature("mass_bucket") == 4
    path = tfo.vocabulary_file_by_name("island")
    assert path is not None and tfo.vocabulary_size_by_name("island") == 3
    assert tfo.vocabulary_file_by_name("no such vocabulary") is None
    raw = {"bill_length_mm": tf.constant([39.0, float("nan")]),
           "bill_depth_mm": tf.constant([18.0, 15.0]), "flipper_length_mm": tf.constant([181.0, 220.0]),
           "body_mass_g": tf.constant([3750.0, 5000.0]), "island": tf.constant(["Dream", "Mars"]),
           "sex": tf.constant(["male", ""]), "year": tf.constant([2008.0, 2009.0]),
           "species": tf.constant(["Adelie", "Gentoo"])}  # the label is ignored
    got = tfo.transform_raw_features(raw)
    islands = tfo.vocabulary_by_name("island")
    assert int(got["island_xf"][0]) == islands.index(b"Dream") and int(got["island_xf"][1]) == 3
    layer_out = tfo.transform_features_layer()(raw)
    np.testing.assert_array_equal(layer_out["body_mass_g_xf"], got["body_mass_g_xf"])
    with pytest.raises(KeyError, match=r"missing raw features \['body_mass_g'"):
        tfo.transform_raw_features({k: v for k, v in raw.items() if k != "body_mass_g"})


def test_threads_and_the_driver_s_traces_change_nothing_but_the_time(tmp_path, code,
                                                                   monkeypatch):
    """In-process, the DoFns use the driver's traced graphs: the function is traced once per
    phase and once for the transform; batches on 1 or 3 threads write the same bytes."""
    import shutil

    from baton.graphs.tft import trace as tft_trace
    from baton.pipeline.dataplane.beam import runner as beam_runner

    examples = tmp_path / "examples"  # TFRecords only: parsed in batches of batch_rows
    shutil.copytree(penguins(tmp_path)["examples"], examples,
                    ignore=shutil.ignore_patterns("columnar"))
    traces = []
    real = tft_trace.trace_function
    monkeypatch.setattr(tft_trace, "trace_function",
                        lambda *a, **k: traces.append(1) or real(*a, **k))
    written = {}
    for threads in (1, 3):
        monkeypatch.setattr(beam_runner, "batch_threads", lambda placed, n=threads: n)
        traces.clear()
        out, metrics = run_stage("transform", {"preprocessing_fn": "penguin_pre:preprocessing_fn",
                                               "batch_rows": 40}, {"examples": examples},
                                 tmp_path, spec_dir=code, run_id=f"threads{threads}")
        assert (metrics["phases"], metrics["batch_threads"], len(traces)) == (2, threads, 3)
        written[threads] = [p.read_bytes() for p in sorted(out["transformed"].rglob("*.tfrecord"))]
    assert written[1] == written[3] and len(written[1]) == 2


def test_editing_a_helper_beside_the_spec_changes_the_cache_inputs(code):
    cfg = transform.Config(preprocessing_fn="penguin_pre:preprocessing_fn")
    files = {p.name for p in transform.external_inputs(cfg, code)}
    assert files == {"penguin_pre.py", "penguin_helpers.py"}


BAD = {
    "raises": ("def preprocessing_fn(inputs):\n    raise ValueError('no good')\n",
               r"transform.preprocessing_fn bad_raises:preprocessing_fn: tracing: ValueError: "
               r"no good \(.*bad_raises.py, line 2\)"),
    "not_a_dict": ("def preprocessing_fn(inputs):\n    return inputs['island']\n",
                   r"A `preprocessing_fn` must return a Dict\[str, Union\[tf.Tensor, "
                   r"tf.SparseTensor, tf.RaggedTensor\]\]. Got: .*Tensor"),
    "missing_column": ("def preprocessing_fn(inputs):\n    return {'x': inputs['wingspan']}\n",
                       r"KeyError: no raw column 'wingspan'"),
    "vocabulary_of_floats": (
        "import baton.tft as tft\n"
        "def preprocessing_fn(inputs):\n"
        "    return {'x': tft.compute_and_apply_vocabulary(inputs['body_mass_g'])}\n",
        r"tft.vocabulary: expected tf.string or integer but got float32"),
    "scalar_output": (  # tf.Transform refuses it too: an output has a batch dimension
        "import baton.tft as tft\n"
        "def preprocessing_fn(inputs):\n    return {'m': tft.mean(inputs['body_mass_g'])}\n",
        r"Feature 'm' .* had invalid shape \(\) for FixedLenFeature: must have rank at least "
        r"1 .*broadcast it to the batch"),
    "float64_output": (  # tf.Transform refuses it too: feature specs hold float32
        "import tensorflow as tf\n"
        "def preprocessing_fn(inputs):\n"
        "    return {'d': tf.cast(inputs['year'], tf.float64)}\n",
        r"Feature 'd' had invalid dtype float64 for feature spec: outputs are float32, int64 "
        r"or string"),
    "kernel_error": (  # TensorFlow's first line is "Graph execution error:": its cause shown
        "import tensorflow as tf\n"
        "def preprocessing_fn(inputs):\n"
        "    return {'n': tf.strings.to_number(inputs['island'])}\n",
        r"bad_kernel_error:preprocessing_fn: applying: InvalidArgumentError: StringToNumberOp "
        r"could not correctly convert string: \S+ \(node StringToNumber\)"),
    "stored_key_collision": (  # the artifact stores x's row lengths under this key
        "import tensorflow as tf\n"
        "def preprocessing_fn(inputs):\n"
        "    t = tf.strings.split(inputs['island'])\n"
        "    return {'x': t, 'x$row_lengths_0': inputs['year']}\n",
        r"output 'x\$row_lengths_0' has the key the transformed artifact stores output 'x'"
        r"'s '\$row_lengths_0' under: rename it"),
    "stored_width_key_collision": (  # the artifact stores x's row lengths' width under it
        "import tensorflow as tf\n"
        "def preprocessing_fn(inputs):\n"
        "    t = tf.strings.split(inputs['island'])\n"
        "    return {'x': t, 'x$row_lengths_0$width': inputs['year']}\n",
        r"output 'x\$row_lengths_0\$width' has the key the transformed artifact stores output "
        r"'x''s '\$row_lengths_0\$width' under: rename it"),
    "own_width_key_collision": (  # x$indices's own width key is x$indices$width
        "import tensorflow as tf\n"
        "def preprocessing_fn(inputs):\n"
        "    y = tf.cast(inputs['year'], tf.int64)\n"
        "    return {'x$indices': y, 'x$indices$width': y}\n",
        r"output 'x\$indices\$width' has the key the transformed artifact stores output "
        r"'x\$indices''s '\$width' under: rename it"),
    "label_width_key_collision": (  # the classification label's width is stored under it
        "import tensorflow as tf\n"
        "def preprocessing_fn(inputs):\n"
        "    return {'y': inputs['year'], 'species$width': inputs['year']}\n",
        r"output 'species\$width' has the key the transformed artifact stores the label "
        r"'species''s '\$width' under: rename it"),
    "batch_changed": (
        "import tensorflow as tf\n"
        "def preprocessing_fn(inputs):\n    return {'x': inputs['year'][:1]}\n",
        r"bad_batch_changed:preprocessing_fn: applying: output 'x' has 1 rows for a batch of "
        r"\d+: outputs keep the batch"),
    "unsupported_name": (
        "import baton.tft as tft\n"
        "def preprocessing_fn(inputs):\n    return {'t': tft.tfidf(inputs['island'], 3)}\n",
        r"tft.tfidf is not supported by baton.tft; supported: TFTransformOutput, apply_buckets"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_preprocessing_fn_is_a_stage_error_naming_it(tmp_path, case):
    source, message = BAD[case]
    (tmp_path / f"bad_{case}.py").write_text(textwrap.dedent(source))  # one module per case
    examples = penguins(tmp_path)["examples"]
    with pytest.raises(StageError, match=message):
        run_stage("transform", {"preprocessing_fn": f"bad_{case}:preprocessing_fn"},
                  {"examples": examples}, tmp_path, spec_dir=tmp_path, run_id=case)
    run = tmp_path / "runs" / "test" / case
    assert not (run / "transform").exists()  # nothing half-written: no output was placed


# Every output the issue found refused (issue 34), as tf.Transform writes them: the stage writes
# each, the feature spec says what it is, and the rows read back for training are the rows the
# exported graph gives for the same raw input.
ACCEPTED = '''\
import tensorflow as tf

import baton.tft as tft


def preprocessing_fn(inputs):
    year = tf.cast(inputs["year"], tf.int64)
    tokens = tf.strings.split(inputs["island"], "e")
    return {
        "i": tft.compute_and_apply_vocabulary(inputs["island"]),  # ids from -1
        "index": tft.compute_and_apply_vocabulary(tokens, vocab_filename="parts"),  # ragged
        "notes_ids": tft.compute_and_apply_vocabulary(tokens).to_tensor(
            default_value=-1, shape=[None, 3]),  # padded with -1: no known range
        "x": inputs["sex"],  # a string passed through
        "min": tf.zeros_like(year) + tft.min(year),  # an analyzer's value
        "q_b": tft.bucketize(tf.reshape(inputs["body_mass_g"], [-1, 1]), 3),  # ids of shape [1]
        "sp": tf.sparse.from_dense(tf.strings.split(inputs["island"], "o").to_tensor(
            shape=[None, 2])),  # sparse, 2-D: tf.Transform's VarLenFeature
        "species": inputs["species"],
    }
'''


def test_outputs_tf_transform_writes_are_written_described_and_read_back(tmp_path):
    import tensorflow as tf

    import baton.tft as tft
    from baton.graphs.feature_spec import FeatureSpec
    from baton.graphs.input_pipeline import make_dataset
    from baton.pipeline.release import data

    (tmp_path / "accepted.py").write_text(ACCEPTED)
    examples = penguins(tmp_path)["examples"]
    out, metrics = run_stage("transform", {"preprocessing_fn": "accepted:preprocessing_fn"},
                             {"examples": examples}, tmp_path, spec_dir=tmp_path, run_id="ok")
    assert metrics["rows"] == 344
    spec = FeatureSpec.load(out["transform_graph"])
    kinds = {f.name: (f.kind, f.encoding, f.shape, f.vocab_size, f.min_id) for f in spec.features}
    assert kinds["i"] == ("categorical", "dense", (), 4, -1)  # 3 islands and -1
    assert kinds["index"][:3] == ("categorical", "ragged", (None,))
    assert kinds["notes_ids"] == ("integer", "dense", (3,), 0, 0)
    assert kinds["x"] == ("string", "dense", (), 0, 0)
    assert kinds["min"] == ("integer", "dense", (), 0, 0)
    assert kinds["q_b"] == ("categorical", "dense", (1,), 3, 0)
    assert kinds["sp"] == ("string", "sparse", (2,), 0, 0)
    tfo = tft.TFTransformOutput(str(out["transform_graph"]))
    fs = tfo.transformed_feature_spec()
    assert fs["index"] == tf.io.RaggedFeature(tf.int64, value_key="index$ragged_values",
                                              partitions=[], row_splits_dtype=tf.int64)
    assert fs["sp"] == tf.io.VarLenFeature(tf.string)
    assert fs["x"] == tf.io.FixedLenFeature([], tf.string)
    assert fs["q_b"] == tf.io.FixedLenFeature([1], tf.int64)
    split = data.read_split(examples, spec, "eval")
    raw = {n: tf.constant(split.columns[n]) for n in (r.name for r in spec.raw_features)}
    served = tfo.transform_raw_features(raw)
    written = next(iter(make_dataset(out["transformed"], "eval", spec, batch_size=1000,
                                     shuffle=False)))[0]
    for name in served:
        got, want = written[name], served[name]
        if isinstance(want, tf.SparseTensor):
            got, want = tf.sparse.to_dense(got, b""), tf.sparse.to_dense(want, b"")
        if isinstance(want, tf.RaggedTensor):
            assert got.to_list() == want.to_list(), name
        else:
            np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=name)
    assert int(tf.reduce_min(written["i"])) >= -1 and set(written["min"].numpy()) == {2007}


def test_the_built_in_models_refuse_what_they_cannot_take_before_training(tmp_path):
    """The refusals moved from the transform stage to the built-in mlp and wide_deep: the
    runner's check_inputs hook names each output and its fix once the transform graph exists,
    before train runs (exit 2); ids from -1 and ids of shape [1] are taken."""
    from baton.configs import build_config
    from baton.pipeline.stages import train

    (tmp_path / "accepted.py").write_text(ACCEPTED)
    out, _ = run_stage("transform", {"preprocessing_fn": "accepted:preprocessing_fn"},
                       {"examples": penguins(tmp_path)["examples"]}, tmp_path,
                       spec_dir=tmp_path, run_id="ok")
    assert train.EARLY_INPUTS == ("transform_graph",)
    for model in ("mlp", "wide_deep"):
        problems = train.check_inputs(build_config(train.Config, {"model": model}),
                                      {"transform_graph": out["transform_graph"]})
        named = [p.split("'")[1] for p in problems]
        assert named == ["index", "notes_ids", "x", "min", "sp"], problems
        assert all(p.startswith(f"config.model: the built-in {model} cannot take output ")
                   for p in problems)
        assert "is ragged (int64, shape [None]): densify it" in problems[0]
        assert "is int64 with no known id range: make ids with" in problems[1]
        assert "is a string: encode it with tft.compute_and_apply_vocabulary" in problems[2]
        assert "is sparse (string, shape [2])" in problems[4]
        assert "train your own model (train.config.model: 'module:function')" in problems[4]
    own = build_config(train.Config, {"model": "own_model:build"})
    assert train.check_inputs(own, {"transform_graph": out["transform_graph"]}) == []


COMPOSITE_NAN = '''\
import tensorflow as tf


def preprocessing_fn(inputs):
    mass = inputs["body_mass_g"]  # NaN in 2 of the 344 penguins
    pair = tf.stack([mass, tf.ones_like(mass)], axis=1)
    return {
        "mass_ragged": tf.RaggedTensor.from_tensor(pair, lengths=tf.ones_like(
            tf.cast(mass, tf.int64)) * 2),
        "mass_sparse": tf.sparse.from_dense(pair),
        "ones_ragged": tf.RaggedTensor.from_tensor(pair[:, 1:]),
        "species": inputs["species"],
    }
'''


def test_non_finite_ragged_and_sparse_float_outputs_are_counted_per_row(tmp_path):
    """The stage's count of non-finite outputs (issue 35) over ragged and sparse float outputs
    (issue 34): each row holding a NaN is counted once, as for a dense output."""
    (tmp_path / "composite.py").write_text(COMPOSITE_NAN)
    out, metrics = run_stage("transform", {"preprocessing_fn": "composite:preprocessing_fn"},
                             {"examples": penguins(tmp_path)["examples"]}, tmp_path,
                             spec_dir=tmp_path, run_id="nan")
    assert metrics["nonfinite_values"] == 4  # 2 rows x 2 outputs; ones_ragged is finite
    from baton.graphs.feature_spec import FeatureSpec
    from baton.graphs.nonfinite import count_transformed

    counts, rows = count_transformed(out["transformed"], FeatureSpec.load(out["transform_graph"]),
                                     ["train", "eval"])
    assert sum(rows.values()) == 344
    assert {k: sum(c[k] for c in counts.values()) for k in counts["train"]} == {
        "mass_ragged": 2, "mass_sparse": 2, "ones_ragged": 0}
