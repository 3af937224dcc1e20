"""Data-plane benchmark: Baton's ingest + transform against tensorflow-transform on TFXIO,
both sides starting from the same CSV file with the same rows (issue 12).

Tables (each a CSV file generated once, `--rows` rows, default 1M):

- `current`: 4 float columns x0..x3, c0 (100 values), a binary label. Baton: the `ingest`
  stage (source: csv) then the `transform` stage with its built-in column kinds (z-score on
  the numbers, a vocabulary on c0), driven only through their configs. Peer: the same
  preprocessing written for tf.Transform.
- `census`: tests/graphs/tft_parity_fn.py's census-like preprocessing_fn (z-score on 4
  numeric columns, vocabularies with OOV buckets on 3 categorical ones, bucketize on 2, a
  hash, a token vocabulary on a text column, ...), run by Baton as
  `transform.config.preprocessing_fn` (bench/data/census_fn.py) and by the peer; then the
  two written outputs are read back and compared row by row (`tft_parity_fn.compare`): the
  parity check runs on every benchmark run.
- `text`: short texts (3-15 words of 30,000 with Zipf-like frequencies); bench/data/text_fn.py,
  a vocabulary (top 10,000, one OOV bucket) over `tf.strings.split` tokens applied to them: a
  ragged output on both sides, compared row by row on every run.

Baton's figure is the ingest stage + the transform stage (each reported, and the sum); the
peer's is one tf.Transform pipeline from the CSV file (CsvTFXIO -> AnalyzeAndTransformDataset
-> transform_fn + transformed TFRecords, bench/data/tft_peer.py, in `.venv-tft`). Also:
Baton's transform stage alone at `--rows` and `--big-rows` (default 10M; peak RSS of each),
the peer's transform alone on the same tf.Examples (`tfxio.TFExampleRecord` on the TFRecords
Baton's ingest wrote), the statistics stage and the input pipeline. Every case runs in a fresh
subprocess (its own peak RSS), after its libraries are imported; seconds are wall time of the
stage / pipeline. Baton cases run `--repeat` times (median reported), the peer `--peer-repeat`.

Writes bench/data/results/data.json and docs/benchmarks-data.md (`report.py`).

    python bench/data/run_bench.py [--tft-python .venv-tft/bin/python] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PY = sys.executable
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT)}


def _peak_mb() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, kids) / 1024


# --- cases (each runs in its own process) -------------------------------------------------


def case_gen(table: str, rows: int, path: str) -> dict:
    """Write the table's CSV file (deterministic), in chunks."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pcsv

    from baton.pipeline.datasets import synthetic

    start = time.perf_counter()
    writer = None
    opts = pcsv.WriteOptions(quoting_style="needed")
    if table == "current":
        chunks = synthetic.generate(rows, seed=1, numeric=4, categorical=1, vocab_size=100,
                                    classes=2)
    elif table == "text":
        chunks = _text_chunks(rows)
    else:
        chunks = _census_chunks(rows)
    for chunk in chunks:
        t = pa.table({k: pa.array(v) if v.dtype != object else pa.array(v.tolist(), pa.string())
                      for k, v in chunk.items()})
        if writer is None:
            writer = pcsv.CSVWriter(path, t.schema, write_options=opts)
        writer.write_table(t)
    assert writer is not None
    writer.close()
    del np
    return {"table": table, "rows": rows, "seconds": time.perf_counter() - start,
            "bytes": Path(path).stat().st_size}


