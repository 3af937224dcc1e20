"""Graph-mode steps: several optimizer steps per call, loss goes down, eval totals add up."""

from __future__ import annotations

import numpy as np
import pytest

from baton.graphs import models
from baton.graphs.eval_step import make_eval_fn
from baton.graphs.steps import make_train_chunk
from baton.graphs.synthetic import synthetic_dataset, synthetic_spec
from baton.graphs.totals import TOTALS, totals_to_metrics


def _setup(seed: int = 0):
    import keras

    spec = synthetic_spec(4, (3,), classes=3)
    model = models.build_model("mlp", spec, seed=seed)
    opt = keras.optimizers.Adam(0.01)
    opt.build(model.trainable_variables)
    return spec, model, opt


def test_one_call_runs_n_steps_in_graph_and_learns() -> None:
    import tensorflow as tf

    spec, model, opt = _setup()
    chunk = make_train_chunk(model, opt, spec, global_batch_size=32)
    it = iter(synthetic_dataset(spec, 512, 32, shuffle=True, repeat=True, seed=1))
    first = totals_to_metrics(chunk(it, tf.constant(5), tf.constant(0.0)).numpy(), "classification")
    assert int(opt.iterations.numpy()) == 5
    for _ in range(6):
        totals = chunk(it, tf.constant(25), tf.constant(0.0)).numpy()
    assert int(opt.iterations.numpy()) == 155
    assert totals[TOTALS.index("examples")] == 25 * 32
    last = totals_to_metrics(totals, "classification")
    assert last["loss"] < first["loss"] / 2
    assert last["accuracy"] > 0.9
    assert chunk.experimental_get_tracing_count() == 1  # n is a tensor: no retrace per size


def test_stop_flag_comes_back_reduced() -> None:
    import tensorflow as tf

    spec, model, opt = _setup()
    chunk = make_train_chunk(model, opt, spec, global_batch_size=16)
    it = iter(synthetic_dataset(spec, 64, 16, repeat=True))
    assert chunk(it, tf.constant(1), tf.constant(1.0)).numpy()[TOTALS.index("stop")] == 1.0
    assert chunk(it, tf.constant(1), tf.constant(0.0)).numpy()[TOTALS.index("stop")] == 0.0


def test_eval_counts_every_example_once() -> None:
    spec, model, _ = _setup()
    ds = synthetic_dataset(spec, 300, 64)
    totals = make_eval_fn(model, spec)(ds).numpy()
    assert totals[2] == 300
    feats = {k: v for k, v in next(iter(ds.unbatch().batch(300)))[0].items()}
    labels = next(iter(ds.unbatch().batch(300)))[1].numpy()
    acc = float(np.mean(np.argmax(np.asarray(model(feats)), axis=1) == labels))
    assert abs(totals_to_metrics(totals, "classification")["accuracy"] - acc) < 1e-6


def test_repeated_evals_of_one_dataset_read_the_same_batches() -> None:
    """The second and later evaluations read one repeated iterator, as many batches as the
    first pass counted: same totals, every example once, the user's metrics as before."""
    import keras

    from baton.graphs.objectives import EvalMetric

    spec, model, _ = _setup()
    ds = synthetic_dataset(spec, 300, 64)  # 4 full batches and one of 44
    metric = EvalMetric(keras.metrics.SparseCategoricalAccuracy(), False, "classification", 3)
    evaluate = make_eval_fn(model, spec, metrics=[metric])
    results = []
    for _ in range(3):
        metric.reset()
        results.append((evaluate(ds).numpy().tolist(), metric.result()))
    assert results[0][0][2] == 300
    assert results[1] == results[0] == results[2]
    with pytest.raises(ValueError, match="the eval dataset must be finite"):
        evaluate(ds.repeat())


