"""The callback list's cost, and Baton's loop vs Keras `model.fit` on a user's own model.

Two measurements, each side by side in one process, interleaved, best of `--repeats` (the
machine is shared):

1. **Callback cost.** The synchronous driver before the loop's side work became Keras callbacks
   (strategies/trainer.py of commit f379611, loaded from git) against today's
   (`strategies.trainer.train`, one `keras.callbacks.CallbackList`), on the default MLP with the
   default train settings (batch 32, 20 steps per chunk) and the side work the train stage does
   in process: TensorBoard summaries, progress, a backup per epoch, eval per epoch (the status
   file is written only for the multi-process launcher). Examples/s over the
   steady state: from the first chunk of epoch 2 to the last chunk (progress timestamps), so
   tracing (in epoch 1) is out and the epoch-end eval and backups in between are in. The cost
   is the median over at least 5 repeats of each repeat's ratio (its runs are neighbours in
   time); best-of-3 rates moved the cost between -10% and +8% on this shared machine. Both
   loops trace their backup write from the first save and write on the training thread here
   (the inline loop had neither), so the comparison is of the callback list alone.
2. **Own model vs fit.** The example's user model (examples/own_model: the `GatedDense` custom
   layer, the label-smoothed cross-entropy as loss, Adam) trained by `trainer.train` with the
   same side work, with XLA off (Baton's default) and on (`jit_compile`: the whole chunk of
   steps as one XLA program, graphs.steps), and by `model.fit` (compiled with the same loss
   and optimizer, with `validation_data` each epoch), each on a fresh model; `fit` runs with
   its defaults, with `steps_per_execution` as Baton's chunk (Keras' documented fast path for
   small models) and with `steps_per_execution` and `jit_compile=True`. Each side's fastest
   path is the one with the higher median over the repeats, held for every ratio (the faster
   of two paths taken per repeat would pair one side's luckiest runs with the other's single
   run); a repeat runs every case, in the reverse order every other repeat. Baton's loop
   writes its backups as the train stage does (in the background on one process,
   strategies.snapshot). A last `fit` run adds the side work Baton does, the Keras way
   (`BackupAndRestore` each epoch, which saves the weights but not the optimizer, and
   `TensorBoard` every 100 steps, with `steps_per_execution`): the like-for-like figure,
   reported beside the bare one, never instead of it. All are timed by the same Keras
   callback, from the end of epoch 1 to the end of the last epoch (validation included,
   tracing and XLA's compile out).

    .venv/bin/python bench/training/bench_own_model.py [--epochs 20] [--repeats 5] [--json OUT]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BEFORE = "f379611"  # the last commit whose trainer ran its side work inline
INPUTS = {"rows": "per-row tf.data input (from_tensor_slices, shuffle, batch)",
          "columnar": "the train stage's input pipeline (columnar chunks)"}


def _old_trainer():
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{BEFORE}:strategies/trainer.py"],
                         capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / "trainer_before_callbacks.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("trainer_before_callbacks", path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    module.summaries = _OldSummaries()  # what it wrote its scalars with (removed since)
    return module


class _OldSummaries:
    """`graphs.summaries.scalar` as the inline loop of f379611 called it (one eager
    `tf.summary.write` per scalar); removed from graphs.summaries once nothing else used it."""

    @staticmethod
    def scalar(name: str, value: float, step: int | None = None) -> None:
        import tensorflow as tf

        from baton.graphs.summaries import _metadata

        tf.summary.write(name, tf.constant(float(value), tf.float32), step=step,
                         metadata=_metadata())


def _data(spec, n: int, batch: int, source: str = "rows", root: Path | None = None):
    """The train and eval datasets both loops read (the same rows either way).

    `rows`: `graphs.synthetic.synthetic_dataset`, one tf.data element per row (from_tensor_slices,
    shuffle, batch), the usual Keras-tutorial pipeline; on 2 cores its per-row work competes
    with the step. `columnar`: the same rows in the `transformed` artifact's format, read by the
    train stage's own input pipeline (`graphs.input_pipeline.make_dataset`, batched by
    construction), which is what a pipeline run feeds the loop.
    """
    if source == "columnar":
        assert root is not None
        from baton.graphs.input_pipeline import make_dataset

        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from bench_balance import write_transformed  # noqa: PLC0415 - the bench's sibling

        if not (root / "train").exists():
            write_transformed(root, spec, n, max(n // 4, 256))

        def train_cols(skip, ctx):
            b = ctx.get_per_replica_batch_size(batch) if ctx is not None else batch
            ds = make_dataset(root, "train", spec, b, shuffle=True, repeat=True, seed=1,
                              cache=True, drop_remainder=True, input_context=ctx)
            return ds.skip(skip) if skip else ds

        def eval_cols():
            return make_dataset(root, "eval", spec, 256, cache=True)

        return train_cols, eval_cols

    from baton.graphs.synthetic import synthetic_dataset

    def train_ds(skip, ctx):
        b = ctx.get_per_replica_batch_size(batch) if ctx is not None else batch
        ds = synthetic_dataset(spec, n, b, seed=1, shuffle=True, repeat=True, drop_remainder=True)
        return ds.skip(skip) if skip else ds

    def eval_ds():
        return synthetic_dataset(spec, max(n // 4, 256), 256, seed=2, shuffle=False)

    return train_ds, eval_ds


def _input_rate(train_fn, batch: int, steps: int = 2_000) -> float:
    """Examples/s of the train dataset alone: `steps` batches drawn in one in-graph loop and
    reduced to a scalar (no model), after a warm-up that fills its cache. The most any loop
    reading this dataset can deliver on this machine, model or no model."""
    import tensorflow as tf

    it = iter(train_fn(0, None))

    @tf.function
    def drain(n):  # noqa: ANN001, ANN202
        total = tf.constant(0.0)
        for _ in tf.range(n):
            _, labels = next(it)
            total += tf.cast(tf.reduce_sum(labels), tf.float32)
        return total

    drain(tf.constant(steps // 4))
    t = time.perf_counter()
    drain(tf.constant(steps)).numpy()
    return steps * batch / (time.perf_counter() - t)


def _epoch_timer():
    import keras

    class EpochTimer(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.ends: list[float] = []

        def on_epoch_end(self, epoch, logs=None) -> None:
            self.ends.append(time.perf_counter())

        def rate(self, examples_per_epoch: int) -> float:
            return (len(self.ends) - 1) * examples_per_epoch / (self.ends[-1] - self.ends[0])

    return EpochTimer()


def _run(trainer_mod, strategy, build, spec, n, batch, epochs, spe, root: Path, objectives=None,
         step_options=None, source: str = "rows", data_root: Path | None = None):
    """Examples/s from the first chunk of epoch 2 to the last chunk (progress timestamps)."""
    from baton.strategies.loop import TaskRole
    from baton.strategies.trainer import TrainPlan

    train_ds, eval_ds = _data(spec, n, batch, source, data_root)
    steps_per_epoch = n // batch
    plan = TrainPlan(epochs=epochs, steps_per_epoch=steps_per_epoch, global_batch_size=batch,
                     steps_per_execution=spe)
    root.mkdir(parents=True)
    marks: list[tuple[float, int]] = []

    def on_progress(step: int, total: int, metrics: dict) -> None:
        if step > steps_per_epoch:
            marks.append((time.perf_counter(), step))

    role = TaskRole(is_chief=True, backup_dir=root / "backup", logs_dir=root / "logs",
                    on_progress=on_progress)  # no status file: the launcher's, not the stage's
    kwargs = {"objectives": objectives} if objectives is not None else {}
    trainer_mod.train(strategy, build, spec, train_ds, eval_ds, plan, role, step_options, **kwargs)
    (t0, s0), (t1, s1) = marks[0], marks[-1]
    return (s1 - s0) * batch / (t1 - t0)


def bench_callbacks(epochs: int, repeats: int, work: Path) -> dict:
    """Like for like: the callback list with the chunk summaries at every chunk end, as the
    inline loop wrote them; and with today's default cadence (every 100 steps)."""
    import keras

    from baton.graphs import models
    from baton.graphs.synthetic import synthetic_spec
    from baton.strategies import backup, callbacks
    from baton.strategies import trainer as new
    from baton.strategies.factory import make_strategy

    old = _old_trainer()
    # Like for like: the inline loop's Backup is not told how many saves its plan makes (the
    # argument came later), so it would write eagerly for its first saves where today's loop
    # traces its write at the first one; both trace from the first save here.
    traces = backup.Backup.traces
    backup.Backup.traces = lambda self: True  # type: ignore[method-assign]
    # and both write on the training thread: the inline loop had no background backups
    # (strategies.snapshot), which would otherwise be counted as the callback list's gain
    one_process = new._one_process
    new._one_process = lambda strategy: False  # type: ignore[assignment]
    spec = synthetic_spec(numeric=32, categorical=(16, 8), classes=4)
    strategy = make_strategy("one_device")  # what the train stage runs (both loops)
    n, batch, spe = 16_384, 32, 20
    default_every = callbacks.SUMMARY_EVERY_STEPS

    def build():
        return models.build_model("mlp", spec, models.MLPConfig(hidden_units=(64, 32)), seed=1), \
            keras.optimizers.Adam(0.01)

    best = {"before": 0.0, "callbacks": 0.0, "callbacks_default": 0.0}
    ratios: dict[str, list[float]] = {"callbacks": [], "callbacks_default": []}
    runs = [("before", old, default_every), ("callbacks", new, 1),
            ("callbacks_default", new, default_every)]
    for i in range(repeats):
        rates = {}
        for name, mod, every in runs if i % 2 == 0 else runs[::-1]:  # alternate the order
            callbacks.SUMMARY_EVERY_STEPS = every
            rates[name] = _run(mod, strategy, build, spec, n, batch, epochs, spe,
                               work / f"cb-{name}-{i}")
            best[name] = max(best[name], rates[name])
        for name in ratios:  # the runs of one repeat are neighbours in time: their ratio is
            ratios[name].append(rates[name] / rates["before"])  # steadier than best-of
    callbacks.SUMMARY_EVERY_STEPS = default_every
    backup.Backup.traces = traces  # type: ignore[method-assign]
    new._one_process = one_process  # type: ignore[assignment]
    return {
        "case": "default MLP (64, 32), batch 32, 20 steps per chunk, all side work on",
        "epochs": epochs, "examples_per_epoch": n,
        "before_examples_per_sec": round(best["before"]),
        "callbacks_examples_per_sec": round(best["callbacks"]),
        # the median over repeats of (1 - now / before), each repeat's runs side by side
        "cost": round(1 - statistics.median(ratios["callbacks"]), 4),
        "cost_per_repeat": [round(1 - r, 4) for r in ratios["callbacks"]],
        "cost_default": round(1 - statistics.median(ratios["callbacks_default"]), 4),
        "callbacks_default_examples_per_sec": round(best["callbacks_default"]),
        "summary_every_steps": default_every,
        "backup_writes": "training thread (both loops)",
    }


