"""The bare chunk loop (no side work) against Keras `fit`'s fast path, on the own-model example.

Steady-state examples/s of `graphs.steps.make_train_chunk` called back to back (no eval, backup,
summaries or callbacks) under OneDeviceStrategy, the default strategy with a distributed dataset
and the default strategy on the plain dataset; and of `model.fit` with `steps_per_execution`
equal to the chunk. It separates the graph loop's own speed from the trainer's side work, which
bench_own_model.py measures with everything on.

    .venv/bin/python bench/training/bench_chunk_vs_fit.py BATCH [onedevice|default|plain|fit ...]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE = ROOT / "examples" / "own_model"
EXAMPLES, SPE, REPEATS, CALLS = 16_384, 20, 3, 100


def _setup(batch: int):
    sys.path.append(str(CODE))
    from baton.graphs.objectives import make_loss
    from baton.graphs.synthetic import synthetic_dataset, synthetic_spec

    spec = synthetic_spec(numeric=8, categorical=(16, 8), classes=3)
    loss = make_loss("penguin_model:smoothed_crossentropy", "classification", 3, CODE)

    def dataset():
        return synthetic_dataset(spec, EXAMPLES, batch, seed=1, shuffle=True, repeat=True,
                                 drop_remainder=True)

    return spec, loss, dataset


def chunk_rate(batch: int, strategy, distributed: bool) -> float:
    import tensorflow as tf

    from baton.graphs import model_fn, steps
    from baton.graphs.objectives import make_optimizer

    spec, loss, dataset = _setup(batch)
    with strategy.scope():
        model = model_fn.build("penguin_model:build", spec, {"units": [64, 32]}, seed=1,
                               search_dir=CODE)
        optimizer = make_optimizer("adam", 0.01)
        optimizer.build(model.trainable_variables)
    chunk = steps.make_train_chunk(model, optimizer, spec, batch, strategy, None, loss)
    data = strategy.distribute_datasets_from_function(lambda ctx: dataset()) if distributed \
        else dataset()
    iterator = iter(data)
    n, flag = tf.constant(SPE), tf.constant(0.0)
    for _ in range(5):  # tracing and warm-up
        chunk(iterator, n, flag).numpy()
    best = 0.0
    for _ in range(REPEATS):
        t = time.perf_counter()
        for _ in range(CALLS):
            chunk(iterator, n, flag).numpy()
        best = max(best, CALLS * SPE * batch / (time.perf_counter() - t))
    return best


def fit_rate(batch: int) -> float:
    import keras
    import penguin_model  # the example's module (on sys.path after _setup)

    from baton.graphs import model_fn

    spec, _, dataset = _setup(batch)
    model = model_fn.build("penguin_model:build", spec, {"units": [64, 32]}, seed=1,
                           search_dir=CODE)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=penguin_model.smoothed_crossentropy,
                  metrics=["sparse_categorical_accuracy"], steps_per_execution=SPE)
    model.fit(dataset(), steps_per_epoch=SPE * 5, epochs=1, verbose=0)  # tracing
    best = 0.0
    for _ in range(REPEATS):
        t = time.perf_counter()
        model.fit(dataset(), steps_per_epoch=SPE * CALLS, epochs=1, verbose=0)
        best = max(best, CALLS * SPE * batch / (time.perf_counter() - t))
    return best


def main() -> None:
    import tensorflow as tf

    batch = int(sys.argv[1]) if len(sys.argv) > 1 else 32
    for which in sys.argv[2:] or ["onedevice", "default", "plain", "fit"]:
        if which == "onedevice":
            rate = chunk_rate(batch, tf.distribute.OneDeviceStrategy("/cpu:0"), True)
        elif which == "default":
            rate = chunk_rate(batch, tf.distribute.get_strategy(), True)
        elif which == "plain":
            rate = chunk_rate(batch, tf.distribute.get_strategy(), False)
        else:
            rate = fit_rate(batch)
        print(f"batch {batch} {which}: {rate:,.0f} ex/s", flush=True)


if __name__ == "__main__":
    main()
