"""ingest for `source: synthetic`: generated columnar chunks straight to tf.Examples.

Tabular rows (`synthetic.generate`) or, with `synthetic.image`, labelled pattern images
(`synthetic.generate_images`): one tensor column `image` of that shape, recorded in
schema.json's `images`.

Skips the TFDS round trip on purpose: at tens of millions of rows the per-example TFDS
generation would dominate the scale benchmarks it exists to feed.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from baton.pipeline.dataplane.records.examples_writer import ExamplesWriter
from baton.pipeline.dataplane.records.schema_file import Column, ExamplesSchema
from baton.pipeline.datasets import synthetic


def ingest(ctx: Any, config: Any, out: Path) -> None:
    s = config.synthetic
    task: Any = "classification" if s.classes or s.image else "regression"
    if s.image:
        names = [(synthetic.IMAGE_FEATURE, "float32")]
        chunks = synthetic.generate_images(s.rows, s.seed, tuple(s.image), s.classes, s.noise,
                                           s.missing)
    else:
        names = synthetic.columns(s.numeric, s.categorical)
        chunks = synthetic.generate(s.rows, s.seed, s.numeric, s.categorical, s.vocab_size,
                                    s.classes, s.missing, s.noise)
    shape = tuple(int(d) for d in s.image)
    cols = [Column(n, t, shape if s.image else ()) for n, t in names]  # type: ignore[arg-type]
    cols.append(Column("label", "string" if task == "classification" else "float32"))
    cols = [c for c in cols if c.name not in config.exclude or c.name == "label"]
    images: dict[str, tuple[int, ...]] = {}
    if s.image and len(cols) == len(names) + 1:  # the image is kept
        images[synthetic.IMAGE_FEATURE] = shape
    writer = ExamplesWriter(out, cols, "label", config.splits, config.seed, config.rows_per_shard)
    progress = ctx.progress(s.rows, "rows", "ingest")
    for chunk in chunks:
        writer.write_batch(chunk)
        progress.update(len(chunk["label"]))
    progress.close()
    counts = writer.close()
    source = {"kind": "synthetic", **dataclasses.asdict(s)}
    if not s.image:
        source.pop("image")  # tabular records stay as they were
    dropped = {"missing_label": writer.dropped_missing_label}
    ExamplesSchema(tuple(cols), "label", task, counts, source, dropped, images).save(out)
    ctx.log(f"{sum(counts.values())} synthetic rows {counts}")
    ctx.record(rows=sum(counts.values()), **{f"rows_{k}": v for k, v in counts.items()})