def bench_own_model_vs_fit(epochs: int, repeats: int, work: Path, batch: int,
                           source: str = "rows") -> dict:
    import keras

    from baton.graphs import model_fn
    from baton.graphs.objectives import make_optimizer
    from baton.graphs.synthetic import synthetic_spec
    from baton.strategies import trainer
    from baton.strategies.objectives import Objectives

    code = ROOT / "examples" / "own_model"
    sys.path.append(str(code))
    import penguin_model  # noqa: PLC0415 - the example's module, beside its spec

    from baton.strategies.factory import make_strategy

    spec = synthetic_spec(numeric=8, categorical=(16, 8), classes=3)
    strategy = make_strategy("one_device")  # what the train stage runs
    n, spe = 16_384, 20
    params = {"units": [64, 32]}
    from baton.graphs.objectives import make_loss

    loss = make_loss("penguin_model:smoothed_crossentropy", "classification", 3, code)

    def build():
        return (model_fn.build("penguin_model:build", spec, params, seed=1, search_dir=code),
                make_optimizer("adam", 0.01))

    def run_fit(steps_per_execution: int = 1, side_work: str = "", jit: Any = "auto") -> float:
        model = model_fn.build("penguin_model:build", spec, params, seed=1, search_dir=code)
        model.compile(optimizer=keras.optimizers.Adam(0.01),
                      loss=penguin_model.smoothed_crossentropy, metrics=["sparse_categorical_accuracy"],
                      steps_per_execution=steps_per_execution, jit_compile=jit)
        train_fn, val_fn = _data(spec, n, batch, source, data_root)
        train, val = train_fn(0, None), val_fn()
        timer = _epoch_timer()
        side = [  # Keras' own fault tolerance and TensorBoard, at Baton's cadence
            keras.callbacks.BackupAndRestore(f"{side_work}/backup", save_freq="epoch"),
            keras.callbacks.TensorBoard(f"{side_work}/logs", update_freq=100, write_graph=False),
        ] if side_work else []
        model.fit(train, steps_per_epoch=n // batch, epochs=epochs, validation_data=val,
                  verbose=0, callbacks=[*side, timer])
        if jit == "auto":
            fit_jit.append(bool(model.jit_compile))
        return timer.rate((n // batch) * batch)

    def run_baton(i: int, jit: bool) -> float:
        from baton.graphs.step_options import StepOptions

        timer = _epoch_timer()
        _run(trainer, strategy, build, spec, n, batch, epochs, spe, work / f"own-{i}-{jit}",
             Objectives(loss=loss, loss_name="penguin_model:smoothed_crossentropy",
                        callbacks=lambda: [timer]), StepOptions(jit_compile=jit), source, data_root)
        return timer.rate((n // batch) * batch)

    data_root = work / "transformed"
    fit_jit: list[bool] = []
    runs = {
        "baton": lambda i: run_baton(i, False),
        # the whole chunk as one XLA program (graphs.steps, jit_scope "chunk"; its compile, like
        # fit's, falls in epoch 1)
        "baton_xla": lambda i: run_baton(i, True),
        "fit_default": lambda i: run_fit(),
        # Keras' documented fast path for small models: several steps per call, as Baton
        "fit_spe": lambda i: run_fit(spe),
        # and with XLA forced on (Keras' "auto" resolves to off on a CPU-only machine)
        "fit_spe_xla": lambda i: run_fit(spe, jit=True),
        "fit_side_work": lambda i: run_fit(spe, side_work=str(work / f"fit-{i}")),
    }
    per_repeat: list[dict[str, float]] = []
    for i in range(repeats):
        # the dataset alone: the ceiling of any loop reading it (per-row input on 2 cores)
        rates = {"input": _input_rate(_data(spec, n, batch, source, data_root)[0], batch)}
        # every other repeat in the opposite order: neither loop always runs first
        for name in (list(runs) if i % 2 == 0 else list(runs)[::-1]):
            rates[name] = runs[name](i)
        per_repeat.append(rates)
    best = {k: max(r[k] for r in per_repeat) for k in per_repeat[0]}

    def median(k: str) -> float:
        return statistics.median(r[k] for r in per_repeat)

    # Each side's fastest path is the one with the higher median over the repeats, then held
    # for every ratio: taking the faster of two paths in each repeat would pair that side's
    # luckiest runs (the max of several noisy samples) with the other side's single run.
    paths = {"fit_default": "defaults", "fit_spe": "steps_per_execution",
             "fit_spe_xla": "steps_per_execution + jit_compile"}
    fastest = max(paths, key=median)
    ours = max(("baton", "baton_xla"), key=median)

    def ratios(k: str) -> list[float]:  # a repeat's runs are neighbours in time
        return [r[k] / r[fastest] for r in per_repeat]

    return {
        "case": "examples/own_model (GatedDense custom layer, label-smoothed loss, Adam), "
                f"batch {batch}, 20 steps per chunk, {INPUTS[source]}",
        "batch": batch,
        "input": source,
        "epochs": epochs, "examples_per_epoch": n, "repeats": repeats,
        "order": "alternating",  # runs of even repeats in one order, odd in the reverse
        "fastest_path_by": "median of repeats",
        "baton_examples_per_sec": round(best["baton"]),
        "keras_fit_examples_per_sec": round(best[fastest]),
        "keras_fit_fastest_path": paths[fastest],
        "speedup": round(best["baton"] / best[fastest], 2),
        "speedup_per_repeat": [round(x, 2) for x in ratios("baton")],
        "speedup_median_of_repeats": round(statistics.median(ratios("baton")), 2),
        "input_alone_examples_per_sec": round(best["input"]),
        # the most any loop reading this dataset could be, over the same fastest `fit`
        "input_ceiling_vs_fit": round(best["input"] / best[fastest], 2),
        "baton_share_of_input": round(best["baton"] / best["input"], 2),
        "keras_fit_default_examples_per_sec": round(best["fit_default"]),
        "keras_fit_spe_examples_per_sec": round(best["fit_spe"]),
        "keras_fit_spe_xla_examples_per_sec": round(best["fit_spe_xla"]),
        "speedup_vs_fit_defaults": round(best["baton"] / best["fit_default"], 2),
        "keras_fit_side_work_examples_per_sec": round(best["fit_side_work"]),
        "speedup_vs_fit_side_work": round(best["baton"] / best["fit_side_work"], 2),
        "keras_fit_jit_compile": bool(fit_jit and fit_jit[-1]),  # Keras' default: "auto"
        "baton_xla_examples_per_sec": round(best["baton_xla"]),
        "speedup_xla": round(best["baton_xla"] / best[fastest], 2),
        "speedup_xla_per_repeat": [round(x, 2) for x in ratios("baton_xla")],
        "speedup_xla_median_of_repeats": round(statistics.median(ratios("baton_xla")), 2),
        "baton_fastest_path": "xla" if ours == "baton_xla" else "default",
    }


def main() -> None:
    p = argparse.ArgumentParser()
    # 20 epochs of 16,384 examples, as in every earlier run: an epoch at batch 256 is well under
    # 0.1 s, so the per-epoch work (eval, backup, summaries) weighs far more than on real data
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json")
    p.add_argument("--inputs", default="rows,columnar", help="input pipelines to compare on")
    p.add_argument("--batches", default="32,256", help="batch sizes to compare at")
    p.add_argument("--skip-callbacks", action="store_true", help="only the fit comparison")
    p.add_argument("--skip-own-model", action="store_true", help="only the callback cost")
    args = p.parse_args()
    import os

    with tempfile.TemporaryDirectory() as tmp:
        out = {
            "load_average_start": [round(x, 2) for x in os.getloadavg()],
            "callbacks": None if args.skip_callbacks else
            bench_callbacks(args.epochs, max(args.repeats, 5), Path(tmp)),
            # the train stage's default batch (32) and bench_single's (256): the larger the
            # batch, the more compute per step and the less a loop can save
            # both input pipelines, each fed to both loops: `rows` (per-row tf.data) and
            # `columnar` (the train stage's own reader)
            "own_model": [bench_own_model_vs_fit(args.epochs, args.repeats,
                                                 Path(tmp) / f"{src}-{b}", b, src)
                          for src in args.inputs.split(",")
                          for b in (int(x) for x in args.batches.split(","))
                          if not args.skip_own_model],
        }
    print(json.dumps(out, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