def _census_chunks(rows: int, chunk: int = 1 << 18):  # noqa: ANN202
    """tft_parity_fn.rows' columns and distributions, vectorised for millions of rows, plus
    a binary `label` column (Baton's ingest needs a label; both sides pass it through)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    words = np.array([f"w{i}" for i in range(80)], object)
    p = np.arange(80, 0, -1) / np.arange(80, 0, -1).sum()
    for start in range(0, rows, chunk):
        n = min(chunk, rows - start)
        rng = np.random.default_rng([7, start])
        count = rng.integers(1, 6, n)
        flat = words[rng.choice(80, size=int(count.sum()), p=p)]
        offsets = np.concatenate([[0], np.cumsum(count)]).astype(np.int32)
        text = pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets),
                                                       pa.array(flat.tolist(), pa.string())), " ")
        yield {
            "row": np.arange(start, start + n, dtype=np.float32),
            "a": rng.normal(3.0, 2.0, n).astype(np.float32),
            "b": rng.normal(-1.0, 0.5, n).astype(np.float32),
            "c": rng.lognormal(0.0, 1.0, n).astype(np.float32),
            "d": rng.integers(0, 20, n).astype(np.float32),
            "cat1": np.array([f"v{int(x)}" for x in range(40)], object)[rng.zipf(1.6, n) % 40],
            "cat2": np.array([f"k{x}" for x in range(7)], object)[rng.integers(0, 7, n)],
            "cat3": np.array([f"z{x}" for x in range(31)], object)[rng.binomial(30, 0.3, n)],
            "text": np.array(text.to_pylist(), object),
            "label": np.array(["no", "yes"], object)[rng.integers(0, 2, n)],
        }


def _text_chunks(rows: int, chunk: int = 1 << 18, words: int = 30_000):  # noqa: ANN202
    """Short texts: 3 to 15 words per row drawn from `words` words with Zipf-like frequencies
    (so a top_k of 10,000 leaves a long tail out of vocabulary), a `row` number and a binary
    `label`."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    vocab = np.array([f"w{i}" for i in range(words)], object)
    p = 1.0 / np.arange(1, words + 1) ** 1.1
    p /= p.sum()
    for start in range(0, rows, chunk):
        n = min(chunk, rows - start)
        rng = np.random.default_rng([11, start])
        count = rng.integers(3, 16, n)
        flat = vocab[rng.choice(words, size=int(count.sum()), p=p)]
        offsets = np.concatenate([[0], np.cumsum(count)]).astype(np.int32)
        text = pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets),
                                                       pa.array(flat.tolist(), pa.string())), " ")
        yield {"row": np.arange(start, start + n, dtype=np.float32),
               "text": np.array(text.to_pylist(), object),
               "label": np.array(["no", "yes"], object)[rng.integers(0, 2, n)]}


def _preload(stage: str) -> None:
    """Import the libraries a stage uses before its timer starts, as tft_peer.py imports
    tensorflow, apache_beam, tensorflow_transform and tfx_bsl before its own: both sides are
    timed from a process with their libraries loaded (Beam's import alone is ~1.5 s here).
    That includes `pyarrow.compute` (~0.1 s: it scrapes its functions' docstrings when
    imported), which tfx_bsl has imported before the peer's timer, and the stage's own
    modules, as the peer's tensorflow_transform and tft_beam are."""
    import importlib

    import tensorflow  # noqa: F401

    names = {"ingest": ["pyarrow", "pyarrow.csv", "pyarrow.compute",
                        "baton.pipeline.stages.ingest", "baton.pipeline.dataplane.sources.ingest_csv"]}.get(
        stage, ["pyarrow", "pyarrow.compute", "apache_beam",
                "apache_beam.runners.portability.fn_api_runner",
                "baton.pipeline.stages.transform", "baton.tft",
                "baton.pipeline.dataplane.beam.runner", "baton.pipeline.dataplane.beam.tft",
                "baton.pipeline.dataplane.beam.apply", "baton.pipeline.dataplane.transform.analysis",
                "baton.pipeline.dataplane.beam.statistics", "baton.graphs.tft.engine",
                "baton.graphs.tft.module"])
    for name in names:
        importlib.import_module(name)


def case_ingest(csv: str, out: str) -> dict:
    _preload("ingest")

    from baton.pipeline.testing import run_stage

    cfg = {"source": "csv", "path": csv, "label": "label", "splits": {"train": 1.0},
           "rows_per_shard": 1_000_000}
    start = time.perf_counter()
    res, metrics = run_stage("ingest", cfg, {}, out, run_id="data")
    seconds = time.perf_counter() - start
    return {"rows": metrics["rows"], "seconds": seconds, "rows_per_s": metrics["rows"] / seconds,
            "peak_rss_mb": _peak_mb(), "examples": str(res["examples"])}


