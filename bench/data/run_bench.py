"""Data-plane benchmarks: transform vs tensorflow-transform, statistics, tf.data vs train step.

Every case runs in a fresh subprocess (so peak RSS is that case's own) on synthetic data made
by the ingest stage (4 numeric columns, 1 categorical with 100 values, binary label):

- transform: the `transform` stage (analyze: mean/variance x4 + vocabulary; apply; write;
  export the SavedModel) over 1M and 10M rows, FnApiRunner in-process and with
  `--direct_num_workers=2 --direct_running_mode=multi_processing`;
- peer: tensorflow-transform 1.21 `AnalyzeAndTransformDataset` (own venv, `.venv-tft`) on
  the same rows (`--tft-rows`, default the smallest Baton size, so both sides pay their fixed
  costs over the same row count; ~3 min for tf.Transform at 1M);
- statistics: the `statistics` stage over 10M rows;
- input pipeline: `make_dataset` alone vs the default model's train step (batch 32).

Writes docs/benchmarks-data.md.  `python bench/data/run_bench.py [--quick]`
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PY = str(ROOT / ".venv" / "bin" / "python")
TFT_PY = ROOT / ".venv-tft" / "bin" / "python"
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}


def _peak_mb() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, kids) / 1024


def case_prepare(rows: int, out: str) -> dict:
    from baton.pipeline.testing import run_stage

    cfg = {"source": "synthetic", "splits": {"train": 1.0}, "rows_per_shard": 1_000_000,
           "synthetic": {"rows": rows, "seed": 1, "numeric": 4, "categorical": 1,
                         "vocab_size": 100, "classes": 2}}
    start = time.perf_counter()
    res, _ = run_stage("ingest", cfg, {}, out, run_id="data")
    return {"rows": rows, "seconds": time.perf_counter() - start,
            "examples": str(res["examples"])}


def case_stage(stage: str, examples: str, rows: int, args: list[str]) -> dict:
    import tensorflow  # noqa: F401 - imported before timing, as in a pipeline run

    from baton.pipeline.testing import run_stage

    root = tempfile.mkdtemp(prefix=f"bench-{stage}-")
    start = time.perf_counter()
    _, metrics = run_stage(stage, {"beam_pipeline_args": args}, {"examples": examples}, root)
    seconds = time.perf_counter() - start
    return {"rows": rows, "seconds": seconds, "rows_per_s": rows / seconds,
            "peak_rss_mb": _peak_mb(), "metrics": metrics, "root": root}


def case_input(transformed: str, graph: str, batch: int) -> dict:
    """Both sides consumed the way the trainer does: `next(iterator)` inside a tf.function
    looping `steps_per_execution` (20) steps, so Python overhead is paid once per 20 batches."""
    import keras
    import tensorflow as tf

    from baton.graphs.feature_spec import FeatureSpec
    from baton.graphs.input_pipeline import make_dataset
    from baton.graphs.models import build_model
    from baton.graphs.steps import make_train_chunk

    spec = FeatureSpec.load(graph)
    ds = make_dataset(transformed, "train", spec, batch, shuffle=True, seed=0, repeat=True)

    @tf.function
    def consume(iterator, n):  # noqa: ANN001, ANN202
        total = tf.constant(0, tf.int64)
        for _ in tf.range(n):
            _, label = next(iterator)
            total += tf.shape(label, out_type=tf.int64)[0]
        return total

    def rate(fn, iterator, seconds: float = 5.0) -> float:  # noqa: ANN001
        fn(iterator, 20)
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            fn(iterator, 20)
            n += 20
        return n * batch / (time.perf_counter() - start)

    input_rate = rate(consume, iter(ds))
    start = time.perf_counter()  # the pipeline alone, drained in C++ (no per-step op)
    rows = int(ds.take(30_000).reduce(
        tf.constant(0, tf.int64), lambda n, b: n + tf.shape(b[1], out_type=tf.int64)[0]))
    produce_rate = rows / (time.perf_counter() - start)
    model = build_model("mlp", spec)
    optimizer = keras.optimizers.Adam(1e-3)
    optimizer.build(model.trainable_variables)
    chunk = make_train_chunk(model, optimizer, spec, batch)
    one = next(iter(ds))
    fixed = iter(tf.data.Dataset.from_tensors(one).repeat())  # no input cost at all
    step_rate = rate(lambda it, n: chunk(it, tf.constant(n), tf.constant(0.0)), fixed)
    return {"batch": batch, "input_examples_per_s": input_rate,
            "produce_examples_per_s": produce_rate,
            "train_step_examples_per_s": step_rate, "ratio": input_rate / step_rate,
            "produce_ratio": produce_rate / step_rate}


def child(argv: list[str], python: str = PY, timeout: int = 3600) -> dict:
    proc = subprocess.run([python, *argv], capture_output=True, text=True, env=ENV,
                          timeout=timeout, cwd=ROOT)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:  # (tf.Transform's process may crash on exit after printing its result)
        sys.stderr.write(proc.stderr[-3000:])
        raise SystemExit(f"benchmark case failed: {' '.join(argv)}")
    return json.loads(lines[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", help=argparse.SUPPRESS)
    ap.add_argument("--rows", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--path", default="", help=argparse.SUPPRESS)
    ap.add_argument("--path2", default="", help=argparse.SUPPRESS)
    ap.add_argument("--beam-args", default="", help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="100k/1M rows instead of 1M/10M")
    ap.add_argument("--tft-rows", type=int, default=0, help="default: the smallest Baton size")
    ap.add_argument("--work", default="", help="scratch directory kept (default: a temp dir)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks-data.md"))
    a = ap.parse_args()
    if a.case:
        if a.case == "prepare":
            out = case_prepare(a.rows, a.path)
        elif a.case in ("transform", "statistics"):
            out = case_stage(a.case, a.path, a.rows, a.beam_args.split() if a.beam_args else [])
        else:
            out = case_input(a.path, a.path2, a.rows)
        print(json.dumps(out))
        return
    run_all(a)


def run_all(a: argparse.Namespace) -> None:
    sizes = [100_000, 1_000_000] if a.quick else [1_000_000, 10_000_000]
    work = Path(a.work or tempfile.mkdtemp(prefix="baton-bench-data-"))
    me = str(Path(__file__).resolve())
    results: dict = {"sizes": sizes, "transform": [], "statistics": []}
    data = {}
    for rows in sizes:
        data[rows] = child([me, "--case", "prepare", "--rows", str(rows),
                            "--path", str(work / f"r{rows}")])
        print(f"prepared {rows} rows in {data[rows]['seconds']:.1f}s", file=sys.stderr)
    mp = "--direct_num_workers=2 --direct_running_mode=multi_processing"
    for rows in sizes:
        for label, args in (("FnApiRunner", ""), ("FnApiRunner, 2 processes", mp)):
            r = child([me, "--case", "transform", "--rows", str(rows),
                       "--path", data[rows]["examples"], "--beam-args", args])
            r["runner"] = label
            results["transform"].append(r)
            print(f"transform {rows} {label}: {r['rows_per_s']:,.0f} rows/s", file=sys.stderr)
    small = sizes[0]  # the same rows without the Arrow copy: every tf.Example parsed by TF
    view = work / f"r{small}-tfrecords-only"
    view.mkdir(exist_ok=True)
    src = Path(data[small]["examples"])
    for name in ("train", "schema.json"):
        if not (view / name).exists():
            (view / name).symlink_to(src / name)
    r = child([me, "--case", "transform", "--rows", str(small), "--path", str(view)])
    r["runner"] = "FnApiRunner, TFRecords only (no Arrow copy)"
    results["transform"].append(r)
    print(f"transform {small} tfrecords only: {r['rows_per_s']:,.0f} rows/s", file=sys.stderr)
    big = sizes[-1]
    r = child([me, "--case", "statistics", "--rows", str(big), "--path", data[big]["examples"]])
    results["statistics"].append(r)
    print(f"statistics {big}: {r['rows_per_s']:,.0f} rows/s", file=sys.stderr)
    first = next(t for t in results["transform"] if t["rows"] == sizes[0])
    tdir = Path(first["root"]) / "runs" / "test" / "test-run" / "transform"
    results["input"] = child([me, "--case", "input", "--rows", "32", "--path",
                              str(tdir / "transformed"), "--path2", str(tdir / "transform_graph")])
    if TFT_PY.exists():
        results["tft"] = child([str(ROOT / "bench" / "data" / "tft_peer.py"), "--rows",
                                str(a.tft_rows or sizes[0])], python=str(TFT_PY))
        print(f"tft: {results['tft']['rows_per_s']:,.0f} rows/s", file=sys.stderr)
    import shutil

    for case in results["transform"] + results["statistics"]:
        shutil.rmtree(case.pop("root"), ignore_errors=True)
    if not a.work:  # the generated rows (GBs at 10M) only when we made the directory
        shutil.rmtree(work, ignore_errors=True)
    else:
        (work / "results.json").write_text(json.dumps(results, indent=1))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from report import write_report

    path = write_report(results, Path(a.out))
    print(f"wrote {path}", file=sys.stderr)


# --- portable runner (issue #12 item 4): self-contained, run on its own ------------------------
# python bench/data/run_bench.py portable [ROWS]   (prints one JSON line; not in the report)

PORTABLE_FN = """\
import tensorflow as tf

