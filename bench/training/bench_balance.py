"""`balance: auto` vs `off` on 2 multi-worker-mirrored workers, one slowed to half speed.

Each worker is pinned to its own core (the launcher's placement, strategies.local_tasks), as
the two nodes it stands for would be. Worker:1 is slowed from outside its process, in each of
two ways, both at half of its core (`--inject-slowdown`): a CPU quota of 1 ms every 2 ms
(strategies.throttle, the kernel's CFS bandwidth control, what a Kubernetes CPU limit is), and
the launcher's signal duty cycle, stopped half of the time in random slots averaging 10 ms per
pair (strategies.slowdown; what this bench used before). Stop slots are waited out whole at
every collective the slow worker is in while stopped, which a uniformly slower node never
makes anyone do; the finer quota is the nearer rehearsal of a slower node, the coarse one of a
noisy neighbour. Both are reported, with the slowed worker's measured speed (the balancer's
rows/s of each worker in the auto runs), since neither lands at exactly half.

Same synthetic rows, model, global batch, seed and steps for every case; the cases alternate
(off, auto, off, auto, ...) so drift in the machine's load hits both. Examples/s are the
chief's training-loop figures (train_info.json): `examples_per_sec` from the loop's start
(tracing the step and filling the input cache included) and `steady_examples_per_sec` after
the first chunk; accuracy is the final eval accuracy on the same held-out rows. The rows are
written in the `transformed` artifact's columnar format first and read through Baton's own
input pipeline, as a pipeline run reads them.

    .venv/bin/python bench/training/bench_balance.py [--batches 8192:400] [--append]

Two global batches: a large one, where compute (what balancing can win back) is the larger
share of a step, and a small one, where the all-reduce between two processes weighs more.
`--append` adds the runs to the result file (one global batch per invocation keeps each
exclusive hold of the machine to minutes).
"""

from __future__ import annotations

import argparse
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


