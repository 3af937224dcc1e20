"""ingest for `source: synthetic`: generated columnar chunks straight to tf.Examples.

Skips the TFDS round trip on purpose: at tens of millions of rows the per-example TFDS
generation would dominate the scale benchmarks it exists to feed.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from pipeline.dataplane.examples_writer import ExamplesWriter
from pipeline.dataplane.schema_file import Column, ExamplesSchema
from pipeline.datasets import synthetic


def ingest(ctx: Any, config: Any, out: Path) -> None:
    s = config.synthetic
    task: Any = "classification" if s.classes else "regression"
    cols = [Column(n, t) for n, t in synthetic.columns(s.numeric, s.categorical)]  # type: ignore[arg-type]
    cols.append(Column("label", "string" if s.classes else "float32"))
    cols = [c for c in cols if c.name not in config.exclude or c.name == "label"]
    writer = ExamplesWriter(out, cols, "label", config.splits, config.seed, config.rows_per_shard)
    progress = ctx.progress(s.rows, "rows", "ingest")
    for chunk in synthetic.generate(**dataclasses.asdict(s)):
        writer.write_batch(chunk)
        progress.update(len(chunk["label"]))
    progress.close()
    counts = writer.close()
    source = {"kind": "synthetic", **dataclasses.asdict(s)}
    dropped = {"missing_label": writer.dropped_missing_label}
    ExamplesSchema(tuple(cols), "label", task, counts, source, dropped).save(out)
    ctx.log(f"{sum(counts.values())} synthetic rows {counts}")
    ctx.record(rows=sum(counts.values()), **{f"rows_{k}": v for k, v in counts.items()})