def case_stage(stage: str, examples: str, args: list[str], fn: str = "") -> dict:
    _preload(stage)

    from baton.pipeline.testing import run_stage

    root = tempfile.mkdtemp(prefix=f"bench-{stage}-")
    cfg: dict = {"beam_pipeline_args": args}
    if fn:
        cfg["preprocessing_fn"] = fn
    start = time.perf_counter()
    out, metrics = run_stage(stage, cfg, {"examples": examples}, root, spec_dir=HERE)
    seconds = time.perf_counter() - start
    rows = int(metrics["rows"])
    return {"rows": rows, "seconds": seconds, "rows_per_s": rows / seconds,
            "peak_rss_mb": _peak_mb(), "metrics": metrics, "root": root,
            **{k: str(v) for k, v in out.items()}}


# case_portable(rows) (below): the transform with a preprocessing_fn on the PortableRunner
# beside the in-process run; run_all records it as results["portable"].


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


def _read_baton(transformed: str) -> dict:
    """Baton's `transformed` artifact (columnar chunk records, dataplane.records.transformed_io) as
    numpy columns, read with its documented format only."""
    import numpy as np
    import tensorflow as tf

    from baton.pipeline.dataplane.records.transformed_io import column

    meta = json.loads((Path(transformed) / "metadata.json").read_text())
    shapes = meta.get("shapes", {})
    parts: dict[str, list] = {k: [] for k in meta["columns"]}
    for f in sorted((Path(transformed) / "train").glob("*.tfrecord")):
        for rec in tf.data.TFRecordDataset(str(f)).as_numpy_iterator():
            feats = tf.train.Example.FromString(rec).features.feature
            for k, dtype in meta["columns"].items():
                v = column(feats, k, dtype)
                parts[k].append(v.reshape(-1, *shapes[k]) if k in shapes else v)
    return {k: np.concatenate(v) for k, v in parts.items()}


def _read_peer(files: list[str], like: dict) -> dict:
    import numpy as np
    import tensorflow as tf

    spec = {}
    for k, v in like.items():
        dtype = tf.float32 if v.dtype.kind == "f" else tf.int64
        spec[k] = tf.io.FixedLenFeature(list(v.shape[1:]), dtype)
    spec["label"] = tf.io.FixedLenFeature([], tf.string)
    out: dict[str, list] = {k: [] for k in spec}
    ds = tf.data.TFRecordDataset(files).batch(65_536).map(lambda x: tf.io.parse_example(x, spec))
    for batch in ds.as_numpy_iterator():
        for k, v in batch.items():
            out[k].append(v)
    return {k: np.concatenate(v) for k, v in out.items()}


def case_parity(transformed: str, peer_files: str) -> dict:
    """The census table's outputs, Baton's against the peer's, row by row (by `row_out`)."""
    import numpy as np

    sys.path.insert(0, str(ROOT / "tests" / "graphs"))
    import tft_parity_fn

    ours = _read_baton(transformed)
    label = ours.pop(json.loads((Path(transformed) / "metadata.json").read_text())["label"])
    peer = _read_peer(json.loads(peer_files), ours)
    peer_label = peer.pop("label")
    a, b = np.argsort(ours["row_out"], kind="stable"), np.argsort(peer["row_out"], kind="stable")
    ours = {k: v[a] for k, v in ours.items()}
    peer = {k: v[b] for k, v in peer.items()}
    failures, differ = tft_parity_fn.compare(ours, peer)
    return {"rows": len(a), "rows_peer": len(b), "outputs": sorted(ours),
            "failures": failures, "bucket_ids_differ": differ,
            "labels": [len(np.unique(label)), len(np.unique(peer_label[b]))],
            "ok": not failures and len(a) == len(b)}


def _raw_column(feats: Any, key: str, dtype: str) -> Any:
    """A columnar chunk's stored array, int64 ones widened back (pipeline/dataplane/records/
    transformed_io.py)."""
    from baton.pipeline.dataplane.records.transformed_io import column

    return column(feats, key, dtype)


