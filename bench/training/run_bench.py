"""Training benchmarks for `make bench`: single-process loop vs Keras `model.fit` with the
matmul roof, local clusters with and without fp16 all-reduce, and the kill -9 fault sweep.

Raw results go to bench/training/results/; the tables in docs/benchmarks-training.md are
written from them by hand after a quiet run (the figures move with machine load).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


def main() -> int:
    RESULTS.mkdir(exist_ok=True)
    runs = [
        ["bench_single.py", "--json", str(RESULTS / "single.json")],
        ["bench_cluster.py", "--json", str(RESULTS / "cluster.json")],
        ["sweep_faults.py", "--trials", "10"],
    ]
    rc = 0
    for script, *args in runs:
        print(f"-- bench/training/{script}", flush=True)
        rc |= subprocess.call([sys.executable, str(HERE / script), *args])
    return rc


if __name__ == "__main__":
    sys.exit(main())
