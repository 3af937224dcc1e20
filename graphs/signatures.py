"""Serving signatures: the transform graph and the trained model joined into one SavedModel.

The exported model takes RAW features, so the transform that produced the training data runs
inside the served graph and there is no train/serve skew. Signatures follow what TensorFlow
Serving clients expect:

- `serving_default` (Predict): raw features, each `[None]` (float32 with NaN for missing,
  string with "" for missing), a tensor feature `[None, *shape]` (an image `[None, H, W, C]`,
  so TF Serving's JSON takes it as one nested list per instance) -> `probabilities` [None, C],
  `class_ids` [None] int64,
  `classes` [None] string; for regression -> `predictions` [None] float32. Only the columns the
  transform reads are required (graphs.transform_reads); the others are optional inputs with a
  default (the SignatureDef's `defaults`, which TF Serving fills in for an input a request
  leaves out), never read. `probabilities` are the model's own when it ends in a softmax
  (graphs.model_outputs), else the softmax of its logits.
- `classify` (Classify API): serialized tf.Example under the input key `inputs` -> `classes`
  [None, C] string and `scores` [None, C] float32. TF Serving's classifier looks the input up
  under the literal key "inputs" and requires method_name `tensorflow/serving/classify`.
- `regress` (Regress API, regression only): `inputs` -> `outputs` [None] float32.
- `transform_features`: raw features -> transformed features, for debugging skew (a ragged or
  sparse feature as its component tensors, `flat_features`).
- `predict_transformed`: transformed features -> model outputs; what the edge (TFLite) model is
  converted from, since TFLite cannot run the string lookups of the transform. Only when every
  transformed feature is a tensor: a signature cannot take a ragged or sparse input.

TF2's saver writes every signature with method_name `tensorflow/serving/predict`;
`set_method_names` rewrites saved_model.pb afterwards, which is the only way to get a classify
or regress signature out of `tf.saved_model.save`.
"""

from __future__ import annotations

import inspect
import keyword
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from baton.graphs.feature_spec import FeatureSpec

# Method names, signature keys and tensor keys are tf.saved_model's (CLASSIFY_METHOD_NAME,
# DEFAULT_SERVING_SIGNATURE_DEF_KEY, CLASSIFY_INPUTS, ...), read where TensorFlow is imported.
ASSETS_EXTRA = "assets.extra"  # TF Serving's extra files of a version (serving.conventions too)
WARMUP_FILE = "tf_serving_warmup_requests"  # under ASSETS_EXTRA


def __getattr__(name: str) -> Any:
    """`EXAMPLES_KEY`: the input key of Classify and Regress signatures, TensorFlow's
    CLASSIFY_INPUTS (== REGRESS_INPUTS), without importing TensorFlow with this module."""
    if name == "EXAMPLES_KEY":
        import tensorflow as tf

        return tf.saved_model.CLASSIFY_INPUTS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def raw_inputs(spec: FeatureSpec) -> list[tuple[str, str]]:
    """(name, dtype) of each raw serving input: every raw feature except the label."""
    return [(f.name, f.dtype) for f in spec.raw_features if f.name != spec.label.name]


def raw_shapes(spec: FeatureSpec) -> dict[str, tuple[int, ...]]:
    """Per-example shape of each raw serving input (`()` for a scalar)."""
    return {f.name: tuple(f.shape) for f in spec.raw_features if f.name != spec.label.name}


def _tf_dtype(name: str):
    import tensorflow as tf

    return {"float32": tf.float32, "int64": tf.int64, "string": tf.string}[name]


def _default(dtype: str, shape: tuple[int, ...] = ()) -> Any:
    value = {"float32": float("nan"), "int64": 0, "string": ""}[dtype]
    if not shape:
        return value
    import numpy as np

    return np.full(shape, value, dtype)  # parse_example wants the whole default tensor


