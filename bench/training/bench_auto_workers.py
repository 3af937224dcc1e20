"""`workers: auto` on this machine: the probe's choice, and every alternative trained in full.

The train stage (pipeline/stages/train.py) runs on the same transformed synthetic data for each
case, every case in a fresh process (TensorFlow's import and thread pools start clean):

- `auto-speed`, `auto-energy`: `workers: auto, max_workers: 2` with `objective: speed` /
  `energy`: the probe's table (1 process vs 2 multi-worker-mirrored workers, one warm-up chunk
  plus `probe_steps` timed steps each), its choice, and the run it then trained;
- `full-1`, `full-2`: the same training with `workers: 1` and `workers: 2`, to check the choice
  against what each alternative actually does over a whole run.

Figures: examples/s is the training loop's (train_info.json: startup excluded); J/example of a
full run is the stage's energy (pipeline.accounting.Meter: this process and the cluster's
waited-for task processes, RAPL when readable, else the Green Algorithms estimate from CPU
seconds) divided by the examples trained: startup (TensorFlow import, collective setup)
included, as a user pays it. The probe's J/example covers its timed window only.

    .venv/bin/python bench/training/bench_auto_workers.py [--rows 60000] [--epochs 2]
        [--probe-steps 30] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

CASES = {
    "auto-speed": {"workers": "auto", "max_workers": 2, "objective": "speed"},
    "auto-energy": {"workers": "auto", "max_workers": 2, "objective": "energy"},
    "full-1": {"workers": 1},
    "full-2": {"workers": 2},
}


def train_config(args: argparse.Namespace) -> dict:
    return {"model": "mlp", "hidden_units": [256, 256], "epochs": args.epochs,
            "batch_size": args.batch, "steps_per_execution": 10, "probe_steps": args.probe_steps}


def run_one(args: argparse.Namespace) -> None:
    """One case, in this (fresh) process: prints one JSON line."""
    from baton.pipeline.accounting import Meter
    from baton.pipeline.testing import run_stage

    data = json.loads(Path(args.data).read_text())
    config = {**train_config(args), **CASES[args.case]}
    root = Path(args.root) / args.case
    with Meter() as meter:
        outputs, metrics = run_stage("train", config, data, root)
    info = json.loads((outputs["model"] / "train_info.json").read_text())
    history = json.loads((outputs["model"] / "history.json").read_text())
    usage = meter.usage
    usage.examples = metrics["examples_trained"]
    row = {
        "case": args.case,
        "strategy": info["strategy"],
        "workers": info["num_replicas"],  # one CPU replica per worker here
        "steps": info["steps"],
        "examples_per_sec": info["examples_per_sec"],
        "train_seconds": info["seconds"],
        "stage_wall_s": round(usage.wall_s, 1),
        "stage_cpu_s": round(usage.cpu_s, 1),
        "energy_j": round(usage.energy_j, 1),
        "j_per_example": usage.j_per_example,
        "energy_method": usage.energy_method,
        "eval_accuracy": round(history[-1].get("eval_accuracy", 0.0), 4),
        "load_before": round(os.getloadavg()[0], 1),
    }
    if "topology_probe" in info:
        row["probe"] = info["topology_probe"]
    print("RESULT " + json.dumps(row), flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=60_000)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--probe-steps", type=int, default=30)
    p.add_argument("--json", default=str(ROOT / "bench/training/results/auto_workers.json"))
    p.add_argument("--case", help=argparse.SUPPRESS)
    p.add_argument("--data", help=argparse.SUPPRESS)
    p.add_argument("--root", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.case:
        run_one(args)
        return
    from baton.pipeline.testing import run_stage

    started = time.time()
    load = os.getloadavg()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        ingest = {"source": "synthetic",
                  "synthetic": {"rows": args.rows, "numeric": 16, "categorical": 2,
                                "vocab_size": 50, "classes": 4}}
        out, _ = run_stage("ingest", ingest, {}, Path(tmp) / "data")
        t_out, _ = run_stage("transform", {}, {"examples": out["examples"]}, Path(tmp) / "data")
        data = {"transformed": str(t_out["transformed"]),
                "transform_graph": str(t_out["transform_graph"])}
        (Path(tmp) / "data.json").write_text(json.dumps(data))
        for case in CASES:
            cmd = [sys.executable, __file__, "--case", case, "--data", str(Path(tmp) / "data.json"),
                   "--root", tmp, "--epochs", str(args.epochs), "--batch", str(args.batch),
                   "--probe-steps", str(args.probe_steps)]
            res = subprocess.run(cmd, capture_output=True, text=True)
            line = next((x for x in res.stdout.splitlines() if x.startswith("RESULT ")), None)
            if res.returncode or line is None:
                raise SystemExit(f"{case} failed ({res.returncode}):\n{res.stderr[-4000:]}")
            row = json.loads(line[len("RESULT "):])
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "probe"}), flush=True)
            if "probe" in row:
                print("  " + row["probe"]["reason"], flush=True)
    full = {r["workers"]: r for r in rows if r["case"].startswith("full-")}
    verdict = {}
    for r in rows:
        if "probe" not in r:
            continue
        objective = r["probe"]["objective"]
        key = "examples_per_sec" if objective == "speed" else "j_per_example"
        pick = max if objective == "speed" else min
        best = pick(full.values(), key=lambda x: x[key])["workers"]
        verdict[r["case"]] = {"chose": r["probe"]["chosen"]["workers"], "full_run_best": best,
                              "right": r["probe"]["chosen"]["workers"] == best, "by": key}
    out = {
        "started": time.strftime("%Y-%m-%d %H:%M", time.localtime(started)),
        "load_at_start": [round(x, 2) for x in load],
        "cpu_count": os.cpu_count(),
        "rows": args.rows,
        "global_batch": args.batch,
        "epochs": args.epochs,
        "probe_steps": args.probe_steps,
        "model": "mlp (256, 256) on 16 numeric + 2 categorical (vocab 50) synthetic features, "
                 "4 classes",
        "runs": rows,
        "verdict": verdict,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(verdict, indent=2))


if __name__ == "__main__":
    main()
