"""The single-threaded executor for small models (graphs.executor): when `auto` picks it, that the
graph really runs on it, that what it refuses falls back, and that it trains to the same weights.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from baton.graphs import executor, models
from baton.graphs.eval_step import make_eval_fn
from baton.graphs.step_options import StepOptions
from baton.graphs.steps import make_train_chunk
from baton.graphs.synthetic import synthetic_dataset, synthetic_spec

ROOT = Path(__file__).resolve().parents[2]


def _train(options: StepOptions, hidden=(16, 8), chunks: int = 3) -> tuple:
    import keras
    import tensorflow as tf

    spec = synthetic_spec(4, (3,), classes=3)
    model = models.build_model("mlp", spec, models.MLPConfig(hidden_units=hidden), seed=2)
    opt = keras.optimizers.Adam(0.01)
    opt.build(model.trainable_variables)
    chunk = make_train_chunk(model, opt, spec, 32, options=options)
    it = iter(synthetic_dataset(spec, 512, 32, shuffle=True, repeat=True, seed=1))
    totals = [chunk(it, tf.constant(10), tf.constant(0.0)).numpy() for _ in range(chunks)]
    return chunk, model, totals


def test_auto_runs_a_small_model_single_threaded_and_it_learns() -> None:
    chunk, model, totals = _train(StepOptions())
    assert isinstance(chunk, executor.SingleThreaded) and chunk.active, chunk.refused
    assert executor.executor_of(chunk) == "single_threaded"
    assert chunk.experimental_get_tracing_count() == 1  # checked once, traced once
    assert totals[-1][0] < totals[0][0]  # the loss went down
    assert totals[-1][2] == 320


def test_the_graph_really_runs_on_the_single_threaded_executor() -> None:
    """A graph holding v1 control flow runs on the default executor and fails on the
    single-threaded one: the wrapper's context reaches the runtime."""
    import tensorflow as tf
    from tensorflow.python.eager import context

    @tf.function
    def pick(x, p):
        false, true = tf.raw_ops.Switch(data=x, pred=p)
        return tf.raw_ops.Merge(inputs=[false * 2.0, true * 3.0])[0]

    assert float(pick(tf.constant(1.0), tf.constant(True))) == 3.0  # default executor
    with context.function_executor_type(executor.SINGLE_THREADED), \
            pytest.raises(tf.errors.FailedPreconditionError, match="Single-threaded"):
        pick(tf.constant(1.0), tf.constant(False))


def test_what_the_executor_refuses_falls_back_to_the_default_one() -> None:
    import tensorflow as tf

    @tf.function
    def pick(x, p):
        false, true = tf.raw_ops.Switch(data=x, pred=p)
        return tf.raw_ops.Merge(inputs=[false * 2.0, true * 3.0])[0]

    wrapped = executor.SingleThreaded(pick, auto=False)
    assert float(wrapped(tf.constant(1.0), tf.constant(False))) == 2.0
    assert not wrapped.active and any("Switch" in r for r in wrapped.refused), wrapped.refused
    assert executor.executor_of(wrapped) == "default"
    assert float(wrapped(tf.constant(1.0), tf.constant(True))) == 3.0


def test_a_conditional_falls_back_to_the_default_executor() -> None:
    """A step holding a functional `If` (Keras' LossScaleOptimizer under mixed_float16 applies
    its update in a tf.cond) never returned on the single-threaded executor: the calling
    thread waited idle for ever. Such graphs run on the default one."""
    import tensorflow as tf

    v = tf.Variable(1.0)

    @tf.function
    def step(x):
        return tf.cond(x > 0, lambda: v.assign_add(x), lambda: v.assign_sub(x))

    wrapped = executor.SingleThreaded(step, auto=False)
    assert float(wrapped(tf.constant(2.0))) == 3.0  # would hang on the single-threaded one
    assert not wrapped.active and any(r.startswith("If ") or r.startswith("StatelessIf ")
                                      for r in wrapped.refused), wrapped.refused


def test_mixed_float16_trains_on_the_default_executor(tmp_path) -> None:
    """The own-model example's case (audit of issue 11): mixed_float16 with `executor: auto`
    hung in the first chunk. In a subprocess: the dtype policy is process-wide."""
    code = (
        "import keras, tensorflow as tf\n"
        "keras.mixed_precision.set_global_policy('mixed_float16')\n"
        "from baton.graphs import executor, models\n"
        "from baton.graphs.step_options import StepOptions\n"
        "from baton.graphs.steps import make_train_chunk\n"
        "from baton.graphs.synthetic import synthetic_dataset, synthetic_spec\n"
        "spec = synthetic_spec(4, (3,), classes=3)\n"
        "model = models.build_model('mlp', spec, models.MLPConfig(hidden_units=(8,)), seed=2)\n"
        "opt = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(0.01))\n"
        "opt.build(model.trainable_variables)\n"
        "chunk = make_train_chunk(model, opt, spec, 32, options=StepOptions())\n"
        "it = iter(synthetic_dataset(spec, 256, 32, shuffle=True, repeat=True, seed=1))\n"
        "print(chunk(it, tf.constant(4), tf.constant(0.0)).numpy()[2],"
        " executor.executor_of(chunk))\n"
    )
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split()[-2:] == ["128.0", "default"], res.stdout