import baton.tft as tft


def preprocessing_fn(inputs):
    out = {}
    for key in ("x0", "x1", "x2", "x3"):
        x = tf.where(tf.math.is_nan(inputs[key]), tft.mean(inputs[key]), inputs[key])
        out[key + "_xf"] = tft.scale_to_z_score(x)
    out["c0_xf"] = tft.compute_and_apply_vocabulary(inputs["c0"], num_oov_buckets=1)
    out["label"] = inputs["label"]
    return out
"""


def case_portable(rows: int = 1_000_000) -> dict:
    """The transform stage with a preprocessing_fn (2 phases: 4 means, then 4 z-scores and a
    vocabulary) on the same synthetic rows: in-process FnApiRunner vs PortableRunner against
    Beam's Python job service with an external worker pool (both started here, on ports bound
    to 0 and read back, and stopped by process group)."""
    import re
    import signal

    import tensorflow  # noqa: F401 - imported before timing, as in a pipeline run

    from baton.pipeline.testing import run_stage

    work = Path(tempfile.mkdtemp(prefix="baton-bench-portable-"))
    examples = case_prepare(rows, str(work / "data"))["examples"]
    spec = work / "spec"
    spec.mkdir()
    (spec / "bench_pre.py").write_text(PORTABLE_FN)
    env = {**ENV, "PYTHONPATH": str(ROOT),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    procs, ports = [], []
    for name, argv, pattern in (
            ("job", ["apache_beam.runners.portability.local_job_service_main", "--port", "0",
                     "--staging_dir", str(work / "staging")],
             r"Listening for beam jobs on port (\d+)"),
            ("pool", ["apache_beam.runners.worker.worker_pool_main", "--service_port=0"],
             r"Started worker pool servicer at port: \S+:(\d+)")):
        log = work / f"{name}.log"
        procs.append(subprocess.Popen([sys.executable, "-m", *argv], cwd=work, env=env,
                                      stdout=log.open("wb"), stderr=subprocess.STDOUT,
                                      start_new_session=True))
        for _ in range(600):
            found = re.search(pattern, log.read_text(errors="replace"))
            if found or procs[-1].poll() is not None:
                break
            time.sleep(0.1)
        if not found:
            raise SystemExit(f"{name} did not start: {log.read_text()[-2000:]}")
        ports.append(int(found.group(1)))
    portable = ["--runner=PortableRunner", f"--job_endpoint=localhost:{ports[0]}",
                "--environment_type=EXTERNAL", f"--environment_config=localhost:{ports[1]}",
                "--wait_until_finish_duration=3600000"]
    out: dict = {"rows": rows}
    try:
        for label, args in (("FnApiRunner", []), ("PortableRunner, external worker pool",
                                                  portable)):
            start = time.perf_counter()
            _, metrics = run_stage("transform", {"preprocessing_fn": "bench_pre:preprocessing_fn",
                                                 "beam_pipeline_args": args},
                                   {"examples": examples}, work, spec_dir=spec,
                                   run_id=label.split(",")[0])
            seconds = time.perf_counter() - start
            out[label] = {"seconds": round(seconds, 2), "rows_per_s": round(rows / seconds),
                          "beam_seconds": metrics["beam_seconds"], "phases": metrics["phases"]}
    finally:
        for proc in procs:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(proc.pid, sig)
                    proc.wait(5)
                    break
                except ProcessLookupError:
                    break
                except subprocess.TimeoutExpired:
                    continue
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return out

# --- end of portable runner -------------------------------------------------------------------


if __name__ == "__main__":
    if sys.argv[1:2] == ["portable"]:  # the portable-runner row, on its own
        print(json.dumps(case_portable(int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000)))
    else:
        main()
