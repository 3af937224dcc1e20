"""Test models equivalent to TF Serving's own (servables/tensorflow/testdata), exported here.

TF Serving's integration tests (model_servers/tensorflow_model_server_test.py) run against
small checked-in SavedModels. These are exported by Baton's own code to the same contract,
so the ported tests can call them exactly as upstream calls its models:

- `half_plus_two` (TF1 style: a tf.compat.v1 graph saved by SavedModelBuilder):
  `y = a*x + b`, `y2 = a*x + c`, `y3 = a2*x2 + c2` with a = 0.5, b = 2, c = 3. Signatures
  `serving_default` (predict, `x` -> `y`, both `[-1, 1]`), `classify_x_to_y` (classify,
  serialized tf.Examples of unknown rank -> `scores`), `regress_x_to_y`, `regress_x_to_y2`,
  `regress_x2_to_y3` (regress). An asset file `foo.txt`. Version directory `00000123`.
- `half_plus_three`: the same graph with b = 3 (so `y = 0.5x + 3`).
- `half_plus_two_tf2` (TF2 style: a tf.Module saved by tf.saved_model.save): the same
  signatures plus `classify_x2_to_y3`; every method_name is predict, as TF2's saver
  writes it, so Classify/Regress must not check method names by default.
- `half_plus_two_2_versions`: `00000123` and `00000124`.
- `counter`: a stateful TF1 model with input-less signatures (`get_counter`,
  `incr_counter`, `reset_counter`) and `incr_counter_by` (`delta`).
- `bad_half_plus_two`: a version directory holding a checkpoint and a MetaGraph but no
  SavedModel (it can never load).
- The models upstream's tests export inline: `tf_saved_model_save` (y = 6x, input of
  unknown rank), `multiple_signatures` (`serving_default` -> 1, `custom_signature_key` -> 2),
  `keras_sequential` (Input `x` then an identity Lambda `y`) and `keras_distrat` (the same
  with a Dense layer of ones, built under a two-CPU MirroredStrategy).

Each builder writes `<base>/<version dir>/...` and returns `<base>`. `build_all(root)`
exports everything once (a session fixture calls it), in a few seconds.
"""

from __future__ import annotations

import os

VERSION_DIR = "00000123"


def _tf1_half_plus(export_dir: str, b_value: float) -> None:
    import tensorflow as tf

    v1 = tf.compat.v1
    builder = v1.saved_model.builder.SavedModelBuilder(export_dir)
    with tf.Graph().as_default(), v1.Session() as sess:
        a = v1.Variable(0.5, name="a")
        b = v1.Variable(b_value, name="b")
        c = v1.Variable(3.0, name="c")
        # No shape: unknown rank, as in upstream's checked-in model
        # (saved_model_half_plus_two_cpu/00000123, whose metadata JSON says `"dim": [],
        # "unknown_rank": true` for tf_example:0). Upstream's export script has passed
        # shape=[None] since 2020 (commit 4f8d3b78), but that model was not re-exported.
        serialized = v1.placeholder(tf.string, name="tf_example")
        # The op that model runs: v1 ParseExample, which takes a vector of examples, so
        # its outputs are [-1, 1] as upstream's JSON says. tf.compat.v1.parse_example
        # now emits ParseExampleV2, whose outputs have unknown rank for this input.
        # Features x ([1], required) and x2 ([1], default 0.0), as _get_feature_spec.
        parsed = dict(zip(("x", "x2"), tf.raw_ops.ParseExample(
            serialized=serialized, names=tf.constant([], tf.string), sparse_keys=[],
            dense_keys=[tf.constant("x"), tf.constant("x2")],
            dense_defaults=[tf.constant([], tf.float32), tf.constant([0.0])],
            sparse_types=[], dense_shapes=[[1], [1]]).dense_values, strict=True))
        x = tf.identity(parsed["x"], name="x")
        y = tf.identity(tf.add(tf.multiply(a, x), b), name="y")
        y2 = tf.identity(tf.add(tf.multiply(a, x), c), name="y2")
        x2 = tf.identity(parsed["x2"], name="x2")
        a2 = v1.Variable(0.5, name="a2")
        c2 = v1.Variable(3.0, name="c2")
        y3 = tf.identity(tf.add(tf.multiply(a2, x2), c2), name="y3")

        # an asset, as upstream's model has one (assets/foo.txt)
        src = os.path.join(os.path.dirname(os.path.dirname(export_dir)), "_assets", "foo.txt")
        os.makedirs(os.path.dirname(src), exist_ok=True)
        with open(src, "w") as f:
            f.write("asset-file-contents")
        asset_path = tf.constant(src)
        v1.add_to_collection(v1.GraphKeys.ASSET_FILEPATHS, asset_path)
        filename = v1.Variable("foo.txt", name="filename_tensor", trainable=False,
                               collections=[])
        assign_filename = filename.assign("foo.txt")

        info = v1.saved_model.utils.build_tensor_info
        sig = v1.saved_model.signature_def_utils.build_signature_def
        consts = tf.saved_model

        def predict(inp, out):
            return sig({"x": info(inp)}, {"y": info(out)}, consts.PREDICT_METHOD_NAME)

        def regress(inp, out):
            return sig({consts.REGRESS_INPUTS: info(inp)}, {consts.REGRESS_OUTPUTS: info(out)},
                       consts.REGRESS_METHOD_NAME)

        def classify(inp, scores):
            return sig({consts.CLASSIFY_INPUTS: info(inp)},
                       {consts.CLASSIFY_OUTPUT_SCORES: info(scores)},
                       consts.CLASSIFY_METHOD_NAME)

        sess.run(v1.global_variables_initializer())
        builder.add_meta_graph_and_variables(
            sess, [tf.saved_model.SERVING],
            signature_def_map={
                "regress_x_to_y": regress(serialized, y),
                "regress_x_to_y2": regress(serialized, y2),
                "regress_x2_to_y3": regress(x2, y3),
                "classify_x_to_y": classify(serialized, y),
                consts.DEFAULT_SERVING_SIGNATURE_DEF_KEY: predict(x, y),
            },
            assets_collection=v1.get_collection(v1.GraphKeys.ASSET_FILEPATHS),
            main_op=tf.group(assign_filename))
    builder.save()


