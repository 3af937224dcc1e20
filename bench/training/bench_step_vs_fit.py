"""The steps alone: Baton's chunk against the function Keras `fit` runs, calls interleaved.

bench_own_model.py times whole loops (eval, backups, summaries, fit's epoch machinery); this
times only the compiled multi-step functions, so it says how much of a loop's lead is the step
itself. On the own-model example, for each batch size, one process holds four functions, each
running 20 steps per call on its own fresh model and its own iterator over the same columnar
dataset (the train stage's input pipeline):

- Baton's chunk (`graphs.steps.make_train_chunk`, the default path: XLA off, the executor
  `auto` picks);
- Baton's chunk with `jit_compile` (one replica: the whole chunk is one XLA program);
- Keras' `train_function` with `steps_per_execution=20`, and the same with `jit_compile=True`,
  called directly on its iterator (what `fit` calls each time; `fit` adds its callbacks, logs
  and epoch bookkeeping around it, so this favours `fit`).

The functions are called in rounds (4 calls each per round, the order reversed every other
round) so that every function sees the same moments of a shared machine; the figure is each
function's median over rounds of milliseconds per step, and the ratio of medians.

    .venv/bin/python bench/training/bench_step_vs_fit.py [--batches 32,256] [--rounds 30]
        [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE = ROOT / "examples" / "own_model"
EXAMPLES, SPE, CALLS = 16_384, 20, 4


def _functions(batch: int, data_root: Path) -> dict:
    """name -> a no-argument callable running SPE steps (traced, compiled and warmed up)."""
    import keras
    import tensorflow as tf

    sys.path.append(str(CODE))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import penguin_model  # noqa: PLC0415 - the example's module, beside its spec
    from bench_balance import write_transformed  # noqa: PLC0415 - the bench's sibling

    from baton.graphs import model_fn
    from baton.graphs.input_pipeline import make_dataset
    from baton.graphs.objectives import make_loss, make_optimizer
    from baton.graphs.step_options import StepOptions
    from baton.graphs.steps import make_train_chunk
    from baton.graphs.synthetic import synthetic_spec
    from baton.strategies.factory import make_strategy

    spec = synthetic_spec(numeric=8, categorical=(16, 8), classes=3)
    if not (data_root / "train").exists():
        write_transformed(data_root, spec, EXAMPLES, EXAMPLES // 4)

    def dataset(b: int):
        return make_dataset(data_root, "train", spec, b, shuffle=True, repeat=True, seed=1,
                            cache=True, drop_remainder=True)

    def model():
        return model_fn.build("penguin_model:build", spec, {"units": [64, 32]}, seed=1,
                              search_dir=CODE)

    strategy = make_strategy("one_device")  # what the train stage runs
    loss = make_loss("penguin_model:smoothed_crossentropy", "classification", 3, CODE)
    n, flag = tf.constant(SPE, tf.int32), tf.constant(0.0)
    out = {}
    for name, jit in (("baton", False), ("baton_xla", True)):
        with strategy.scope():
            m, opt = model(), make_optimizer("adam", 0.01)
            opt.build(m.trainable_variables)
        chunk = make_train_chunk(m, opt, spec, batch, strategy, StepOptions(jit_compile=jit),
                                 loss)
        it = iter(strategy.distribute_datasets_from_function(
            lambda ctx: dataset(ctx.get_per_replica_batch_size(batch))))
        out[name] = lambda chunk=chunk, it=it: chunk(it, n, flag).numpy()
    for name, jit in (("fit", False), ("fit_xla", True)):
        m = model()
        m.compile(optimizer=keras.optimizers.Adam(0.01), loss=penguin_model.smoothed_crossentropy,
                  metrics=["sparse_categorical_accuracy"], steps_per_execution=SPE,
                  jit_compile=jit)
        ds = dataset(batch)
        m.fit(ds, steps_per_epoch=SPE, epochs=1, verbose=0)  # builds and traces train_function
        it = iter(ds)

        def call(fn=m.train_function, it=it):
            # fit reads the logs of a call (its callbacks get them): the call's results synced
            tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, fn(it))

        out[name] = call
    for fn in out.values():
        for _ in range(5):  # traces, XLA's compile, the input's cache
            fn()
    return out


def bench_batch(batch: int, rounds: int, data_root: Path) -> dict:
    fns = _functions(batch, data_root)
    names = list(fns)
    ms: dict[str, list[float]] = {k: [] for k in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            t = time.perf_counter()
            for _ in range(CALLS):
                fns[name]()
            ms[name].append((time.perf_counter() - t) / (CALLS * SPE) * 1e3)
    med = {k: statistics.median(v) for k, v in ms.items()}
    fit_best = min(med["fit"], med["fit_xla"])
    return {
        "batch": batch, "rounds": rounds, "steps_per_call": SPE, "calls_per_round": CALLS,
        "ms_per_step_median": {k: round(v, 4) for k, v in med.items()},
        "ms_per_step_min": {k: round(min(v), 4) for k, v in ms.items()},
        # Keras' faster function over each of Baton's (a ratio of medians)
        "speedup": round(fit_best / med["baton"], 2),
        "speedup_xla": round(fit_best / med["baton_xla"], 2),
        "fit_fastest": "jit_compile" if med["fit_xla"] < med["fit"] else "no jit_compile",
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batches", default="32,256")
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--json")
    args = p.parse_args()
    import os

    with tempfile.TemporaryDirectory() as tmp:
        out = {"load_average_start": [round(x, 2) for x in os.getloadavg()],
               "steps": [bench_batch(int(b), args.rounds, Path(tmp) / "transformed")
                         for b in args.batches.split(",")]}
    print(json.dumps(out, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
