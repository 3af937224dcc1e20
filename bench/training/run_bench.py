"""Training benchmarks for `make bench`: single-process loop vs Keras `model.fit` with the
matmul roof, local clusters with and without fp16 all-reduce, the kill -9 fault sweep, and
balance auto vs off with one of two workers slowed down.
`workers: auto` (the probe's choice against each alternative trained in full).

Raw results go to bench/training/results/ (single.json, cluster.json, sweep.jsonl, and
meta.json: date, machine, versions, load average around each benchmark); report.py then writes
docs/benchmarks-training.md from them, as the data and serving benchmarks write theirs.
`python bench/training/report.py` re-renders the document from the last results alone.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


def _load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _run(script: str, args: list[str], stdout_to: Path | None = None) -> int:
    """Runs one benchmark script; with `stdout_to`, its stdout is also written there."""
    print(f"-- bench/training/{script}", flush=True)
    cmd = [sys.executable, str(HERE / script), *args]
    if stdout_to is None:
        return subprocess.call(cmd)
    with open(stdout_to, "w") as out, subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                                       text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            out.write(line)
    return proc.returncode


def main() -> int:
    RESULTS.mkdir(exist_ok=True)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": platform.machine(),
            "cpus": os.cpu_count(), "tensorflow": _version("tensorflow"),
            "keras": _version("keras"), "load_average": {}}
    runs = [
        ("single", "bench_single.py", ["--json", str(RESULTS / "single.json")], None),
        ("cluster", "bench_cluster.py", ["--json", str(RESULTS / "cluster.json")], None),
        ("sweep", "sweep_faults.py", ["--trials", "10"], RESULTS / "sweep.jsonl"),
        ("own_model", "bench_own_model.py", ["--json", str(RESULTS / "own_model.json")], None),
        ("step_vs_fit", "bench_step_vs_fit.py", ["--json", str(RESULTS / "step_vs_fit.json")],
         None),
        ("balance", "bench_balance.py", ["--json", str(RESULTS / "balance.json")], None),
        ("auto_workers", "bench_auto_workers.py", ["--json", str(RESULTS / "auto_workers.json")],
         None),
    ]
    rc = 0
    for name, script, args, stdout_to in runs:
        before = _load()
        rc |= _run(script, args, stdout_to)
        meta["load_average"][name] = f"{before} / {_load()}"
    (RESULTS / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    sys.path.insert(0, str(HERE))
    from report import write_report

    print(f"wrote {write_report(RESULTS, HERE.parents[1] / 'docs' / 'benchmarks-training.md')}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