def half_plus_two(base: str, b: float = 2.0, versions: tuple[str, ...] = (VERSION_DIR,)) -> str:
    for v in versions:
        _tf1_half_plus(os.path.join(base, v), b)
    return base


def half_plus_two_tf2(base: str) -> str:
    import tensorflow as tf

    def parse(serialized):
        spec = {"x": tf.io.FixedLenFeature([1], tf.float32),
                "x2": tf.io.FixedLenFeature([1], tf.float32, default_value=[0.0])}
        return tf.io.parse_example(serialized, spec)["x"]

    examples = tf.TensorSpec([None], tf.string, name="inputs")
    one = tf.TensorSpec([1], tf.float32)

    class HalfPlusTwo(tf.Module):
        def __init__(self):
            super().__init__()
            self.a = tf.Variable(0.5, name="a")
            self.b = tf.Variable(2.0, name="b")
            self.c = tf.Variable(3.0, name="c")

        def compute(self, x, inc):
            return self.a * x + inc

        @tf.function(input_signature=[one])
        def predict(self, x):
            return {"y": self.compute(x, self.b)}

        @tf.function(input_signature=[examples])
        def regress_xy(self, serialized):
            return {"outputs": self.compute(parse(serialized), self.b)}

        @tf.function(input_signature=[examples])
        def regress_xy2(self, serialized):
            return {"outputs": self.compute(parse(serialized), self.c)}

        @tf.function(input_signature=[tf.TensorSpec([1], tf.float32, name="inputs")])
        def regress_x2y3(self, x2):
            return {"outputs": self.compute(x2, self.c)}

        @tf.function(input_signature=[examples])
        def classify_xy(self, serialized):
            return {"scores": self.compute(parse(serialized), self.b)}

        @tf.function(input_signature=[tf.TensorSpec([1], tf.float32, name="inputs")])
        def classify_x2y3(self, x2):
            return {"scores": self.compute(x2, self.c)}

    m = HalfPlusTwo()
    tf.saved_model.save(m, os.path.join(base, VERSION_DIR), signatures={
        "serving_default": m.predict, "regress_x_to_y": m.regress_xy,
        "regress_x_to_y2": m.regress_xy2, "regress_x2_to_y3": m.regress_x2y3,
        "classify_x_to_y": m.classify_xy, "classify_x2_to_y3": m.classify_x2y3})
    return base


def counter(base: str) -> str:
    import tensorflow as tf

    v1 = tf.compat.v1
    export_dir = os.path.join(base, VERSION_DIR)
    builder = v1.saved_model.builder.SavedModelBuilder(export_dir)
    with tf.Graph().as_default(), v1.Session() as sess:
        count = v1.Variable(0.0, dtype=tf.float32, name="counter", use_resource=True)
        # each output reads the variable after its update (control dependency)
        incr = tf.identity(count.assign_add(1.0), name="incr_counter")
        delta = v1.placeholder(tf.float32, name="delta")
        incr_by = tf.identity(count.assign_add(delta), name="incr_counter_by")
        reset = tf.identity(count.assign(0.0), name="reset_counter")
        sess.run(v1.global_variables_initializer())
        info = v1.saved_model.utils.build_tensor_info

        def sig(inputs, output):
            return v1.saved_model.signature_def_utils.build_signature_def(
                {k: info(t) for k, t in inputs.items()}, {"output": info(output)},
                tf.saved_model.PREDICT_METHOD_NAME)

        builder.add_meta_graph_and_variables(sess, [tf.saved_model.SERVING], signature_def_map={
            "get_counter": sig({}, count.read_value()),
            "incr_counter": sig({}, incr),
            "incr_counter_by": sig({"delta": delta}, incr_by),
            "reset_counter": sig({}, reset),
        })
    builder.save()
    return base


