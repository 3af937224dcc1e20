"""`balance: auto` vs `off` on 2 multi-worker-mirrored workers, one slowed to half speed.

Worker:1 is slowed from outside its process: the launcher stops and continues it on a duty cycle
(`--inject-slowdown worker:1@speed:0.5`, stopped half of the time in slots of random length,
strategies/slowdown.py), as a noisy neighbour or a slower node would look. Same synthetic rows,
model, global batch, seed and steps for every case; the cases alternate (off, auto, off, auto,
...) so drift in the machine's load hits both. Examples/s are the chief's training-loop figure
(train_info.json, startup excluded); accuracy is the final eval accuracy on the same held-out
rows. The rows are written in the `transformed` artifact's columnar format first and read
through Baton's own input pipeline, as a pipeline run reads them.

    .venv/bin/python bench/training/bench_balance.py [--batches 8192:80,1024:240] [--repeats 1]

Two global batches: a large one, where compute (what balancing can win back) is the larger
share of a step, and a small one, where the all-reduce between two processes on two cores
weighs more. Both are reported.
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


def run_case(root: Path, name: str, job, slowdown: str | None) -> dict:
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
        "examples_per_sec": info["examples_per_sec"],
        "seconds": info["seconds"],
        "steps": info["steps"],
        "eval_accuracy": round(hist[-1].get("eval_accuracy", 0), 4),
        "final_batch": bal.get("final_batch", [job.batch_size // 2] * 2),
        "rows_per_sec": bal.get("rows_per_sec"),
        "rebalances": bal.get("changes", 0),
    }


def write_transformed(root: Path, spec, n_train: int, n_eval: int, files: int = 4) -> Path:
    """Synthetic rows in the `transformed` artifact's format (columnar TFRecord chunks), so the
    bench reads them through Baton's real input pipeline (graphs.input_pipeline), as a pipeline
    run would; `synthetic_dataset` builds one tf.data element per row, which would make the
    input, not the step, the bottleneck."""
    import numpy as np
    import tensorflow as tf

    from baton.graphs.input_pipeline import column_dtypes
    from baton.graphs.synthetic import synthetic_arrays
    from baton.pipeline.dataplane.transformed_io import write_chunks

    dtypes = column_dtypes(spec)
    for split, n, seed in (("train", n_train, 0), ("eval", n_eval, 1)):
        feats, labels = synthetic_arrays(spec, n, seed=seed)
        cols = {k: np.asarray(v).astype(dtypes[k]) for k, v in feats.items()}
        cols[spec.label.name] = np.asarray(labels).astype(dtypes[spec.label.name])
        (root / split).mkdir(parents=True)
        per = -(-n // files)
        for i in range(files):
            part = {k: v[i * per:(i + 1) * per] for k, v in cols.items()}
            with tf.io.TFRecordWriter(str(root / split / f"part-{i:05d}.tfrecord")) as w:
                write_chunks(w, part, 4096)
    return root


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batches", default="8192:80,1024:240",
                   help="global batch:steps pairs, one set of cases each")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--slowdown", default="worker:1@speed:0.5:10ms")
    p.add_argument("--json", default=str(ROOT / "bench/training/results/balance.json"))
    args = p.parse_args()
    import dataclasses

    from baton.graphs.synthetic import synthetic_spec
    from baton.strategies.job import TrainJob

    plan = [("off", None), ("auto", None), ("off", args.slowdown), ("auto", args.slowdown)]
    rows: list[dict] = []
    started = time.time()
    load = os.getloadavg()
    configs = [tuple(int(x) for x in pair.split(":")) for pair in args.batches.split(",")]
    spec = synthetic_spec(32, (16, 8), 4)
    with tempfile.TemporaryDirectory() as tmp:
        data = {batch: write_transformed(Path(tmp) / f"data-{batch}", spec, batch * steps // 2,
                                         16_384) for batch, steps in configs}
        for r in range(args.repeats):
            for batch, steps in configs:
                base = TrainJob(
                    feature_spec=spec.to_dict(),
                    transformed_dir=str(data[batch]),
                    num_train_examples=batch * steps // 2,
                    model_config={"hidden_units": [512, 512]},
                    epochs=2,
                    batch_size=batch,
                    steps_per_execution=10,
                    strategy="multi_worker_mirrored",
                )
                for mode, slowdown in plan:
                    job = dataclasses.replace(base, balance=mode)
                    name = f"b{batch}-{mode}-{'slow' if slowdown else 'even'}-{r}"
                    row = run_case(Path(tmp), name, job, slowdown)
                    row["global_batch"], row["load_after"] = batch, round(os.getloadavg()[0], 2)
                    rows.append(row)
                    print(json.dumps(row), flush=True)

    def median(batch: int, mode: str, slowed: bool, key: str) -> float:
        return statistics.median(
            x[key] for x in rows if x["global_batch"] == batch and x["balance"] == mode
            and (x["slowdown"] != "none") == slowed)

    summary = {}
    for batch, _ in configs:
        s = {k: median(batch, m, slowed, "examples_per_sec") for k, m, slowed in (
            ("off_even", "off", False), ("auto_even", "auto", False),
            ("off_slow", "off", True), ("auto_slow", "auto", True))}
        s["acc_off_slow"] = median(batch, "off", True, "eval_accuracy")
        s["acc_auto_slow"] = median(batch, "auto", True, "eval_accuracy")
        s["speedup_auto_vs_off"] = round(s["auto_slow"] / s["off_slow"], 3)
        s["auto_vs_off_even"] = round(s["auto_even"] / s["off_even"], 3)
        summary[str(batch)] = s
    out = {
        "started": time.strftime("%Y-%m-%d %H:%M", time.localtime(started)),
        "load_at_start": [round(x, 2) for x in load],
        "cpu_count": os.cpu_count(),
        "model": "mlp 512x512 on 32 numeric + 2 categorical features, 4 classes",
        "slowdown": args.slowdown,
        "memoryless": True,  # random slot lengths (strategies/slowdown.py), since 2026-12-02
        "batches": [{"global_batch": b, "steps": n} for b, n in configs],
        "headline_batch": configs[0][0],
        "runs": rows,
        "summary": summary,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