def build_module(transform: Any, model: Any, spec: FeatureSpec, outputs: str = "logits"):
    """A tf.Module holding the transform and the model, with every signature as an attribute.

    Args:
        transform: the loaded transform graph (has `transform_features(raw_dict)`).
        model: the Keras model, called on the dict of transformed features; returns logits
            (or probabilities: `outputs`).
        spec: the feature spec written by the transform stage.
        outputs: what the model outputs, "logits" or "probabilities" (graphs.model_outputs).
    """
    import tensorflow as tf

    from baton.graphs.model_outputs import probabilities_op
    from baton.graphs.transform_reads import read_columns

    regression = spec.label.task == "regression"
    names = [f.name for f in spec.features]
    shapes = raw_shapes(spec)
    raw_sig = {n: tf.TensorSpec([None, *shapes[n]], _tf_dtype(d), name=n)
               for n, d in raw_inputs(spec)}
    transformed_sig = {  # (only when every feature is dense: see signature_names)
        f.name: tf.TensorSpec([None, *f.shape], _tf_dtype(f.dtype), name=f.name)
        for f in spec.features if f.dense
    }
    parse_spec = {
        n: tf.io.FixedLenFeature(list(shapes[n]), _tf_dtype(d), default_value=_default(d, shapes[n]))
        for n, d in raw_inputs(spec)
    }

    module = tf.Module()
    module.transform = transform
    module.model = model
    module.classes = tf.constant(list(spec.label.vocabulary) or [""], dtype=tf.string)

    def transformed(raw):
        out = transform.transform_features(dict(raw))
        return {n: out[n] for n in names}

    def heads(logits):
        if regression:
            return {"predictions": tf.reshape(tf.cast(logits, tf.float32), [-1])}
        probs = probabilities_op(logits, outputs)
        ids = tf.argmax(probs, axis=-1, output_type=tf.int64)
        return {"probabilities": probs, "class_ids": ids,
                "classes": tf.gather(module.classes, ids)}

    serving_default = _raw_signature(
        lambda raw: heads(model(transformed(raw), training=False)), raw_sig, shapes,
        read_columns(transform))

    sm = tf.saved_model

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=sm.CLASSIFY_INPUTS)])
    def classify(inputs):
        probs = heads(model(transformed(tf.io.parse_example(inputs, parse_spec))))["probabilities"]
        n = tf.shape(probs)[0]
        return {sm.CLASSIFY_OUTPUT_CLASSES: tf.tile(module.classes[None, :], [n, 1]),
                sm.CLASSIFY_OUTPUT_SCORES: probs}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=sm.REGRESS_INPUTS)])
    def regress(inputs):
        out = heads(model(transformed(tf.io.parse_example(inputs, parse_spec))))
        return {sm.REGRESS_OUTPUTS: out["predictions"]}

    @tf.function(input_signature=[raw_sig])
    def transform_features(raw):
        return flat_features(transformed(raw))

    @tf.function(input_signature=[transformed_sig])
    def predict_transformed(features):
        logits = tf.cast(model(dict(features), training=False), tf.float32)
        return {"predictions": tf.reshape(logits, [-1])} if regression else {
            "probabilities": probabilities_op(logits, outputs)}

    module.serving_default = serving_default
    module.transform_features = transform_features
    if all(f.dense for f in spec.features):
        module.predict_transformed = predict_transformed
    if regression:
        module.regress = regress
    else:
        module.classify = classify
    return module


def _raw_signature(call: Any, raw_sig: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]],
                   read: frozenset[str] | None) -> Any:
    """`serving_default`'s tf.function over the raw columns: one argument per column, the
    columns the transform does not read (`read`) last and with a zero-row default, so the
    SignatureDef records them in `defaults` (optional to a server that honours it, as TF
    Serving does) and the graph never looks at them: they are handed to the transform as
    missing values of the batch's size. Without such columns (`required_inputs`), one dict
    argument of every column, all required, as before."""
    import tensorflow as tf

    required = required_inputs(list(raw_sig), read)
    optional = [n for n in raw_sig if n not in required]
    if not optional:
        return tf.function(call, input_signature=[dict(raw_sig)])
    order = required + optional

    def serve(*args: Any) -> Any:
        raw = dict(zip(order, args, strict=True))
        batch = tf.shape(raw[required[0]])[0]
        for n in optional:  # not read by the transform: missing values of the batch's size
            spec = raw_sig[n]
            raw[n] = tf.fill(tf.concat([[batch], tf.constant(shapes[n], tf.int32)], 0),
                             tf.constant(_default(spec.dtype.name), spec.dtype))
        return call(raw)

    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    serve.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(n, kind) for n in required]
        + [inspect.Parameter(n, kind, default=tf.zeros([0, *shapes[n]], raw_sig[n].dtype))
           for n in optional])
    return tf.function(serve, input_signature=[raw_sig[n] for n in order])