def bad_half_plus_two(base: str) -> str:
    """A checkpoint and a MetaGraph, no saved_model.pb: not a SavedModel."""
    import tensorflow as tf

    v1 = tf.compat.v1
    export_dir = os.path.join(base, VERSION_DIR)
    os.makedirs(export_dir)
    with tf.Graph().as_default(), v1.Session() as sess:
        a, b = v1.Variable(0.5), v1.Variable(2.0)
        x = v1.placeholder(tf.float32)
        tf.add(tf.multiply(a, x), b)
        sess.run(v1.global_variables_initializer())
        saver = v1.train.Saver()
        saver.export_meta_graph(filename=os.path.join(export_dir, "export.meta"))
        saver.save(sess, os.path.join(export_dir, "export"), write_meta_graph=False)
    return base


def tf_saved_model_save(base: str) -> str:
    import tensorflow as tf

    root = tf.train.Checkpoint()
    root.v1 = tf.Variable(3.0)
    root.v2 = tf.Variable(2.0)
    root.f = tf.function(lambda x: {"y": root.v1 * root.v2 * x})
    fn = root.f.get_concrete_function(tf.TensorSpec(None, tf.float32))
    tf.saved_model.save(root, os.path.join(base, VERSION_DIR), fn)
    return base


def multiple_signatures(base: str) -> str:
    import tensorflow as tf

    root = tf.train.Checkpoint()
    spec = [tf.TensorSpec(None, tf.float32)]
    root.f = tf.function(lambda x: {"y": 1.0}, input_signature=spec)
    root.g = tf.function(lambda x: {"y": 2.0}, input_signature=spec)
    tf.saved_model.save(root, os.path.join(base, VERSION_DIR),
                        signatures={"serving_default": root.f, "custom_signature_key": root.g})
    return base


def _keras_identity(base: str, dense: bool) -> str:
    """Input `x` (shape (1,)), optionally Dense(1) of ones, then a Lambda named `y`.

    Keras 3 writes a serving SavedModel with `model.export`, whose signature names its
    input after the Input layer and its output `output_0`; TF Serving's test reads `y`,
    as Keras 2's tf.saved_model.save wrote it. So the serving function is exported the
    way Keras 2 did: a tf.function over the model, outputs keyed by the last layer's name.
    """
    import keras
    import tensorflow as tf

    def build():
        layers = [keras.Input(shape=(1,), dtype="float32", name="x")]
        if dense:
            layers.append(keras.layers.Dense(1, kernel_initializer="ones",
                                             bias_initializer="zeros"))
        layers.append(keras.layers.Lambda(lambda t: t, name="y"))
        return keras.Sequential(layers)

    if dense:
        cpus = tf.config.list_logical_devices("CPU")
        devices = [d.name for d in cpus[:2]] if len(cpus) >= 2 else [cpus[0].name]
        with tf.distribute.MirroredStrategy(devices=devices).scope():
            model = build()
    else:
        model = build()

    module = tf.Module()
    module.model = model

    @tf.function(input_signature=[tf.TensorSpec([None, 1], tf.float32, name="x")])
    def serve(x):
        return {"y": model(x)}

    tf.saved_model.save(module, os.path.join(base, VERSION_DIR),
                        signatures={"serving_default": serve})
    return base


def keras_sequential(base: str) -> str:
    return _keras_identity(base, dense=False)


def keras_distrat(base: str) -> str:
    return _keras_identity(base, dense=True)


BUILDERS = {
    "half_plus_two": half_plus_two,
    "half_plus_three": lambda base: half_plus_two(base, b=3.0),
    "half_plus_two_tf2": half_plus_two_tf2,
    "half_plus_two_2_versions": lambda base: half_plus_two(
        base, versions=("00000123", "00000124")),
    "counter": counter,
    "bad_half_plus_two": bad_half_plus_two,
    "tf_saved_model_save": tf_saved_model_save,
    "multiple_signatures": multiple_signatures,
    "keras_sequential": keras_sequential,
    "keras_distrat": keras_distrat,
}


def build_all(root: str) -> dict[str, str]:
    """Exports every model under `root`; returns name -> base path."""
    return {name: build(os.path.join(root, name)) for name, build in BUILDERS.items()}


def set_virtual_cpus(n: int) -> None:
    """Splits the CPU into `n` logical devices (before TensorFlow initialises its context),
    as upstream's SetVirtualCpus does for its MirroredStrategy model."""
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    if tf.config.get_logical_device_configuration(cpu) is None:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(n)])


def main(argv: list[str]) -> int:
    """`python upstream_models.py OUT`: exports every model under OUT (a fresh process,
    so the two virtual CPUs and the TF1 graphs touch no test process' TensorFlow)."""
    import json

    set_virtual_cpus(2)
    print(json.dumps(build_all(argv[0])))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