def run_case(root: Path, name: str, job, slowdown: str | None) -> dict:  # noqa: ANN001
    from baton.pipeline.stages.train import task_argv
    from baton.strategies import launcher
    from baton.strategies.slowdown import parse_slowdown

    d = root / name
    d.mkdir()
    (d / "job.json").write_text(job.to_json())
    log = io.StringIO()
    res = launcher.launch(
        launcher.LaunchConfig(workers=2, strategy=job.strategy, state_dir=d / "state",
                              max_restarts=0, slowdown=parse_slowdown(slowdown)),
        lambda task: task_argv(d / "job.json", d / "out", d / "backup"),
        stream=log,
    )
    if not res.ok:
        raise SystemExit(f"{name} failed: {res.error}\n{log.getvalue()[-3000:]}")
    info = json.loads((d / "out" / "model" / "train_info.json").read_text())
    hist = json.loads((d / "out" / "model" / "history.json").read_text())
    bal = info.get("balance") or {}
    return {
        "case": name,
        "balance": job.balance,
        "slowdown": slowdown or "none",
        "emulation": _emulation(slowdown),
        "placement": res.placement,
        "applied": res.slowdown,
        "examples_per_sec": info["examples_per_sec"],
        "steady_examples_per_sec": info.get("steady_examples_per_sec"),
        "seconds": info["seconds"],
        "steps": info["steps"],
        "eval_accuracy": round(hist[-1].get("eval_accuracy", 0), 4),
        "final_batch": bal.get("final_batch", [job.settings.batch_size // 2] * 2),
        "rows_per_sec": bal.get("rows_per_sec"),
        "rebalances": bal.get("changes", 0),
        "running_fraction": _running_fraction(res.slowdown),
    }


def _running_fraction(applied: dict) -> float | None:
    """The share of the wall clock worker:1 was let run (signals: the launcher's own count of
    the time between its SIGCONT and SIGSTOP); None at full speed and under the quota."""
    run, stop = applied.get("running_s"), applied.get("stopped_s")
    return round(run / (run + stop), 3) if run is not None and stop and run + stop > 0 else None


def write_transformed(root: Path, spec, n_train: int, n_eval: int, files: int = 4) -> Path:
    """Synthetic rows in the `transformed` artifact's format (columnar TFRecord chunks), so the
    bench reads them through Baton's real input pipeline (graphs.input_pipeline), as a pipeline
    run would; `synthetic_dataset` builds one tf.data element per row, which would make the
    input, not the step, the bottleneck."""
    import numpy as np
    import tensorflow as tf

    from baton.graphs.input_pipeline import column_dtypes
    from baton.graphs.synthetic import synthetic_arrays
    from baton.pipeline.dataplane.records.transformed_io import write_chunks

    dtypes = column_dtypes(spec)
    for split, n, seed in (("train", n_train, 0), ("eval", n_eval, 1)):
        feats, labels = (image_arrays(spec, n, seed) if spec.images
                         else synthetic_arrays(spec, n, seed=seed))
        cols = {k: np.asarray(v).astype(dtypes[k]) for k, v in feats.items()}
        cols[spec.label.name] = np.asarray(labels).astype(dtypes[spec.label.name])
        (root / split).mkdir(parents=True)
        per = -(-n // files)
        for i in range(files):
            part = {k: v[i * per:(i + 1) * per] for k, v in cols.items()}
            with tf.io.TFRecordWriter(str(root / split / f"part-{i:05d}.tfrecord")) as w:
                write_chunks(w, part, 4096)
    return root


def image_arrays(spec, n: int, seed: int):  # noqa: ANN001, ANN201
    """`n` noise images of the spec's one image feature (scaled as normalised images are), the
    label's quadrant of the first channel brightened by twice the noise's deviation, so a CNN
    learns it within an epoch. At unit noise the CNN's start was unstable at a global batch of
    2,048: depending on the seed (not on `balance`) it collapsed to one class for good."""
    import numpy as np

    image = spec.images[0]
    h, w, _ = image.shape
    rng = np.random.default_rng(seed)
    x = (0.25 * rng.standard_normal((n, *image.shape))).astype(np.float32)
    labels = rng.integers(0, 4, n) % spec.label.num_classes
    for q in range(4):
        rows = labels == q
        top, left = (q // 2) * (h // 2), (q % 2) * (w // 2)
        x[rows, top:top + h // 2, left:left + w // 2, 0] += 0.5
    return {image.name: x}, labels


def image_spec(side: int = 32, classes: int = 4):  # noqa: ANN201
    """One `side` x `side` x 3 image feature and a label of `classes` classes."""
    from baton.graphs.feature_spec import Feature, FeatureSpec, Image, Label, RawFeature

    shape = (side, side, 3)
    return FeatureSpec((RawFeature("image", "float32", shape=shape),),
                       (Feature("image", "numeric", shape=shape),),
                       Label("label", "classification", tuple(str(i) for i in range(classes))),
                       images=(Image("image", shape),))


# The workloads: the MLP (most of a step is compute, but the all-reduce of its 290k
# parameters and the per-step input weigh ~20 % at equal speeds) and Baton's CNN on 32x32x3
# images (far more compute per parameter, as image models are).
MODELS = {
    "mlp": ("mlp 512x512 on 32 numeric + 2 categorical features, 4 classes", "mlp",
            {"hidden_units": [512, 512]}),
    "cnn": ("cnn (16, 32 filters, dense 64) on 32x32x3 images, 4 classes", "cnn", {}),
}


SLOWDOWNS = {  # {speed} is --speed
    "quota": "worker:1@speed:{speed}:2ms:quota",
    "signals": "worker:1@speed:{speed}:10ms:signals",
}


def _emulation(slowdown: str | None) -> str:
    """`quota@0.5:2ms` from `worker:1@speed:0.5:2ms:quota`; "none" at full speed."""
    if not slowdown:
        return "none"
    from baton.strategies.slowdown import parse_slowdown

    slow = parse_slowdown(slowdown)
    assert slow is not None
    return f"{slow.method or 'quota'}@{slow.speed:g}:{slow.period_ms}ms"


def _slowdowns(names: str, speed: float, specs: list[str]) -> list[str]:
    """The `--inject-slowdown` specs to run: presets by name (at `speed`), then `specs`."""
    from baton.strategies import throttle

    out = [SLOWDOWNS[e].format(speed=f"{speed:g}") for e in names.split(",") if e]
    out += specs
    if throttle.controller() is None and any(x.endswith(":quota") for x in out):
        print("no writable cgroup CPU controller here: the quota emulations are left out")
        out = [x for x in out if not x.endswith(":quota")]
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batches", default="8192:400,1024:1600",
                   help="global batch:steps pairs, one set of cases each")
    p.add_argument("--repeats", type=int, default=1,
                   help="rounds of all cases (alternating); --append adds rounds to the file")
    p.add_argument("--emulations", default="quota,signals",
                   help=f"how worker:1 is slowed, presets of {', '.join(SLOWDOWNS)} (or '')")
    p.add_argument("--slowdown", action="append", default=[],
                   help="an --inject-slowdown spec to run as well (repeatable)")
    p.add_argument("--speed", type=float, default=0.5,
                   help="worker:1's share of its core under the presets")
    p.add_argument("--no-even", action="store_true", help="leave out the full-speed cases")
    p.add_argument("--append", action="store_true", help="add to the runs in --json")
    p.add_argument("--model", choices=sorted(MODELS), default="mlp", help="the workload")
    p.add_argument("--json", default=str(ROOT / "bench/training/results/balance.json"))
    args = p.parse_args()
    import dataclasses

    from baton.graphs.synthetic import synthetic_spec
    from baton.strategies.job import TrainJob
    from baton.strategies.settings import TrainSettings

    emulations = _slowdowns(args.emulations, args.speed, args.slowdown)
    plan: list[tuple[str, str | None]] = [] if args.no_even else [("off", None), ("auto", None)]
    for slow in emulations:
        plan += [("off", slow), ("auto", slow)]
    out_file = Path(args.json)
    previous = json.loads(out_file.read_text()) if args.append and out_file.exists() else {}
    rows: list[dict] = list(previous.get("runs", []))
    started = time.time()
    load = os.getloadavg()
    configs = [tuple(int(x) for x in pair.split(":")) for pair in args.batches.split(",")]
    epochs = 4
    described, model, model_config = MODELS[args.model]
    spec = image_spec() if args.model == "cnn" else synthetic_spec(32, (16, 8), 4)
    with tempfile.TemporaryDirectory() as tmp:
        data = {batch: write_transformed(Path(tmp) / f"data-{batch}", spec,
                                         batch * steps // epochs, 16_384)
                for batch, steps in configs}
        for _ in range(args.repeats):
            for batch, steps in configs:
                done = [x.get("repeat", 0) for x in rows if x["global_batch"] == batch]
                rep = max(done) + 1 if done else 0  # rounds numbered across --append
                base = TrainJob(
                    feature_spec=spec.to_dict(),
                    transformed_dir=str(data[batch]),
                    num_train_examples=batch * steps // epochs,
                    strategy="multi_worker_mirrored",
                    settings=TrainSettings(
                        model=model,
                        model_params=model_config,
                        epochs=epochs,
                        batch_size=batch,
                        steps_per_execution=10,
                    ),
                )
                for mode, slowdown in plan:
                    job = dataclasses.replace(base, balance=mode)
                    name = f"b{batch}-{mode}-{_emulation(slowdown)}-{rep}"
                    row = run_case(Path(tmp), name.replace(":", "_"), job, slowdown)
                    row["global_batch"], row["steps_planned"], row["repeat"] = batch, steps, rep
                    row["load_after"] = round(os.getloadavg()[0], 2)
                    row["started_load"] = [round(x, 2) for x in load]
                    rows.append(row)
                    print(json.dumps({k: v for k, v in row.items() if k != "applied"}),
                          flush=True)
    batches = sorted({(x["global_batch"], x["steps_planned"]) for x in rows}, reverse=True)
    out = {
        "started": previous.get("started") or time.strftime(
            "%Y-%m-%d %H:%M", time.localtime(started)),
        "invocations": [*previous.get("invocations", []), {
            "started": time.strftime("%Y-%m-%d %H:%M", time.localtime(started)),
            "load_at_start": [round(x, 2) for x in load], "batches": args.batches,
            "emulations": emulations, "cpu": cpu_host()}],
        "load_at_start": previous.get("load_at_start") or [round(x, 2) for x in load],
        "cpu_count": os.cpu_count(),
        "model": described,
        "slowdowns": sorted({x["slowdown"] for x in rows if x["slowdown"] != "none"}),
        "epochs": epochs,
        "batches": [{"global_batch": b, "steps": n} for b, n in batches],
        "headline_batch": batches[0][0],
        "runs": rows,
        "summary": summarise(rows),
    }
    out_file.parent.mkdir(parents=True, exist_ok=True)
    out_file.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out["summary"], indent=2))


def cpu_host() -> dict:
    """The host's CPU model and whether TensorFlow's oneDNN kernels ran (the node inventory's
    own report): without them this CNN's convolutions ran ~3.5x slower on one core, so rates
    from different hosts are not comparable."""
    from baton.strategies.inventory import cpu_kernels

    return cpu_kernels()


def summarise(rows: list[dict]) -> dict:
    """Per global batch and emulation ("even": full speed): the median of each case's runs,
    auto over off as the ratio of the medians, and each round's own ratio (auto over the off
    run of the same round, which ran just before it) so the spread is in sight."""

    def runs(batch: int, mode: str, emulation: str, key: str) -> dict[int, float]:
        return {x.get("repeat", 0): x[key] for x in rows
                if x["global_batch"] == batch and x["balance"] == mode
                and x.get("emulation", "none") == emulation and x.get(key) is not None}

    summary: dict = {}
    for batch in sorted({x["global_batch"] for x in rows}, reverse=True):
        s: dict = {}
        emulations = sorted({x.get("emulation", "none") for x in rows
                             if x["global_batch"] == batch})
        for e in emulations:
            entry: dict = {}
            for key in ("examples_per_sec", "steady_examples_per_sec", "eval_accuracy"):
                off, auto = runs(batch, "off", e, key), runs(batch, "auto", e, key)
                if not off or not auto:
                    continue
                m_off, m_auto = statistics.median(off.values()), statistics.median(auto.values())
                entry[key] = {
                    "off": m_off, "auto": m_auto, "n": [len(off), len(auto)],
                    "ratio": round(m_auto / m_off, 3) if m_off else None,
                    "ratio_by_round": [round(auto[r] / off[r], 3) for r in sorted(auto)
                                       if r in off and off[r]],
                }
            speeds = [x["rows_per_sec"][1] / x["rows_per_sec"][0] for x in rows
                      if x["global_batch"] == batch and x.get("emulation") == e
                      and x.get("rows_per_sec") and x["rows_per_sec"][0] > 0]
            fractions = [x["running_fraction"] for x in rows
                         if x["global_batch"] == batch and x.get("emulation") == e
                         and x.get("running_fraction") is not None]
            if e != "none":
                entry["balancer_speed_w1_over_w0"] = (
                    round(statistics.median(speeds), 3) if speeds else None)
                entry["running_fraction"] = (
                    round(statistics.median(fractions), 3) if fractions else None)
            s["even" if e == "none" else e] = entry
        summary[str(batch)] = s
    return summary


if __name__ == "__main__":
    main()