def case_parity_text(transformed: str, peer_files: str) -> dict:
    """The text table's ragged token ids, Baton's against the peer's, row by row."""
    import numpy as np
    import tensorflow as tf

    meta = json.loads((Path(transformed) / "metadata.json").read_text())
    rows_out, values, lengths = [], [], []
    for f in sorted((Path(transformed) / "train").glob("*.tfrecord")):
        for rec in tf.data.TFRecordDataset(str(f)).as_numpy_iterator():
            feats = tf.train.Example.FromString(rec).features.feature
            rows_out.append(_raw_column(feats, "row_out", "float32"))
            values.append(_raw_column(feats, "tokens", "int64"))
            lengths.append(_raw_column(feats, "tokens$row_lengths_0", "int64"))
    ours_rows = np.concatenate(rows_out)
    ours = np.split(np.concatenate(values), np.cumsum(np.concatenate(lengths))[:-1])
    spec = {"row_out": tf.io.FixedLenFeature([], tf.float32),
            # tf.Transform writes a one-level ragged output as the row's values under its name
            "tokens": tf.io.RaggedFeature(tf.int64, partitions=[], row_splits_dtype=tf.int64)}
    peer_rows, peer = [], []
    ds = tf.data.TFRecordDataset(json.loads(peer_files)).batch(65_536).map(
        lambda x: tf.io.parse_example(x, spec))
    for batch in ds:
        peer_rows.append(batch["row_out"].numpy())
        peer += [np.asarray(r) for r in batch["tokens"].numpy()]
    peer_rows_a = np.concatenate(peer_rows)
    a, b = np.argsort(ours_rows, kind="stable"), np.argsort(peer_rows_a, kind="stable")
    differ = sum(not np.array_equal(ours[i], peer[j]) for i, j in zip(a, b, strict=True))
    tokens = int(sum(len(x) for x in ours))
    return {"rows": len(a), "rows_peer": len(b), "tokens": tokens, "rows_differ": differ,
            "encoding": meta.get("encodings", {}).get("tokens"),
            "ok": differ == 0 and len(a) == len(b) and bool(np.array_equal(ours_rows[a],
                                                                           peer_rows_a[b]))}


def case_peer(tft_python: str, table: str, csv: str, out: str, tfrecords: str = "",
              batch_size: int = 0, processes: int = 1) -> dict:
    argv = [str(HERE / "tft_peer.py"), "--table", table, "--csv", csv, "--out", out,
            "--processes", str(processes)]
    if tfrecords:
        argv += ["--tfrecords", tfrecords]
    if batch_size:
        argv += ["--batch-size", str(batch_size)]
    return child(argv, python=tft_python)


LOCK: dict[str, Any] = {"path": "", "held": False}  # --lock FILE, and whether we hold it


@contextlib.contextmanager
def held(exclusive: bool = True) -> Iterator[None]:
    """With `--lock FILE`: FILE's flock held (exclusive, or shared for untimed work, as
    `flock -x` / `flock -s` would) for a group of cases, one benchmark configuration of a
    few minutes, so other benchmarks on a shared machine that take the same lock run between
    the groups, never beside one. Nested groups run under the outer hold."""
    if not LOCK["path"] or LOCK["held"]:
        yield
        return
    import fcntl

    with open(LOCK["path"], "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        LOCK["held"] = True
        try:
            yield
        finally:
            LOCK["held"] = False
            fcntl.flock(f, fcntl.LOCK_UN)


def child(argv: list[str], python: str = PY, timeout: int = 3600, timed: bool = True) -> dict:
    with held(exclusive=timed):
        load = [round(x, 2) for x in os.getloadavg()]
        proc = subprocess.run([python, *argv], capture_output=True, text=True, env=ENV,
                              timeout=timeout, cwd=ROOT)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:  # (tf.Transform's process may crash on exit after printing its result)
        sys.stderr.write(proc.stderr[-3000:])
        raise SystemExit(f"benchmark case failed: {' '.join(argv)}")
    out = json.loads(lines[-1])
    if LOCK["path"] and timed:
        out["load_average_at_start"] = load
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", help=argparse.SUPPRESS)
    ap.add_argument("--arg", action="append", default=[], help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="100k / 1M rows instead of 1M / 10M")
    ap.add_argument("--rows", type=int, default=0, help="rows of both tables (default 1M)")
    ap.add_argument("--big-rows", type=int, default=0, help="transform alone (default 10M)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each Baton case")
    ap.add_argument("--peer-repeat", type=int, default=1, help="runs of each peer case")
    ap.add_argument("--peer-big", action="store_true",
                    help="also run the peer's transform alone at --big-rows (~5 min at 10M)")
    ap.add_argument("--tables", default="",
                    help="comma-separated tables to run (current, census, text); the others, "
                         "and the transform-alone, statistics and input sections, are kept "
                         "from results/data.json, each table with its own date and load")
    ap.add_argument("--tft-python", default=str(ROOT / ".venv-tft" / "bin" / "python"))
    ap.add_argument("--work", default="", help="scratch directory kept (default: a temp dir)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks-data.md"))
    ap.add_argument("--lock", default="",
                    help="a lock file each case holds while it runs (exclusive when timed, "
                         "shared otherwise), on a machine shared with other benchmarks")
    a = ap.parse_args()
    if a.lock:
        LOCK["path"] = a.lock
    if a.case:
        cases = {"gen": lambda t, r, p: case_gen(t, int(r), p), "ingest": case_ingest,
                 "stage": lambda s, e, args, fn: case_stage(s, e, args.split(), fn),
                 "input": lambda t, g, b: case_input(t, g, int(b)), "parity": case_parity,
                 "parity_text": case_parity_text,
                 "portable": lambda r: case_portable(int(r))}
        print(json.dumps(cases[a.case](*a.arg)))
        return
    run_all(a)


