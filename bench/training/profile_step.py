"""What one multi-worker-mirrored step is made of: the parts timed on each of 2 local workers.

`balance: auto` can only shorten the part of a step that a split shortens: the replicas'
forward and backward passes. This measures the rest too, on the bench's job
(bench_balance.py: mlp 512x512 or, with `--model cnn`, the CNN on 32x32x3 images; columnar
rows through Baton's input pipeline), each part in
its own in-graph loop of `--steps` iterations, both workers running it at the same time
(a scalar all-reduce lines them up first), so each part sees the same contention as in a step:

- `step_off` / `step_auto`: the trainer's chunk (graphs.steps.make_train_chunk), balance off
  and on (equal split), i.e. what the bench times;
- `input_off` / `input_auto`: `next(iterator)` alone: the sharded stream (off) and the whole
  global batch on every worker (auto);
- `pass`: the forward and backward pass on one worker's share, no collective;
- `allreduce`: one all-reduce of dense tensors of the variables' shapes and the totals (what
  the step sends since graphs.gradient_sync; before it, Keras' optimizer sent the dense
  gradients in one collective and each embedding's sparse gradient in three gathers), and
  `totals`: a small totals vector all-reduced alone (what `strategy.reduce` cost per step);
- `update`: the optimizer's update of the variables from fixed gradients (with whatever
  all-reduce the optimizer itself still makes);
- `step_auto@x` / `pass@x` (`--split x ...`): the chunk with worker:0 on the fraction `x` of
  each global batch, and each worker's pass alone on its part of that split.

The summary (`summary` in the JSON, printed last) judges an emulated straggler
(`--slowdown`): `speed` is worker:1's pass rate over worker:0's on the same rows (the
emulation's real speed; the asked one is rarely what the kernel or the signals deliver), and,
per split, `stall_ms` is the chunk's time per step less the longer of the two passes at that
split: the all-reduce, the update, the input, and whatever the slowed worker makes the other
wait for beyond its pass (a collective that meets it stopped or throttled). A uniformly slower
node adds only its slower share of the first three; the best split's stall is the rehearsal's
error. `--parts` times a subset (e.g. `pass,step_auto@,pass@` to calibrate an emulation).

    PYTHONPATH=. .venv/bin/python bench/training/profile_step.py [--batch 8192] [--slowdown ...]

`--trace DIR` also records a TensorFlow profiler trace of one off and one auto chunk per worker
(`DIR/<task>/`), summarised by op type (self time) into the JSON. Each worker's figures are
medians over `--repeats` rounds; milliseconds per step.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def _worker(args: argparse.Namespace) -> None:  # noqa: PLR0915 - one straight measurement
    from baton.strategies import factory, inventory
    from baton.strategies.cluster import TFConfig
    from baton.strategies.job import TrainJob
    from baton.strategies.task import build_fn, setup_runtime

    tf_config = TFConfig.from_env()
    node = inventory.node_inventory()
    threads = inventory.apply_threads(inventory.thread_plan(node))
    job = TrainJob.from_json(Path(args.job).read_text())
    setup_runtime(job)
    strategy = factory.make_strategy(
        job.strategy, tf_config, communication=job.settings.communication)
    import tensorflow as tf

    from baton.graphs.steps import make_train_chunk

    with strategy.scope():
        model, opt = build_fn(job)()
        opt.build(model.trainable_variables)
    spec = job.spec()
    off_chunk = make_train_chunk(model, opt, spec, job.settings.batch_size, strategy)
    auto_chunk = make_train_chunk(model, opt, spec, job.settings.batch_size, strategy, balance=True)
    off_fn = dataclasses.replace(job, balance="off").data().dataset_fns()[0]
    auto_fn = dataclasses.replace(job, balance="auto").data().dataset_fns()[0]
    it_off = iter(strategy.distribute_datasets_from_function(lambda c: off_fn(0, c)))
    it_auto = iter(strategy.distribute_datasets_from_function(lambda c: auto_fn(0, c)))
    it_pass = iter(strategy.distribute_datasets_from_function(lambda c: off_fn(0, c)))
    replicas = strategy.num_replicas_in_sync
    share = job.settings.batch_size // replicas
    equal = tf.constant([i * share for i in range(replicas + 1)], tf.int32)
    splits = {f"step_auto@{x:g}": tf.constant([0, int(job.settings.batch_size * x), job.settings.batch_size],
                                              tf.int32)
              for x in args.split if replicas == 2}
    local = strategy.experimental_local_results

    @tf.function
    def barrier() -> tf.Tensor:
        return strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None)

    @tf.function
    def input_only(iterator, n):  # noqa: ANN001, ANN202
        total = tf.constant(0.0)
        for _ in tf.range(n):
            batch = local(next(iterator))[0]
            total += tf.cast(tf.shape(batch[1])[0], tf.float32)
        return total

    fixed = local(next(it_pass))[0]
    whole = local(next(it_auto))[0]  # a whole global batch, for each worker's part of a split
    me = tf_config.task.index

    def rows_of(x: float) -> int:  # this worker's rows when worker:0 takes the fraction x
        first = int(job.settings.batch_size * x)
        return first if me == 0 else job.settings.batch_size - first

    def passes(feats, labels):  # noqa: ANN001, ANN202 - n forward-backward passes on one batch
        @tf.function
        def run(n):  # noqa: ANN001, ANN202
            def one():  # noqa: ANN202
                with tf.GradientTape() as tape:
                    logits = model(feats, training=True)
                    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                        labels=tf.cast(labels, tf.int64), logits=logits))
                grads = tape.gradient(loss, model.trainable_variables)
                return tf.add_n([tf.reduce_sum(g) for g in grads])

            total = tf.constant(0.0)
            for _ in tf.range(n):
                total += local(strategy.run(one))[0]
            return total

        return run

    def pass_on(rows: int):  # noqa: ANN202 - the pass alone on `rows` rows of a global batch
        return passes({k: v[:rows] for k, v in whole[0].items()}, whole[1][:rows])

    pass_only = passes(fixed[0], fixed[1])

    grads_like = [tf.ones(v.shape, v.dtype) * 1e-6 for v in model.trainable_variables]

    @tf.function
    def allreduce_only(n):  # noqa: ANN001, ANN202
        total = tf.constant(0.0)
        for _ in tf.range(n):
            out = strategy.run(lambda: tf.distribute.get_replica_context().all_reduce(
                "SUM", [*grads_like, tf.ones([8])]))
            total += tf.reduce_sum(local(out[-1])[0])
        return total

    @tf.function
    def totals_only(n):  # noqa: ANN001, ANN202
        total = tf.constant(0.0)
        for _ in tf.range(n):
            per = strategy.run(lambda: tf.ones([4]))
            total += tf.reduce_sum(strategy.reduce("SUM", per, axis=None))
        return total

    @tf.function
    def update_only(n):  # noqa: ANN001, ANN202
        for _ in tf.range(n):
            strategy.run(lambda: opt.apply_gradients(
                zip(grads_like, model.trainable_variables, strict=True)))
        return tf.constant(0.0)

    n = tf.constant(args.steps, tf.int32)
    zero = tf.constant(0.0)
    parts = {
        "step_off": lambda: off_chunk(it_off, n, zero),
        "step_auto": lambda: auto_chunk(it_auto, n, zero, equal),
        **{k: (lambda b=b: auto_chunk(it_auto, n, zero, b)) for k, b in splits.items()},
        "input_off": lambda: input_only(it_off, n),
        "input_auto": lambda: input_only(it_auto, n),
        "pass": lambda: pass_only(n),
        "allreduce": lambda: allreduce_only(n),
        "totals": lambda: totals_only(n),
        "update": lambda: update_only(n),
        **{f"pass@{x:g}": (lambda f=pass_on(rows_of(x)): f(n)) for x in args.split},
    }
    if args.parts:
        wanted = args.parts.split(",")
        parts = {k: v for k, v in parts.items()
                 if any(k == w or (w.endswith("@") and k.startswith(w)) for w in wanted)}
    for fn in parts.values():  # trace and warm up every part (and the input's cache)
        barrier().numpy()
        fn().numpy()
        fn().numpy()
    times: dict[str, list[float]] = {k: [] for k in parts}
    for _ in range(args.repeats):
        for name, fn in parts.items():
            barrier().numpy()
            t0 = time.perf_counter()
            fn().numpy()
            times[name].append((time.perf_counter() - t0) * 1000 / args.steps)
    out = {
        "task": tf_config.task.name,
        "threads": threads,
        "cpu_affinity": sorted(os.sched_getaffinity(0)),
        "ms_per_step": {k: round(statistics.median(v), 2) for k, v in times.items()},
        "ms_all": {k: [round(x, 2) for x in v] for k, v in times.items()},
    }
    if args.trace:
        logdir = Path(args.trace) / tf_config.task.name.replace(":", "-")
        for name in ("step_off", "step_auto"):
            barrier().numpy()
            tf.profiler.experimental.start(str(logdir / name))
            parts[name]().numpy()
            tf.profiler.experimental.stop()
            out.setdefault("trace", {})[name] = summarise_trace(logdir / name, args.steps)
    Path(args.out).write_text(json.dumps(out))


def summarise_trace(logdir: Path, steps: int, top: int = 25) -> dict:
    """Self time per op type (ms per step, summed over threads) from a profiler trace.

    Events on the host plane's threads nest (a function call holds its ops); an event's self
    time is its duration less its children's on the same thread. Op type is the part of the
    TF op name after ':' (`name:Type`), else the name.
    """
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    files = sorted(logdir.rglob("*.xplane.pb"))
    if not files:
        return {}
    space = xplane_pb2.XSpace()
    space.ParseFromString(files[-1].read_bytes())
    totals: dict[str, float] = {}
    busy: dict[str, float] = {}
    for plane in space.planes:
        if not plane.name.startswith("/host:CPU"):
            continue
        meta = {k: v.name for k, v in plane.event_metadata.items()}
        for line in plane.lines:
            events = sorted(((e.offset_ps, e.offset_ps + e.duration_ps, meta.get(e.metadata_id, "?"))
                             for e in line.events), key=lambda x: (x[0], -x[1]))
            stack: list[list] = []
            for start, end, name in events:
                while stack and stack[-1][1] <= start:
                    done = stack.pop()
                    totals[done[2]] = totals.get(done[2], 0.0) + done[3]
                if stack:
                    stack[-1][3] -= min(end, stack[-1][1]) - start
                stack.append([start, end, _op_type(name), end - start])
            for done in stack:
                totals[done[2]] = totals.get(done[2], 0.0) + done[3]
            busy[line.name] = busy.get(line.name, 0.0) + sum(e.duration_ps for e in line.events)
    per_step = {k: round(v / 1e9 / steps, 3) for k, v in totals.items()}
    ranked = dict(sorted(per_step.items(), key=lambda kv: -kv[1])[:top])
    return {"self_ms_per_step": ranked}


def summarise(workers: list[dict], splits: list[float]) -> dict:
    """worker:1's measured speed, and per split the chunk, the longer pass and the stall."""
    ms = [w["ms_per_step"] for w in workers]
    out: dict = {}
    if all("pass" in m for m in ms):
        out["speed"] = round(ms[0]["pass"] / ms[1]["pass"], 3)
    per_split = {}
    for x in splits:
        key = f"{x:g}"
        step = [m.get(f"step_auto@{key}") for m in ms]
        passes = [m.get(f"pass@{key}") for m in ms]
        if None in step or None in passes:
            continue
        chunk = max(step)  # both end the chunk together (a collective per step); take the later
        per_split[key] = {"step_ms": chunk, "passes_ms": passes,
                          "stall_ms": round(chunk - max(passes), 2)}
    if per_split:
        best = min(per_split, key=lambda k: per_split[k]["step_ms"])
        out["splits"], out["best_split"] = per_split, {"x": float(best), **per_split[best]}
    return out


