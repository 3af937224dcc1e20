"""Local cluster throughput: one process vs 2 multi-worker-mirrored workers (fp32 / fp16
all-reduce) vs 2 workers + 1 PS, on the same synthetic data and model.

Examples/s come from the chief's `train_info.json` (training loop only, startup excluded);
all-reduce bytes per step are computed from the gradient sizes (ring all-reduce sends
2 (n-1)/n of the buffer per worker). The machine has 2 cores: 2 workers + a PS share them, so
this measures overhead and correctness of the plumbing, not scaling.

    .venv/bin/python bench/training/bench_cluster.py [--steps 400] [--json OUT]
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def run_case(root: Path, name: str, job, workers: int, ps: int) -> dict:
    from baton.strategies import launcher
    from baton.strategies.loop import TaskRole
    from baton.strategies.task import run_task, write_model_artifact

    d = root / name
    d.mkdir()
    if workers == 1 and ps == 0:
        result = run_task(job, None, TaskRole(backup_dir=None))
        write_model_artifact(d / "out" / "model", job, result, {})
    else:
        (d / "job.json").write_text(job.to_json())

        from baton.pipeline.stages.train import task_argv

        def command(task) -> list[str]:
            return task_argv(d / "job.json", d / "out", d / "backup")

        res = launcher.launch(
            launcher.LaunchConfig(
                workers=workers, ps=ps, strategy=job.strategy, state_dir=d / "state"
            ),
            command,
            stream=io.StringIO(),
        )
        if not res.ok:
            raise SystemExit(f"{name} failed: {res.error}")
    info = json.loads((d / "out" / "model" / "train_info.json").read_text())
    hist = json.loads((d / "out" / "model" / "history.json").read_text())
    return {
        "case": name,
        "examples_per_sec": info["examples_per_sec"],
        "steps": info["steps"],
        "params": info["params"],
        "eval_accuracy": round(hist[-1].get("eval_accuracy", 0), 4),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--json")
    args = p.parse_args()
    import dataclasses

    from baton.graphs.synthetic import synthetic_spec
    from baton.strategies.factory import allreduce_bytes_per_step
    from baton.strategies.job import TrainJob
    from baton.strategies.settings import TrainSettings

    n = args.batch * args.steps // 2
    base = TrainJob(
        feature_spec=synthetic_spec(32, (16, 8), 4).to_dict(),
        synthetic_examples=n,
        strategy="one_device",
        settings=TrainSettings(
            model_params={"hidden_units": [256, 256]},
            epochs=2,
            batch_size=args.batch,
            steps_per_execution=20,
            learning_rate=1e-3,
        ),
    )
    cases = [
        ("1 process (one_device)", base, 1, 0, None),
        (
            "2 workers mirrored fp32",
            dataclasses.replace(base, strategy="multi_worker_mirrored"),
            2,
            0,
            False,
        ),
        (
            "2 workers mirrored fp16 all-reduce",
            dataclasses.replace(
                base, strategy="multi_worker_mirrored", communication={"fp16_allreduce": True}
            ),
            2,
            0,
            True,
        ),
        ("2 workers + 1 PS", dataclasses.replace(base, strategy="parameter_server"), 2, 1, None),
    ]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, job, workers, ps, fp16) in enumerate(cases):
            row = run_case(Path(tmp), f"case{i}", job, workers, ps)
            row["case"] = name
            row["allreduce_bytes_per_step_per_worker"] = (
                allreduce_bytes_per_step(row["params"], bool(fp16), workers)
                if fp16 is not None
                else 0
            )
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