def required_inputs(names: Sequence[str], read: frozenset[str] | None) -> list[str]:
    """The raw inputs `serving_default` requires: those the transform reads (`read`; None:
    unknown, all). All of them when it reads none of them, or when a name is not a Python
    identifier (a signature argument's name)."""
    required = [n for n in names if read is None or n in read]
    if not required or not all(n.isidentifier() and not keyword.iskeyword(n) for n in names):
        return list(names)
    return required


def serving_inputs(transform: Any, spec: FeatureSpec) -> dict[str, bool]:
    """Each raw serving input and whether `serving_default` requires it (export.json)."""
    from baton.graphs.transform_reads import read_columns

    names = [n for n, _ in raw_inputs(spec)]
    required = set(required_inputs(names, read_columns(transform)))
    return {n: n in required for n in names}


def signature_names(spec: FeatureSpec) -> list[str]:
    """The signatures `build_module` defines for this task, in a stable order."""
    import tensorflow as tf

    task = "regress" if spec.label.task == "regression" else "classify"
    names = [tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY, task, "transform_features"]
    # the edge model's input: tensors only (a signature takes no ragged or sparse input)
    return names + (["predict_transformed"] if all(f.dense for f in spec.features) else [])


def flat_features(features: Mapping[str, Any]) -> dict[str, Any]:
    """Transformed features as a signature's outputs, which are tensors: a ragged feature as
    `<name>$ragged_values` and `<name>$row_lengths_<k>`, a sparse one as
    `<name>$sparse_indices`, `$sparse_values` and `$sparse_dense_shape`."""
    import tensorflow as tf

    out = {}
    for name, v in features.items():
        if isinstance(v, tf.RaggedTensor):
            out[f"{name}$ragged_values"] = v.flat_values
            for k, lengths in enumerate(v.nested_row_lengths()):
                out[f"{name}$row_lengths_{k}"] = lengths
        elif isinstance(v, tf.SparseTensor):
            out[f"{name}$sparse_indices"] = v.indices
            out[f"{name}$sparse_values"] = v.values
            out[f"{name}$sparse_dense_shape"] = v.dense_shape
        else:
            out[name] = v
    return out


def save(module: Any, export_dir: str | Path, spec: FeatureSpec) -> Path:
    """Write the module as a SavedModel at `export_dir` with TF Serving's method names."""
    import tensorflow as tf

    sigs = {name: getattr(module, name) for name in signature_names(spec)}
    tf.saved_model.save(module, str(export_dir), signatures=sigs)
    methods = {"classify": tf.saved_model.CLASSIFY_METHOD_NAME,
               "regress": tf.saved_model.REGRESS_METHOD_NAME}
    set_method_names(export_dir, {k: v for k, v in methods.items() if k in sigs})
    return Path(export_dir)


def set_method_names(export_dir: str | Path, methods: Mapping[str, str]) -> None:
    """Rewrite signature method names in saved_model.pb (written to a temp file, then renamed)."""
    from tensorflow.core.protobuf import saved_model_pb2

    path = Path(export_dir) / "saved_model.pb"
    sm = saved_model_pb2.SavedModel()
    sm.ParseFromString(path.read_bytes())
    for name, method in methods.items():
        sm.meta_graphs[0].signature_def[name].method_name = method
    tmp = path.with_name(".saved_model.pb.tmp")
    tmp.write_bytes(sm.SerializeToString())
    os.replace(tmp, path)


