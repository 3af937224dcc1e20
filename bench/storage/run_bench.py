"""Object-storage benchmark: the same work with the run directory on local disk and on a local
S3 server (SeaweedFS on 127.0.0.1), side by side in one run (issue 38).

Cases, each in a fresh subprocess with its libraries imported before the timer starts (as
bench/data does), local and S3 alternating, `--repeat` times each (median reported):

- `pipeline`: `run_pipeline` of ingest (source: csv) + transform on bench/data's `current`
  table (`--rows`, default 1,000,000: 4 z-scored floats, a 100-value vocabulary, a label),
  with `--runs-dir` a local directory or `s3://bench/runs`: the S3 side includes every
  commit (the files uploaded, the transform's shards written by its Beam workers straight to
  the bucket and read back for the manifest, the lineage records) and a fresh node cache.
- `input`: the training input pipeline (bench/data's `case_input`: examples/s of the trainer's
  own loop) on the transformed artifact of a local run, and on the one of the S3 run staged
  onto a node with an empty cache by another process first (the staging time reported apart),
  each measured by a fresh process, the order alternating.
- `serve`: `baton serve` started on a model base path holding one version, until it is
  AVAILABLE (loaded and warmed up): a local base, and an S3 base pushed by Baton (downloaded
  into an empty node cache first). Two models: bench/serving's MLP and the penguins model
  (with its warmup requests).

Writes bench/storage/results/storage.json and docs/benchmarks-storage.md.

    python bench/storage/run_bench.py [--rows N] [--repeat 3] [--lock FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench" / "data"), str(ROOT / "tests" / "serving")]
import run_bench as data_bench  # noqa: E402  (bench/data: the table, the input case, the lock)

PY = sys.executable
SPEC = """\
pipeline: storage
stages:
  - name: ingest
    type: ingest
    config: {{source: csv, path: "{csv}", label: label, splits: {{train: 1.0}},
              rows_per_shard: 1000000}}
  - name: transform
    type: transform
    inputs: {{examples: ingest.examples}}
"""


def case_pipeline(spec: str, runs: str) -> dict:
    data_bench._preload("transform")
    data_bench._preload("ingest")
    import pyarrow.fs  # noqa: F401  (the S3 client's import, as the libraries above)

    from baton.pipeline.context import RunOptions
    from baton.pipeline.plan import plan
    from baton.pipeline.runner import run_pipeline
    from baton.pipeline.spec import load_spec

    the_plan = plan(load_spec(spec))
    start = time.perf_counter()
    res = run_pipeline(the_plan, RunOptions(quiet=True, no_cache=True), runs_dir=runs)
    seconds = time.perf_counter() - start
    assert res.ok, res.error
    stages = {s.name: round(s.usage.wall_s, 3) for s in res.stages}
    return {"seconds": seconds, "stages": stages, "run": res.url or str(res.run_dir),
            "transformed": str(res.run_dir / "transform" / "transformed"),
            "graph": str(res.run_dir / "transform" / "transform_graph"),
            "peak_rss_mb": data_bench._peak_mb()}


def case_stage(run_url: str) -> dict:
    """Stage the S3 run's transform outputs on this (empty-cache) node, timed; the input rate
    is measured on the staged copy by a fresh process, as the local side's is."""
    import pyarrow.fs  # noqa: F401

    from baton.pipeline.bucket_run import BucketRun
    from baton.storage import location as L

    bucket = BucketRun(L.parent(run_url), L.basename(run_url))
    start = time.perf_counter()
    bucket.hydrate("transform")
    staging = time.perf_counter() - start
    local = bucket.run_dir / "transform"
    size = sum(p.stat().st_size for p in local.rglob("*") if p.is_file())
    return {"seconds": staging, "staged_bytes": size, "transformed": str(local / "transformed"),
            "graph": str(local / "transform_graph")}


def case_serve(base: str) -> dict:
    import tensorflow  # noqa: F401

    from baton.serving.config import ModelConfig
    from baton.serving.server import ModelServer, ServerOptions

    start = time.perf_counter()
    server = ModelServer(ServerOptions(bind_free_ports=True, file_system_poll_wait_seconds=0),
                         [ModelConfig("m", base)]).start()
    seconds = time.perf_counter() - start
    states = [r.state for r in server.manager.status("m")]
    server.stop(grace=0)
    assert "AVAILABLE" in states, states
    return {"seconds": seconds}