def _op_type(name: str) -> str:
    return name.split(":")[-1] if ":" in name else name


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=("mlp", "cnn"), default="mlp",
                   help="bench_balance.py's workload (cnn: 32x32x3 images; use --batch 2048)")
    p.add_argument("--batch", type=int, default=8192)
    p.add_argument("--steps", type=int, default=10, help="iterations per timed call")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--slowdown", default=None, help="e.g. worker:1@speed:0.5:10ms")
    p.add_argument("--trace", default=None, help="directory for profiler traces")
    p.add_argument("--env", action="append", default=[], help="KEY=VALUE for the workers")
    p.add_argument("--communication", default="{}", help="train.config.communication (JSON)")
    p.add_argument("--json", default=None, help="write the result here")
    p.add_argument("--split", type=float, nargs="*", default=[],
                   help="also time step_auto with worker:0 on these fractions of the batch")
    p.add_argument("--record", default=None,
                   help="add the summary to this JSON file, keyed by --slowdown (an emulation's "
                        "calibration, read by report_balance.py)")
    p.add_argument("--parts", default="",
                   help="comma-separated parts to time (a name ending in @: every split)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--job", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        _worker(args)
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_balance import MODELS, image_spec, write_transformed

    from baton.graphs.synthetic import synthetic_spec
    from baton.strategies import factory, launcher
    from baton.strategies.job import TrainJob
    from baton.strategies.settings import TrainSettings
    from baton.strategies.slowdown import parse_slowdown

    load = os.getloadavg()
    _, model, model_config = MODELS[args.model]
    spec = image_spec() if args.model == "cnn" else synthetic_spec(32, (16, 8), 4)
    rows = args.batch * (16 if args.model == "cnn" else 40)  # 16 x 2048 images: 400 MB
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = write_transformed(root / "data", spec, rows, 16_384)
        job = TrainJob(
            feature_spec=spec.to_dict(),
            transformed_dir=str(data),
            num_train_examples=rows,
            strategy="multi_worker_mirrored",
            settings=TrainSettings(
                model=model,
                model_params=model_config,
                batch_size=args.batch,
                communication=factory.CommunicationConfig(**json.loads(args.communication)),
            ),
        )
        (root / "job.json").write_text(job.to_json())
        log = io.StringIO()

        def command(task) -> list[str]:  # noqa: ANN001
            argv = [sys.executable, str(Path(__file__).resolve()), "--worker", "--job",
                    str(root / "job.json"), "--out", str(root / f"{task.name}.json"),
                    "--steps", str(args.steps), "--repeats", str(args.repeats),
                    "--parts", args.parts, "--split", *[str(x) for x in args.split]]
            argv += ["--trace", args.trace] if args.trace else []
            return argv

        extra = dict(kv.split("=", 1) for kv in args.env)
        res = launcher.launch(
            launcher.LaunchConfig(workers=2, strategy=job.strategy, state_dir=root / "state",
                                  max_restarts=0, slowdown=parse_slowdown(args.slowdown),
                                  extra_env=extra),
            command, stream=log)
        print("launcher:", json.dumps({"placement": res.placement, "slowdown": res.slowdown}))
        if not res.ok:
            raise SystemExit(f"failed: {res.error}\n{log.getvalue()[-4000:]}")
        workers = [json.loads((root / f"worker:{i}.json").read_text()) for i in range(2)]
    result = {"started_load": [round(x, 2) for x in load], "model": args.model, "batch": args.batch,
              "slowdown": args.slowdown, "applied": res.slowdown, "env": extra,
              "communication": args.communication, "workers": workers,
              "summary": summarise(workers, args.split)}
    for w in workers:
        print(w["task"], json.dumps(w["ms_per_step"]))
    print("summary", json.dumps(result["summary"]))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    if args.record:
        record(Path(args.record), args.slowdown or "none", result)


def record(path: Path, slowdown: str, result: dict) -> None:
    """Keep the calibration of one emulation (the latest run of each `--slowdown`)."""
    known = json.loads(path.read_text()) if path.exists() else {}
    known[slowdown] = {
        "measured": time.strftime("%Y-%m-%d %H:%M"), "started_load": result["started_load"],
        "batch": result["batch"], "applied": result["applied"], **result["summary"],
        "ms_per_step": [w["ms_per_step"] for w in result["workers"]],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(known, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