def warmup_logs(
    rows: Mapping[str, Sequence[Any]], serialized: Sequence[bytes], spec: FeatureSpec,
    model_name: str,
) -> list[Any]:
    """PredictionLog records: one Predict (serving_default) per row and one Classify/Regress
    request per row (serialized tf.Example), so warmup exercises every served graph."""
    import numpy as np
    import tensorflow as tf
    from tensorflow_serving.apis import (
        classification_pb2,
        input_pb2,
        predict_pb2,
        prediction_log_pb2,
        regression_pb2,
    )

    regression = spec.label.task == "regression"
    logs = []
    n = len(serialized)
    for i in range(n):
        req = predict_pb2.PredictRequest()
        req.model_spec.name = model_name
        req.model_spec.signature_name = tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY
        for name, dtype in raw_inputs(spec):
            value = np.asarray([rows[name][i]], dtype=object if dtype == "string" else dtype)
            req.inputs[name].CopyFrom(tf.make_tensor_proto(value, dtype=_tf_dtype(dtype)))
        logs.append(prediction_log_pb2.PredictionLog(
            predict_log=prediction_log_pb2.PredictLog(request=req)))
    for i in range(n):
        example_list = input_pb2.ExampleList()
        example_list.examples.add().ParseFromString(serialized[i])
        inp = input_pb2.Input(example_list=example_list)
        if regression:
            rreq = regression_pb2.RegressionRequest(input=inp)
            rreq.model_spec.name, rreq.model_spec.signature_name = model_name, "regress"
            logs.append(prediction_log_pb2.PredictionLog(
                regress_log=prediction_log_pb2.RegressLog(request=rreq)))
        else:
            creq = classification_pb2.ClassificationRequest(input=inp)
            creq.model_spec.name, creq.model_spec.signature_name = model_name, "classify"
            logs.append(prediction_log_pb2.PredictionLog(
                classify_log=prediction_log_pb2.ClassifyLog(request=creq)))
    return logs


def write_warmup(export_dir: str | Path, logs: Sequence[Any]) -> Path:
    """Write `assets.extra/tf_serving_warmup_requests` (TFRecord of PredictionLog)."""
    import tensorflow as tf

    extra = Path(export_dir) / ASSETS_EXTRA
    extra.mkdir(parents=True, exist_ok=True)
    path = extra / WARMUP_FILE
    with tf.io.TFRecordWriter(str(path)) as w:
        for log in logs:
            w.write(log.SerializeToString())
    return path


def read_warmup(path: str | Path) -> list[Any]:
    """PredictionLog records of a warmup file (raises on a corrupt record)."""
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    return [prediction_log_pb2.PredictionLog.FromString(r.numpy())
            for r in tf.data.TFRecordDataset(str(path))]


def run_log(loaded: Any, log: Any) -> dict[str, Any]:
    """Run one PredictionLog request against a loaded SavedModel as TF Serving would.

    Predict feeds each input tensor to the named signature; Classify/Regress feed the
    serialized examples under `inputs`. Returns numpy outputs by output key.
    """
    import tensorflow as tf

    kind = log.WhichOneof("log_type")
    if kind == "predict_log":
        req = log.predict_log.request
        fn = loaded.signatures[
            req.model_spec.signature_name or tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY]
        args = {k: tf.constant(tf.make_ndarray(v)) for k, v in req.inputs.items()}
    elif kind in ("classify_log", "regress_log"):
        req = getattr(log, kind).request
        default = "classify" if kind == "classify_log" else "regress"
        fn = loaded.signatures[req.model_spec.signature_name or default]
        examples = [e.SerializeToString() for e in req.input.example_list.examples]
        key = tf.saved_model.CLASSIFY_INPUTS if kind == "classify_log" else tf.saved_model.REGRESS_INPUTS
        args = {key: tf.constant(examples, dtype=tf.string)}
    else:
        raise ValueError(f"unsupported warmup record kind. Received: {kind!r}")
    return {k: v.numpy() for k, v in fn(**args).items()}
