"""`balance: auto` vs `off` on 2 multi-worker-mirrored workers, one slowed to half speed.

Worker:1 is slowed from outside its process: the launcher stops and continues it on a fixed
duty cycle (`--inject-slowdown worker:1@speed:0.5`, SIGSTOP for half of every period), as a
noisy neighbour or a slower node would look. Same synthetic rows, model, global batch, seed and
steps for every case; the cases alternate (off, auto, off, auto, ...) so drift in the machine's
load hits both. Examples/s are the chief's training-loop figure (train_info.json, startup
excluded); accuracy is the final eval accuracy on the same held-out rows.

    .venv/bin/python bench/training/bench_balance.py [--steps 240] [--repeats 2] [--json OUT]
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


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=240)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--speed", type=float, default=0.5)
    p.add_argument("--json", default=str(ROOT / "bench/training/results/balance.json"))
    args = p.parse_args()
    import dataclasses

    from baton.graphs.synthetic import synthetic_spec
    from baton.strategies.job import TrainJob

    base = TrainJob(
        feature_spec=synthetic_spec(32, (16, 8), 4).to_dict(),
        synthetic_examples=args.batch * args.steps // 2,
        model_config={"hidden_units": [512, 512]},
        epochs=2,
        batch_size=args.batch,
        steps_per_execution=10,
        strategy="multi_worker_mirrored",
    )
    slow = f"worker:1@speed:{args.speed:g}"
    plan = [("off", None), ("off", slow), ("auto", slow)]
    rows: list[dict] = []
    started = time.time()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for mode, slowdown in plan:
                job = dataclasses.replace(base, balance=mode)
                name = f"{mode}-{'slow' if slowdown else 'even'}-{r}"
                row = run_case(Path(tmp), name, job, slowdown)
                rows.append(row)
                print(json.dumps(row), flush=True)

    def median(mode: str, slowed: bool, key: str) -> float:
        vals = [x[key] for x in rows if x["balance"] == mode and
                (x["slowdown"] != "none") == slowed]
        return statistics.median(vals)

    summary = {
        "off_even": median("off", False, "examples_per_sec"),
        "off_slow": median("off", True, "examples_per_sec"),
        "auto_slow": median("auto", True, "examples_per_sec"),
        "acc_off_slow": median("off", True, "eval_accuracy"),
        "acc_auto_slow": median("auto", True, "eval_accuracy"),
    }
    summary["speedup_auto_vs_off"] = round(summary["auto_slow"] / summary["off_slow"], 3)
    out = {
        "started": time.strftime("%Y-%m-%d %H:%M", time.localtime(started)),
        "load_at_start": [round(x, 2) for x in load],
        "cpu_count": os.cpu_count(),
        "steps": base.epochs * base.steps_per_epoch(),
        "global_batch": args.batch,
        "model": "mlp 512x512 on 32 numeric + 2 categorical features, 4 classes",
        "slowdown": slow,
        "runs": rows,
        "summary": summary,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