def _median(runs: list[dict]) -> dict:
    """The run with the median seconds, with every run's seconds beside it."""
    ordered = sorted(runs, key=lambda r: r["seconds"])
    mid = dict(ordered[(len(ordered) - 1) // 2])
    mid["runs_seconds"] = [round(r["seconds"], 3) for r in runs]
    mid["seconds_median"] = statistics.median(r["seconds"] for r in runs)
    return mid


def _faster_peer(run: Callable[[int], dict]) -> tuple[dict, dict[str, float]]:
    """The peer in-process and on 2 worker processes (`run(processes)` -> a case with
    `seconds_median`): the faster counts, both times are kept beside it."""
    by_procs = {procs: run(procs) for procs in (1, 2)}
    best = min(by_procs.values(), key=lambda r: r["seconds_median"])
    return best, {str(k): round(v["seconds_median"], 2) for k, v in by_procs.items()}


def run_all(a: argparse.Namespace) -> None:
    rows = a.rows or (100_000 if a.quick else 1_000_000)
    big = a.big_rows or (1_000_000 if a.quick else 10_000_000)
    work = Path(a.work or tempfile.mkdtemp(prefix="baton-bench-data-"))
    work.mkdir(parents=True, exist_ok=True)
    me = str(Path(__file__).resolve())
    peer_ok = Path(a.tft_python).exists()
    res: dict = {"rows": rows, "big_rows": big, "repeat": a.repeat, "peer_repeat": a.peer_repeat,
                 "tables": {}, "transform_alone": [], "machine": _machine(),
                 "lock": a.lock}

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    def baton(argv: list[str]) -> dict:
        return child([me, "--case", argv[0], *[f"--arg={arg}" for arg in argv[1:]]],
                     timed=argv[0] not in ("gen", "parity", "parity_text"))

    tables = a.tables.split(",") if a.tables else ["current", "census", "text"]
    unknown = set(tables) - {"current", "census", "text"}
    if unknown:
        raise SystemExit(f"--tables: no table {sorted(unknown)}; the tables are current, "
                         "census, text")
    only = set(tables) != {"current", "census", "text"}
    csvs = {}
    for table, n in [*((t, rows) for t in tables), *([] if only else [("current", big)])]:
        path = work / f"{table}-{n}.csv"
        if not path.exists():
            baton(["gen", table, str(n), str(path)])
        csvs[(table, n)] = str(path)
    log(f"CSV files in {work}")
    tables_and_big = contextlib.ExitStack()  # the tables and the big transform: one hold
    tables_and_big.enter_context(held())
    examples = {}
    for table, n in ((t, rows) for t in tables):
        started = _machine()  # this table's own date and load, at its start
        with held():  # one table (Baton's runs, the peer's, parity): one hold
            fn = {"census": "census_fn:preprocessing_fn",
                  "text": "text_fn:preprocessing_fn"}.get(table, "")
            ingests, transforms = [], []
            for i in range(a.repeat):
                out = work / f"ingest-{table}-{n}-{i}"
                shutil.rmtree(out, ignore_errors=True)
                ingests.append(baton(["ingest", csvs[(table, n)], str(out)]))
                transforms.append(baton(["stage", "transform", ingests[-1]["examples"], "", fn]))
                log(f"{table} {n}: ingest {ingests[-1]['seconds']:.2f} s, transform "
                    f"{transforms[-1]['seconds']:.2f} s")
            ing, tr = _median(ingests), _median(transforms)
            examples[(table, n)] = ing["examples"]
            entry: dict = {"rows": n, "ingest": ing, "transform": tr,
                           "baton_seconds": ing["seconds_median"] + tr["seconds_median"],
                           "baton_runs_seconds": [round(x["seconds"] + y["seconds"], 3)
                                                  for x, y in zip(ingests, transforms, strict=True)]}
            if peer_ok:
                def peer_runs(procs: int, table: str = table, n: int = n) -> dict:
                    peers = []
                    for i in range(a.peer_repeat):
                        out = work / f"peer-{table}-{n}-{procs}p-{i}"
                        shutil.rmtree(out, ignore_errors=True)
                        peers.append(case_peer(a.tft_python, table, csvs[(table, n)], str(out),
                                               processes=procs))
                        log(f"{table} {n}: peer, {procs} process(es), {peers[-1]['seconds']:.1f} s")
                    return _median(peers)

                entry["peer"], entry["peer_by_processes"] = _faster_peer(peer_runs)
                entry["ratio"] = entry["peer"]["seconds_median"] / entry["baton_seconds"]
                if table in ("census", "text"):
                    entry["parity"] = baton(["parity" if table == "census" else "parity_text",
                                             tr["transformed"],
                                             json.dumps(entry["peer"]["transformed"])])
                    log(f"parity {table}: {entry['parity']}")
            entry["run"] = {**started, "lock": a.lock}
            res["tables"][table] = entry
            for r in transforms:  # the median run's output is read by the parity/input cases
                if r["root"] != tr["root"]:
                    shutil.rmtree(r["root"], ignore_errors=True)
    if only:
        _merge_tables(a, res, work, tables)
        return
    # The transform stage alone: on the current table's examples at `rows` (already measured
    # above, the same runs) and at `big` (ingested once from its CSV; not timed here).
    with held():  # the big table's ingest and transforms, 2 processes, portable: one hold
        alone = [dict(res["tables"]["current"]["transform"], runner="FnApiRunner")]
        out = work / f"ingest-current-{big}"
        shutil.rmtree(out, ignore_errors=True)
        big_ing = baton(["ingest", csvs[("current", big)], str(out)])
        log(f"current {big}: ingest {big_ing['seconds']:.1f} s")
        res["big_ingest"] = big_ing
        runs = []
        for _ in range(a.repeat):
            runs.append(baton(["stage", "transform", big_ing["examples"], "", ""]))
            log(f"current {big}: transform {runs[-1]['seconds']:.2f} s "
                f"({runs[-1]['rows']} rows, peak {runs[-1]['peak_rss_mb']:.0f} MB)")
            if runs[-1]["rows"] != big:
                raise SystemExit(f"transform at {big} rows transformed {runs[-1]['rows']} rows")
        alone.append(dict(_median(runs), runner="FnApiRunner"))
        for r in runs:  # the median run's output is removed with the others' at the end
            if r["root"] != alone[-1]["root"]:
                shutil.rmtree(r["root"], ignore_errors=True)
        mp = "--direct_num_workers=2 --direct_running_mode=multi_processing"
        r = baton(["stage", "transform", examples[("current", rows)], mp, ""])
        alone.append(dict(r, runner="FnApiRunner, 2 processes", runs_seconds=[round(r["seconds"], 3)],
                          seconds_median=r["seconds"]))
        log(f"current {rows}: transform 2 processes {r['seconds']:.2f} s")
        res["portable"] = baton(["portable", str(rows)])
        log(f"portable {rows}: {res['portable']}")
    tables_and_big.close()
    res["transform_alone"] = alone
    if peer_ok:  # the peer's transform alone: TFExampleRecord on the same tf.Examples
        peers = []
        for n, ex in ((rows, examples[("current", rows)]), (big, big_ing["examples"])):
            if n == big and not a.peer_big:
                continue
            def peer_alone(procs: int, n: int = n, ex: str = ex) -> dict:
                out = work / f"peer-alone-{n}-{procs}p"
                shutil.rmtree(out, ignore_errors=True)
                p = case_peer(a.tft_python, "current", csvs[("current", n)], str(out),
                              tfrecords=str(Path(ex) / "train" / "*.tfrecord"), processes=procs)
                log(f"peer alone {n}, {procs} process(es): {p['seconds']:.1f} s")
                shutil.rmtree(out, ignore_errors=True)
                return dict(p, runs_seconds=[round(p["seconds"], 3)], seconds_median=p["seconds"])

            with held():  # both of the peer's runs at this size: one hold
                best, by_processes = _faster_peer(peer_alone)
            peers.append(dict(best, rows=n, by_processes=by_processes))
        res["peer_alone"] = peers
    with held():  # statistics and the input pipeline: one hold
        stats = baton(["stage", "statistics", big_ing["examples"], "", ""])
        shutil.rmtree(stats.pop("root"), ignore_errors=True)
        res["statistics"] = stats
        first = res["tables"]["current"]["transform"]
        res["input"] = baton(["input", first["transformed"], first["transform_graph"], "32"])
    for case in [*alone, res["tables"]["census"]["transform"], res["tables"]["text"]["transform"]]:
        if case.get("root"):
            shutil.rmtree(case.pop("root"), ignore_errors=True)
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    (results / "data.json").write_text(json.dumps(res, indent=1) + "\n")
    if not a.work:  # the generated rows (GBs at 10M) only when we made the directory
        shutil.rmtree(work, ignore_errors=True)
    sys.path.insert(0, str(HERE))
    from report import write_report

    path = write_report(res, Path(a.out))
    print(json.dumps({k: v for k, v in res.items() if k != "input"}, indent=1, default=str))
    log(f"wrote {results / 'data.json'} and {path}")


def _merge_tables(a: argparse.Namespace, res: dict, work: Path, tables: list[str]) -> None:
    """`--tables`: the tables just run replace theirs in results/data.json (each keeps its own
    `run`: date and load), the rest of it stays, and the report is rewritten from the whole."""
    path = HERE / "results" / "data.json"
    if not path.is_file():
        raise SystemExit(f"--tables needs a full run's {path} to merge into")
    old = json.loads(path.read_text())
    if old["rows"] != res["rows"]:
        raise SystemExit(f"--tables: {path} has {old['rows']:,} rows a table, this run "
                         f"{res['rows']:,}: rerun them all (no --tables) or pass --rows "
                         f"{old['rows']}")
    for t in tables:
        case = res["tables"][t]["transform"]
        if case.get("root"):
            shutil.rmtree(case.pop("root"), ignore_errors=True)
        old["tables"][t] = res["tables"][t]
        old["tables"][t]["run"]["rerun"] = True  # the report lists it apart from the full run
    path.write_text(json.dumps(old, indent=1) + "\n")
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)
    sys.path.insert(0, str(HERE))
    from report import write_report

    out = write_report(old, Path(a.out))
    print(json.dumps({t: {k: v for k, v in old["tables"][t].items() if k != "input"}
                      for t in tables}, indent=1, default=str))
    print(f"wrote {path} and {out}", file=sys.stderr)


def _machine() -> dict:
    import platform

    return {"machine": platform.machine(), "cores": os.cpu_count(),
            "load_average": os.getloadavg(), "date": time.strftime("%Y-%m-%d %H:%M")}


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
    csv = str(work / "current.csv")
    case_gen("current", rows, csv)
    examples = case_ingest(csv, str(work / "data"))["examples"]
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
