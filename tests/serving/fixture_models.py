"""Small SavedModels in TF Serving's layout, built with TensorFlow directly.

They mimic what Baton's exporter writes (raw-feature `serving_default`, `classify`,
`regress`, `transform_features`, a warmup file) so the server is tested against the
same shapes of model without importing the exporter: `serving` serves any SavedModel.
"""

from __future__ import annotations

import os

NUMERIC = ("bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g")
CATEGORICAL = ("island", "sex")
CLASSES = ("Adelie", "Chinstrap", "Gentoo")

PENGUIN = {
    "bill_length_mm": 39.1,
    "bill_depth_mm": 18.7,
    "flipper_length_mm": 181.0,
    "body_mass_g": 3750.0,
    "island": "Torgersen",
    "sex": "male",
}


def _set_method_names(export_dir: str, methods: dict[str, str]) -> None:
    """TF2's saver writes every signature as predict; TF Serving needs classify/regress."""
    from tensorflow.core.protobuf import saved_model_pb2

    path = os.path.join(export_dir, "saved_model.pb")
    sm = saved_model_pb2.SavedModel()
    with open(path, "rb") as f:
        sm.ParseFromString(f.read())
    for name, method in methods.items():
        sm.meta_graphs[0].signature_def[name].method_name = method
    with open(path, "wb") as f:
        f.write(sm.SerializeToString())


def _write_warmup(export_dir: str, model_name: str, records: list[dict]) -> None:
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_log_pb2

    extra = os.path.join(export_dir, "assets.extra")
    os.makedirs(extra, exist_ok=True)
    with tf.io.TFRecordWriter(os.path.join(extra, "tf_serving_warmup_requests")) as w:
        for rec in records:
            req = predict_pb2.PredictRequest()
            req.model_spec.name = model_name
            req.model_spec.signature_name = "serving_default"
            for k, v in rec.items():
                req.inputs[k].CopyFrom(tf.make_tensor_proto([v]))
            log = prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=req)
            )
            w.write(log.SerializeToString())


def build_penguins(export_dir: str, bias: float = 0.0, regression: bool = False) -> str:
    """A penguins-like classifier (or regressor) with `bias` added to class `bias % 3`.

    Different biases make versions distinguishable by their answers in reload tests.
    """
    import tensorflow as tf

    class Penguins(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(
                tf.random.stateless_normal([4 + 2 * 8, 3], seed=[1, 2]) * 0.01, name="w"
            )
            self.b = tf.Variable(
                tf.one_hot(int(bias) % 3, 3) * (10.0 if bias else 0.0), name="b"
            )
            self.classes = tf.constant(list(CLASSES))

        def _transform(self, f):
            cols = [(tf.cast(f[k], tf.float32) - 100.0) / 1000.0 for k in NUMERIC]
            cats = [
                tf.one_hot(tf.strings.to_hash_bucket_fast(f[k], 8), 8) for k in CATEGORICAL
            ]
            return tf.concat([tf.stack(cols, axis=1)] + cats, axis=1)

        def _probs(self, f):
            return tf.nn.softmax(tf.matmul(self._transform(f), self.w) + self.b)

        def parse(self, examples):
            spec = {k: tf.io.FixedLenFeature([], tf.float32) for k in NUMERIC}
            spec.update({k: tf.io.FixedLenFeature([], tf.string) for k in CATEGORICAL})
            return tf.io.parse_example(examples, spec)

    m = Penguins()
    sig = {k: tf.TensorSpec([None], tf.float32, name=k) for k in NUMERIC}
    sig.update({k: tf.TensorSpec([None], tf.string, name=k) for k in CATEGORICAL})

    @tf.function(input_signature=[sig])
    def serving_default(features):
        p = m._probs(features)
        ids = tf.argmax(p, axis=1)
        return {"probabilities": p, "class_ids": ids, "classes": tf.gather(m.classes, ids)}

    # TF Serving's Classify/Regress feed the serialized examples under the key "inputs".
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def classify(inputs):
        p = m._probs(m.parse(inputs))
        n = tf.shape(p)[0]
        return {"classes": tf.tile(m.classes[None, :], [n, 1]), "scores": p}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def regress(inputs):
        f = m.parse(inputs)
        return {"outputs": f["body_mass_g"] / 1000.0 + bias}

    @tf.function(input_signature=[sig])
    def transform_features(features):
        return {"transformed": m._transform(features)}

    sigs = {"serving_default": serving_default, "transform_features": transform_features}
    methods = {}
    if regression:
        sigs["regress"] = regress
        methods["regress"] = "tensorflow/serving/regress"
    else:
        sigs["classify"] = classify
        methods["classify"] = "tensorflow/serving/classify"
    tf.saved_model.save(m, export_dir, signatures=sigs)
    _set_method_names(export_dir, methods)
    _write_warmup(export_dir, "penguins", [PENGUIN])
    return export_dir


def build_mlp(export_dir: str, in_dim: int = 32, hidden: int = 256, out_dim: int = 10) -> str:
    """A 32-256-256-10 MLP with one float input `x` [None, 32] (the benchmark model)."""
    import tensorflow as tf

    class MLP(tf.Module):
        def __init__(self):
            super().__init__()
            init = tf.random.stateless_normal
            self.w1 = tf.Variable(init([in_dim, hidden], seed=[1, 1]) * 0.1)
            self.w2 = tf.Variable(init([hidden, hidden], seed=[1, 2]) * 0.1)
            self.w3 = tf.Variable(init([hidden, out_dim], seed=[1, 3]) * 0.1)

    m = MLP()

    @tf.function(input_signature=[tf.TensorSpec([None, in_dim], tf.float32, name="x")])
    def serving_default(x):
        h = tf.nn.relu(tf.matmul(x, m.w1))
        h = tf.nn.relu(tf.matmul(h, m.w2))
        p = tf.nn.softmax(tf.matmul(h, m.w3))
        return {"probabilities": p, "class_ids": tf.argmax(p, axis=1)}

    tf.saved_model.save(m, export_dir, signatures={"serving_default": serving_default})
    _write_warmup(export_dir, "mlp", [{"x": [0.5] * in_dim}])
    return export_dir