def child(argv: list[str], env: dict, timed: bool = True) -> dict:
    with data_bench.held(exclusive=timed):
        load = [round(x, 2) for x in os.getloadavg()]
        proc = subprocess.run([PY, __file__, "--case", *argv], capture_output=True, text=True,
                              env=env, timeout=3600, cwd=ROOT)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode or not lines:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"benchmark case failed: {' '.join(argv)}")
    return {**json.loads(lines[-1]), "load_average_at_start": load}


def median(runs: list[dict], key: str = "seconds") -> float:
    return statistics.median(r[key] for r in runs)


def run_all(a: argparse.Namespace) -> dict:
    from baton.pipeline.release.pushing import push
    from baton.storage.testing import LocalS3
    from baton.strategies.cluster import free_ports

    work = Path(tempfile.mkdtemp(prefix="baton-bench-storage-"))
    server = LocalS3(free_ports(LocalS3.PORTS)).start()
    try:
        bucket = server.bucket("bench")
        os.environ.update(server.env())  # this process pushes the serving cases' models
        os.environ["BATON_CACHE_DIR"] = str(work / "cache-driver")
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3",
               "PYTHONPATH": str(ROOT)}
        csv = work / "current.csv"
        data_bench.case_gen("current", a.rows, str(csv))
        spec = work / "spec.yaml"
        spec.write_text(SPEC.format(csv=csv))
        res: dict = {"rows": a.rows, "machine": data_bench._machine(), "pipeline": {},
                     "input": {}, "serve": {}}
        for i in range(a.repeat):
            sides = [("local", str(work / f"runs-{i}")), ("s3", f"{bucket}/runs")]
            for side, runs in sides if i % 2 == 0 else sides[::-1]:
                node = {**env, "BATON_CACHE_DIR": str(work / f"cache-{side}-{i}")}
                r = child(["pipeline", str(spec), runs], node)
                res["pipeline"].setdefault(side, []).append(r)
                print(f"pipeline {side} {i}: {r['seconds']:.2f} s {r['stages']}", flush=True)
        first_local, first_s3 = res["pipeline"]["local"][0], res["pipeline"]["s3"][0]
        for i in range(a.repeat):  # the order alternates: a load spike hits either side
            node = {**env, "BATON_CACHE_DIR": str(work / f"cache-input-{i}")}
            staged = child(["stage", first_s3["run"]], node)
            cases = [("local", ["input", first_local["transformed"], first_local["graph"]]),
                     ("s3", ["input", staged["transformed"], staged["graph"]])]
            for side, argv in cases if i % 2 == 0 else cases[::-1]:
                res["input"].setdefault(side, []).append(child(argv, node))
            res["input"]["s3"][-1].update(staging_s=staged["seconds"],
                                          staged_bytes=staged["staged_bytes"])
            print(f"input {i}: local {res['input']['local'][-1]['input_examples_per_s']:,.0f}"
                  f"/s, s3 staged {res['input']['s3'][-1]['input_examples_per_s']:,.0f}/s "
                  f"(staging {res['input']['s3'][-1]['staging_s']:.2f} s)", flush=True)
        import fixture_models as fm

        models = {"mlp": fm.build_mlp(str(work / "src" / "mlp")),
                  "penguins": fm.build_penguins(str(work / "src" / "penguins"))}
        for name, src in models.items():
            local_base, s3_base = str(work / "models" / name), f"{bucket}/models/{name}"
            push(Path(src), Path(local_base))
            push(Path(src), s3_base)
            for i in range(a.repeat):
                sides = [("local", local_base), ("s3", s3_base)]
                for side, base in sides if i % 2 == 0 else sides[::-1]:
                    node = {**env, "BATON_CACHE_DIR": str(work / f"cache-serve-{name}-{side}-{i}")}
                    r = child(["serve", base], node)
                    res["serve"].setdefault(name, {}).setdefault(side, []).append(r)
                    print(f"serve {name} {side} {i}: {r['seconds']:.2f} s", flush=True)
        return res
    finally:
        server.close()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", nargs="+")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--lock", default="", help="a benchmark lock file (bench/data's --lock)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks-storage.md"))
    a = ap.parse_args()
    if a.case:
        kind, *args = a.case
        fn = {"pipeline": case_pipeline, "stage": case_stage, "serve": case_serve,
              "input": lambda t, g: data_bench.case_input(t, g, 256)}[kind]
        print(json.dumps(fn(*args)))
        return
    data_bench.LOCK["path"] = a.lock
    res = run_all(a)
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "storage.json").write_text(json.dumps(res, indent=2) + "\n")
    from storage_report import write_report

    write_report(res, Path(a.out))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
