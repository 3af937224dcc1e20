"""Single-process training throughput: Baton's graph loop vs Keras 3 `model.fit`, same run.

Same model (built by graphs.models), same in-memory tf.data pipeline, same batch size (256),
same optimizer (Adam). Baton runs `steps_per_execution` steps per tf.function call under the
one-device strategy with a distributed dataset (the production path of strategies.trainer).
Keras runs `model.fit` twice: with its defaults, and on its fastest documented path for small
models, `compile(steps_per_execution=N)` with Baton's N; the speedup is against the faster. Also reports achieved FLOP/s (6 x params x examples/s)
against a float32 matmul roof measured in the same process.

    .venv/bin/python bench/training/bench_single.py [--seconds 4] [--repeats 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import time


def matmul_roof(n: int = 1024, iters: int = 16) -> float:
    """Best float32 matmul rate of this process (independent n x n matmuls, all cores)."""
    import tensorflow as tf

    a = tf.random.normal([n, n])
    bs = [tf.random.normal([n, n]) for _ in range(iters)]

    @tf.function
    def run(a, bs):
        return tf.add_n([tf.reduce_sum(tf.matmul(a, b)) for b in bs])

    run(a, bs).numpy()
    best = 0.0
    for _ in range(7):
        t = time.perf_counter()
        run(a, bs).numpy()
        best = max(best, 2 * n**3 * iters / (time.perf_counter() - t))
    return best


def bench_model(
    name: str,
    hidden: tuple[int, ...],
    batch: int,
    seconds: float,
    spe: int,
    repeats: int,
    jit: bool = False,
) -> dict:
    import keras
    import tensorflow as tf

    from baton.graphs import models
    from baton.graphs.step_options import StepOptions
    from baton.graphs.steps import make_train_chunk
    from baton.graphs.synthetic import synthetic_dataset, synthetic_spec

    spec = synthetic_spec(numeric=32, categorical=(16, 8), classes=4)
    cfg = models.MLPConfig(hidden_units=hidden)
    data = synthetic_dataset(
        spec, 65_536, batch, shuffle=True, repeat=True, seed=1, drop_remainder=True
    )
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        ours = models.build_model("mlp", spec, cfg, seed=1)
        opt = keras.optimizers.Adam(1e-3)
        opt.build(ours.trainable_variables)
    params = models.count_params(ours)
    chunk = make_train_chunk(ours, opt, spec, batch, strategy, StepOptions(jit_compile=jit))
    it = iter(
        strategy.distribute_datasets_from_function(
            lambda ctx: synthetic_dataset(
                spec, 65_536, batch, shuffle=True, repeat=True, seed=1, drop_remainder=True
            )
        )
    )
    chunk(it, tf.constant(spe), tf.constant(0.0)).numpy()  # trace + warm up

    theirs = models.build_model("mlp", spec, cfg, seed=1)
    theirs.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    theirs.fit(data, steps_per_epoch=spe, epochs=1, verbose=0)  # trace + warm up
    # Keras' own advice for small models: several steps per call (compile's steps_per_execution)
    fast = models.build_model("mlp", spec, cfg, seed=1)
    fast.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        steps_per_execution=spe,
    )
    fast.fit(data, steps_per_epoch=spe, epochs=1, verbose=0)

    def run_ours() -> float:
        steps, t = 0, time.perf_counter()
        while time.perf_counter() - t < seconds:
            chunk(it, tf.constant(spe), tf.constant(0.0)).numpy()
            steps += spe
        return steps * batch / (time.perf_counter() - t)

    def run_fit(model) -> float:
        steps_per_epoch = max(int(seconds * 50) // spe, 1) * spe
        t = time.perf_counter()
        model.fit(data, steps_per_epoch=steps_per_epoch, epochs=1, verbose=0)
        return steps_per_epoch * batch / (time.perf_counter() - t)

    ours_best, fit_default, fit_spe = 0.0, 0.0, 0.0
    for _ in range(repeats):  # interleaved, best of: the machine is shared
        ours_best = max(ours_best, run_ours())
        fit_default = max(fit_default, run_fit(theirs))
        fit_spe = max(fit_spe, run_fit(fast))
    fit_best = max(fit_default, fit_spe)
    return {
        "model": name,
        "baton_jit_compile": jit,
        "keras_fit_jit_compile": theirs.jit_compile,
        "hidden_units": list(hidden),
        "params": params,
        "batch": batch,
        "steps_per_execution": spe,
        "baton_examples_per_sec": round(ours_best),
        "keras_fit_examples_per_sec": round(fit_best),  # the faster of the two fit paths
        "keras_fit_default_examples_per_sec": round(fit_default),
        "keras_fit_spe_examples_per_sec": round(fit_spe),
        "speedup": round(ours_best / fit_best, 2),
        "speedup_vs_fit_defaults": round(ours_best / fit_default, 2),
        "baton_gflops": round(6 * params * ours_best / 1e9, 1),
        "keras_fit_gflops": round(6 * params * fit_best / 1e9, 1),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--spe", type=int, default=100)
    p.add_argument("--json")
    args = p.parse_args()
    roof_before = matmul_roof()
    cases = [
        ("mlp default (64, 32)", (64, 32), args.spe),
        ("mlp wider (256, 256)", (256, 256), args.spe),
        ("mlp wide (1024, 1024, 512)", (1024, 1024, 512), max(args.spe // 10, 5)),
    ]
    rows = [
        bench_model(name, hidden, args.batch, args.seconds, spe, args.repeats, jit)
        for name, hidden, spe in cases
        for jit in (False, True)
    ]
    roof = max(roof_before, matmul_roof())  # best of before/after: the machine is shared
    for r in rows:
        r["roof_gflops"] = round(roof / 1e9, 1)
        r["baton_fraction_of_roof"] = round(r["baton_gflops"] * 1e9 / roof, 3)
    print(json.dumps(rows, indent=2))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