@pytest.mark.parametrize("scope", ["chunk", "step", "gradients"])
def test_jit_compiled_step_is_compiled_and_matches_the_plain_step(scope) -> None:
    """XLA really compiles (the traced graph marks the function must-compile), same weights."""
    import tensorflow as tf

    from baton.graphs.step_options import StepOptions, xla_compiled_functions

    results, compiled = [], []
    for jit in (False, True):
        spec, model, opt = _setup(seed=3)
        options = StepOptions(jit_compile=jit, jit_scope=scope)
        chunk = make_train_chunk(model, opt, spec, 32, options=options)
        chunk(iter(synthetic_dataset(spec, 256, 32, repeat=True)), tf.constant(4), tf.constant(0.0))
        results.append(model.get_weights())
        compiled.append(xla_compiled_functions(chunk))
    assert compiled[0] == []
    wanted = {"chunk": "replica_steps", "step": "replica_step",
              "gradients": "forward_backward"}[scope]
    assert len(compiled[1]) == 1 and wanted in compiled[1][0], compiled
    for a, b in zip(*results, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_xla_chunk_ends_bitwise_where_any_other_split_into_chunks_does() -> None:
    """`jit_scope: chunk` compiles one program per chunk length; a run cut into other chunks
    (a resumed run's first chunk, an epoch's tail) computes every step the same way."""
    import tensorflow as tf

    from baton.graphs.step_options import StepOptions

    weights = []
    # without max_steps each length is a program of its own; with it, shorter chunks are
    # padded to it and run the one program (the padding is never read)
    for chunks, most in (((12,), None), ((5, 7), None), ((5, 7), 12), ((3, 3, 6), 6)):
        spec, model, opt = _setup(seed=4)
        chunk = make_train_chunk(model, opt, spec, 32, options=StepOptions(jit_compile=True),
                                 max_steps=most)
        it = iter(synthetic_dataset(spec, 256, 32, repeat=True, seed=2))
        for n in chunks:
            chunk(it, tf.constant(n), tf.constant(0.0))
        assert int(opt.iterations.numpy()) == 12
        weights.append(model.get_weights())
    for other in weights[1:]:
        for a, b in zip(weights[0], other, strict=True):
            np.testing.assert_array_equal(a, b)
    # the one-device strategy (what `one_device` is on a GPU machine) with its distributed
    # dataset: `strategy.run` inside the XLA program, the same steps
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        spec, model, opt = _setup(seed=4)
    chunk = make_train_chunk(model, opt, spec, 32, strategy, StepOptions(jit_compile=True))
    it = iter(strategy.distribute_datasets_from_function(
        lambda ctx: synthetic_dataset(spec, 256, 32, repeat=True, seed=2)))
    totals = chunk(it, tf.constant(12), tf.constant(0.0)).numpy()
    assert totals[TOTALS.index("examples")] == 12 * 32
    for a, b in zip(weights[0], model.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_chunk_scope_needs_one_replica_without_reduction() -> None:
    import tensorflow as tf

    from baton.graphs.step_options import StepOptions

    spec, model, opt = _setup()
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0"])
    with pytest.raises(ValueError, match="Received: jit_scope='chunk' under MirroredStrategy"):
        make_train_chunk(model, opt, spec, 32, mirrored,
                         StepOptions(jit_compile=True, jit_scope="chunk"))


def test_xla_failure_names_the_op_and_the_setting() -> None:
    from baton.graphs.step_options import xla_failure

    missing = ("Detected unsupported operations when trying to compile graph while_body_1[] on "
               "XLA_CPU_JIT: AsString (No registered 'AsString' OpKernel for XLA_CPU_JIT devices "
               "compatible with node {{node while/model/round_trip/AsString}}){{node "
               "while/model/round_trip/AsString}}")
    assert xla_failure(ValueError(missing)) == (
        "XLA has no kernel for the op AsString on XLA_CPU_JIT (node "
        "while/model/round_trip/AsString): set jit_compile: false to train this model without XLA")
    pooling = ("Graph execution error:\n\nDetected at node grad/MaxPoolGrad defined at ...\n"
               "GPU MaxPool gradient ops do not yet have a deterministic XLA implementation.\n"
               "\t [[{{node grad/MaxPoolGrad}}]]")
    assert xla_failure(ValueError(pooling)) == (
        "GPU MaxPool gradient ops do not yet have a deterministic XLA implementation (node "
        "grad/MaxPoolGrad), and op determinism is on (deterministic: true): set deterministic: "
        "false, or jit_compile: false")
    assert xla_failure(ValueError("Incompatible shapes: [3] vs. [4]")) is None


def test_auto_jit_scope_compiles_gradients_only_under_multi_worker_strategies() -> None:
    import tensorflow as tf

    from baton.graphs.step_options import StepOptions, resolve_jit_scope

    on = StepOptions(jit_compile=True)
    assert resolve_jit_scope(StepOptions(), tf.distribute.get_strategy()) is None
    assert resolve_jit_scope(on, tf.distribute.OneDeviceStrategy("/cpu:0")) == "chunk"
    assert resolve_jit_scope(on, tf.distribute.get_strategy()) == "chunk"  # the default one
    assert resolve_jit_scope(on, tf.distribute.MirroredStrategy(["/cpu:0"])) == "step"
    # one replica, but a convolution model: its steps ran 16x slower as one XLA chunk
    import keras

    conv = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Conv2D(2, 3),
                             keras.layers.Flatten(), keras.layers.Dense(3)])
    assert resolve_jit_scope(on, tf.distribute.get_strategy(), conv, 32) == "step"
    _, mlp, _ = _setup()
    assert resolve_jit_scope(on, tf.distribute.get_strategy(), mlp, 32) == "chunk"
    mwm = tf.distribute.MultiWorkerMirroredStrategy.__new__(tf.distribute.MultiWorkerMirroredStrategy)
    assert resolve_jit_scope(on, mwm) == "gradients"
    with pytest.raises(ValueError, match="Received: jit_scope='all'"):
        StepOptions(jit_scope="all")
