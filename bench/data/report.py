"""Render the data-plane benchmark results as docs/benchmarks-data.md."""

from __future__ import annotations

import platform
import time
from pathlib import Path
from typing import Any


def write_report(r: dict[str, Any], path: Path) -> Path:
    tft = r.get("tft")
    lines = [
        "## Data plane (transform, statistics, input pipeline)",
        "",
        f"Run {time.strftime('%Y-%m-%d %H:%M')} on {platform.machine()}, 2 cores, by "
        "`python bench/data/run_bench.py`. Synthetic rows (4 float columns, 1 string column "
        "of 100 values, binary label) written by the `ingest` stage. Seconds are the whole "
        "stage: Beam pipeline construction and run, the Arrow/TFRecord reads, the write of "
        "`transformed`, and the SavedModel export (~1 s of fixed cost).",
        "",
        "### Transform: z-score on 4 numeric columns + vocabulary on 1 categorical",
        "",
        "| implementation | runner | rows | seconds | rows/s | peak RSS MB | vs tf.Transform |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for t in r["transform"]:
        ratio = f"{t['rows_per_s'] / tft['rows_per_s']:.0f}x" if tft else "n/a"
        lines.append(f"| Baton `transform` | {t['runner']} | {t['rows']:,} | {t['seconds']:.1f} "
                     f"| {t['rows_per_s']:,.0f} | {t['peak_rss_mb']:.0f} | {ratio} |")
    if tft:
        lines.append(f"| tensorflow-transform {tft['tft']} `AnalyzeAndTransformDataset` | "
                     f"FnApiRunner | {tft['rows']:,} | {tft['seconds']:.1f} | "
                     f"{tft['rows_per_s']:,.0f} | {tft['peak_rss_mb']:.0f} | 1x |")
    if tft:
        best = {t["rows"]: t["rows_per_s"] for t in r["transform"] if t["runner"] == "FnApiRunner"}
        lines += ["", "Summary: " + "; ".join(
            f"{rows:,} rows at {rate:,.0f} rows/s = {rate / tft['rows_per_s']:.0f}x tf.Transform"
            for rows, rate in sorted(best.items())) + " (target: 50x; aim: 1M rows/s)."]
    lines += [
        "",
        "The `examples` artifact is TFRecord tf.Examples (the contract) plus an Arrow copy of "
        "each shard written by ingest; the transform reads the Arrow copy. The \"TFRecords "
        "only\" row is the same transform on examples without it (each tf.Example parsed by "
        "TensorFlow, then spilled to Arrow between the analyze and apply passes). With 2 worker "
        "processes each worker first imports TensorFlow and Beam (~5 s here), which this "
        "workload (microseconds of numpy per thousand rows) never earns back on 2 cores; "
        "the in-process FnApiRunner is the right local default.",
        "",
        "Peak RSS is the stage process (and its Beam worker processes, for the 2-process runs);"
        " compare the two row counts: memory is bounded by batches and vocabularies, not by "
        "rows.",
        "",
        "### Statistics",
        "",
        "| rows | seconds | rows/s | peak RSS MB |",
        "|---:|---:|---:|---:|",
    ]
    for s in r["statistics"]:
        lines.append(f"| {s['rows']:,} | {s['seconds']:.1f} | {s['rows_per_s']:,.0f} | "
                     f"{s['peak_rss_mb']:.0f} |")
    i = r["input"]
    lines += [
        "",
        "### Input pipeline vs train step (default `mlp`, batch 32)",
        "",
        "`make_dataset(..., shuffle=True, repeat=True)` measured two ways: drained by "
        "`Dataset.reduce` (the pipeline alone, in C++), and consumed as the trainer does "
        "(`next(iterator)` inside a `tf.function` running 20 steps; this includes the per-step "
        "iterator cost, which the train step pays too). The train step (`graphs.steps."
        "make_train_chunk`, 20 steps per call) reads one fixed batch, so it pays no input cost.",
        "",
        "| measure | examples/s | vs train step |",
        "|---|---:|---:|",
        f"| input pipeline alone (`Dataset.reduce`) | {i['produce_examples_per_s']:,.0f} | "
        f"{i['produce_ratio']:.1f}x |",
        f"| input pipeline through an iterator in a `tf.function` | "
        f"{i['input_examples_per_s']:,.0f} | {i['ratio']:.1f}x |",
        f"| train step (`mlp`, Adam) | {i['train_step_examples_per_s']:,.0f} | 1x |",
        "",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path