def test_auto_leaves_convolutions_to_the_default_executor() -> None:
    """oneDNN's convolutions are lost inside the unlowered loop: `auto` falls back on the
    traced graph (here a raw conv the layer check cannot see); `single_threaded` keeps it."""
    import tensorflow as tf

    kernel = tf.ones([3, 3, 1, 2])

    @tf.function
    def conv(x):
        return tf.reduce_sum(tf.nn.conv2d(x, kernel, 1, "SAME"))

    x = tf.ones([1, 4, 4, 1])
    auto, forced = executor.SingleThreaded(conv), executor.SingleThreaded(conv._clone(None),
                                                                          auto=False)
    assert float(auto(x)) == float(forced(x)) == float(conv(x))
    assert not auto.active and auto.heavy and not auto.refused
    assert forced.active


def test_auto_decides_on_size_strategy_and_layers() -> None:
    import keras
    import tensorflow as tf

    spec = synthetic_spec(4, (3,), classes=3)
    default = tf.distribute.get_strategy()
    small = models.build_model("mlp", spec, models.MLPConfig(hidden_units=(16, 8)), seed=1)
    big = models.build_model("mlp", spec, models.MLPConfig(hidden_units=(256, 256)), seed=1)
    assert executor.decide("auto", default, small, 32) == "auto"
    assert executor.decide("auto", default, small, 1 << 20) is None  # parameters x batch
    assert executor.decide("auto", default, big, 32) is None  # 70k parameters
    assert executor.decide("single_threaded", default, big, 32) == "forced"
    assert executor.decide("default", default, small, 32) is None
    inputs = keras.Input((8, 8, 1))
    cnn = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.Flatten()(
        keras.layers.Conv2D(2, 3)(inputs))))
    assert executor.decide("auto", default, cnn, 32) is None
    fake = type("TwoReplicas", (), {"num_replicas_in_sync": 2})()
    assert executor.decide("single_threaded", fake, small, 32) is None
    assert executor.fits(tf.distribute.OneDeviceStrategy("/cpu:0"))
    with pytest.raises(ValueError, match="executor must be one of"):
        StepOptions(executor="fast")


def test_single_threaded_runs_are_deterministic_and_the_eval_agrees() -> None:
    _, a, _ = _train(StepOptions(executor="single_threaded"))
    _, b, _ = _train(StepOptions(executor="single_threaded"))
    assert all(np.array_equal(x, y) for x, y in zip(a.get_weights(), b.get_weights(), strict=True))
    spec = synthetic_spec(4, (3,), classes=3)
    data = synthetic_dataset(spec, 300, 64)
    st = make_eval_fn(a, spec, executor="forced")(data).numpy()
    plain = make_eval_fn(a, spec)(data).numpy()
    assert st[2] == 300
    np.testing.assert_allclose(st, plain, rtol=1e-5)


SAME_WEIGHTS = r"""
import json, numpy as np
from tests.graphs.test_executor import _train
from baton.graphs.step_options import StepOptions
out = {}
for choice in ("default", "single_threaded"):
    chunk, model, _ = _train(StepOptions(executor=choice), hidden=(32, 16), chunks=4)
    out[choice] = [w.tolist() for w in model.get_weights()]
    out[choice + "_ran"] = getattr(chunk, "executor", "default")
print("RESULT" + json.dumps(out))
"""


def test_bitwise_the_default_executors_weights_with_onednn_off() -> None:
    """The same kernels in the same order: equal bits. (With oneDNN on, the default executor's
    lowered loop gets oneDNN's matmuls and the single-threaded body Eigen's: last-bit
    differences, documented in graphs/executor.py.)"""
    env = {**os.environ, "TF_ENABLE_ONEDNN_OPTS": "0", "TF_CPP_MIN_LOG_LEVEL": "2",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", SAME_WEIGHTS], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT")), None)
    assert line is not None, proc.stderr[-3000:]
    out = json.loads(line[len("RESULT"):])
    assert out["single_threaded_ran"] == "single_threaded" and out["default_ran"] == "default"
    for a, b in zip(out["default"], out["single_threaded"], strict=True):
        assert np.array_equal(np.array(a), np.array(b))
