"""Reliability sweep: kill -9 a worker of a 2-worker mirrored run at a random step, N times.

Each trial must complete, with completed steps equal to planned steps and final weights bitwise
equal to an uninterrupted run with the same seed. Prints one line per trial and a summary; exit
status 1 if any trial fails.

    .venv/bin/python bench/training/sweep_faults.py [--trials 10] [--seed S]
"""

from __future__ import annotations

import argparse
import io
import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def launch(d: Path, job, fault: str | None):
    from baton.pipeline.stages.train import task_argv
    from baton.strategies import launcher
    from baton.strategies.faults import parse_fault

    d.mkdir(parents=True)
    (d / "job.json").write_text(job.to_json())

    def command(task) -> list[str]:
        return task_argv(d / "job.json", d / "out", d / "backup")

    cfg = launcher.LaunchConfig(
        workers=2,
        strategy=job.strategy,
        max_restarts=3,
        fault=parse_fault(fault),
        state_dir=d / "state",
    )
    return launcher.launch(cfg, command, stream=io.StringIO()), d / "out" / "model"


def weights(model_dir: Path):
    import keras

    return keras.models.load_model(model_dir / "model.keras").get_weights()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--seed", type=int, default=None)
    args = p.parse_args()
    import numpy as np

    from baton.graphs.synthetic import synthetic_spec
    from baton.strategies.job import TrainJob
    from baton.strategies.settings import TrainSettings

    job = TrainJob(
        feature_spec=synthetic_spec(4, (3, 2), 3).to_dict(),
        synthetic_examples=2048,
        strategy="multi_worker_mirrored",
        settings=TrainSettings(
            batch_size=64,
            epochs=2,
            steps_per_execution=4,
            backup_every=4,
        ),
    )
    planned = job.settings.epochs * job.steps_per_epoch()
    seed = args.seed if args.seed is not None else int(time.time())
    rng = random.Random(seed)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        ref, ref_dir = launch(Path(tmp) / "reference", job, None)
        if not ref.ok:
            for log in sorted((Path(tmp) / "reference" / "state" / "logs").glob("*.log")):
                print(log.name, log.read_text()[-2000:], file=sys.stderr)
            raise SystemExit(f"reference run failed: {ref.error}")
        ref_w = weights(ref_dir)
        for i in range(args.trials):
            step = rng.randint(1, planned - 1)
            t = time.perf_counter()
            res, out = launch(Path(tmp) / f"trial{i}", job, f"worker:1@step:{step}")
            ok = res.ok
            info = json.loads((out / "train_info.json").read_text()) if ok else {}
            same = ok and all(
                np.array_equal(a, b) for a, b in zip(ref_w, weights(out), strict=True)
            )
            passed = ok and info.get("steps") == planned and same and res.restarts == 1
            failures += not passed
            print(
                json.dumps(
                    {
                        "trial": i,
                        "kill_step": step,
                        "ok": ok,
                        "restarts": res.restarts,
                        "resumed_from": info.get("resumed_from_step"),
                        "steps": info.get("steps"),
                        "planned": planned,
                        "weights_equal": same,
                        "passed": passed,
                        "seconds": round(time.perf_counter() - t, 1),
                    }
                ),
                flush=True,
            )
    print(json.dumps({"seed": seed, "trials": args.trials, "failures": failures}))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
