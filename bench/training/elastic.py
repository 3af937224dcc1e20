"""Elastic size on the real local launcher: 2 multi-worker-mirrored workers, one lost for good.

Case `lost`: `worker:1@step:<L>:lost` (`--lost-at`, 40 as issue 14 words the run) with `min_workers 1`: the job goes on with one worker from
the last backup, keeping the global batch. Case `lost+replacement` (optional, `--replacement S`):
the same loss, and a replacement node available S seconds later, admitted at the next backup
boundary. Each case checks that the final step count equals the planned steps, and reports the
examples/s of every segment (the launcher's own measure from the chief's status file: between the
first chunk end and the last report of each group, so startup, restore and tracing are left out)
and the chief's examples/s as train_info.json records it (its last group only).

Same model and data as bench_cluster.py: MLP (256, 256), synthetic data, global batch 256. Each
emulated node keeps its share of the machine's cores (1 of 2 here) after the loss, as a real lost
node takes its cores with it: the figures after the loss are what one node does alone.

    .venv/bin/python bench/training/elastic.py [--steps 400] [--replacement 20] [--json OUT]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
HERE = Path(__file__).resolve().parent


def run_case(root: Path, name: str, job, fault: str, replacement: float | None) -> dict:
    from baton.pipeline.stages.train import task_argv
    from baton.strategies import launcher
    from baton.strategies.faults import parse_fault

    d = root / name.replace("+", "_")
    d.mkdir()
    (d / "job.json").write_text(job.to_json())

    def command(task) -> list[str]:
        return task_argv(d / "job.json", d / "out", d / "backup")

    started = time.monotonic()
    res = launcher.launch(
        launcher.LaunchConfig(
            workers=2, strategy=job.strategy, state_dir=d / "state", fault=parse_fault(fault),
            min_workers=1, replacement_after_s=replacement, global_batch_size=job.settings.batch_size,
        ),
        command,
        stream=io.StringIO(),
    )
    if not res.ok:
        raise SystemExit(f"{name} failed: {res.error}")
    info = json.loads((d / "out" / "model" / "train_info.json").read_text())
    planned = job.settings.epochs * job.steps_per_epoch()
    return {
        "case": name,
        "fault": fault,
        "replacement_after_s": replacement,
        "planned_steps": planned,
        "steps": info["steps"],
        "exact": info["steps"] == planned,
        "resumed_from_step": info["resumed_from_step"],
        "chief_examples_per_sec_last_group": info["examples_per_sec"],
        "segments": res.segments,
        "elastic": [{k: e[k] for k in ("kind", "step", "workers_before", "workers_after",
                                        "resumed_from", "steps_recomputed")} for e in res.elastic],
        "wall_seconds": round(time.monotonic() - started, 1),
    }


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--lost-at", type=int, default=40,
                   help="the step worker:1's node is lost at (issue 14: step 40)")
    p.add_argument("--replacement", type=float, default=None,
                   help="also run the case with a replacement available S seconds after the loss")
    p.add_argument("--json", default=str(HERE / "results" / "elastic.json"))
    args = p.parse_args()
    from baton.graphs.synthetic import synthetic_spec
    from baton.strategies.job import TrainJob
    from baton.strategies.settings import TrainSettings

    job = TrainJob(
        feature_spec=synthetic_spec(32, (16, 8), 4).to_dict(),
        synthetic_examples=args.batch * args.steps // 2,
        strategy="multi_worker_mirrored",
        settings=TrainSettings(
            model_params={"hidden_units": [256, 256]},
            epochs=2,
            batch_size=args.batch,
            steps_per_execution=20,
            backup_every=40,
            learning_rate=1e-3,
        ),
    )
    if not 0 < args.lost_at < args.steps:
        p.error(f"--lost-at must be inside the run's 1..{args.steps - 1} steps. "
                f"Received: --lost-at={args.lost_at}")
    cases = [("lost", f"worker:1@step:{args.lost_at}:lost", None)]
    if args.replacement is not None:
        # lost a quarter in, so the one-worker group still runs when the replacement comes
        cases.append(("lost+replacement", f"worker:1@step:{args.steps // 4}:lost",
                      args.replacement))
    rows = []
    load = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory() as tmp:
        for name, fault, replacement in cases:
            row = run_case(Path(tmp), name, job, fault, replacement)
            row["loadavg_before"] = load
            load = [round(x, 2) for x in os.getloadavg()]
            row["loadavg_after"] = load
            rows.append(row)
            print(json.dumps(row), flush=True)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    for r in rows:
        rates = " -> ".join(f"{s['workers']} worker(s) {s['examples_per_sec']} ex/s"
                            for s in r["segments"])
        print(f"{r['case']}: {rates}; steps {r['steps']}/{r['planned_steps']} "
              f"({'exact' if r['exact'] else 'NOT exact'})")
    return 0 if all(r["exact"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
