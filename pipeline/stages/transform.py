"""transform: analyze the train split and transform every split on Beam; export the TF graph.

Outputs:
- `transformed/<split>/part-NNNNN.tfrecord` (columnar chunks, see `dataplane.transformed_io`)
  plus `metadata.json`, read by `graphs.input_pipeline.make_dataset`;
- `transform_graph/`: a SavedModel with `transform_features` and `transform_label`, plus
  `feature_spec.json` and `analysis.json` (means, variances, vocabularies, boundaries).

Defaults: numeric columns get a z-score, string columns a vocabulary (all values, one OOV
bucket, missing its own id). `columns:` overrides one column, e.g.
`{island: {kind: hash, buckets: 16}, body_mass_g: {kind: bucketize, buckets: 8}}`.

Tensor features (an image `[H, W, C]`, a vector `[D]`: one column holding a fixed-shape
tensor per row) stay one feature of that shape and get `images:` instead of `numeric:`, by
default `identity`: ingest already scales pixels to [0, 1], and one scale for every pixel is
what convolution filters expect. `zscore` and `minmax` use one mean/std (min/max) over all of
the tensor's values; the per-column kinds (bucketize, vocabulary, hash) do not apply to a
tensor. Pixel columns of examples written before tensor columns (an image recorded in
schema.json as `<name>_<i>` columns) get `images:` too, per pixel as before. The feature spec
records each image, with its shape, for the CNN.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from typing import Literal

from baton.errors import StageError
from baton.pipeline.context import StageContext

INPUTS = {"examples": True}
OUTPUTS = ("transformed", "transform_graph")
CODE_DEPS = ("baton.graphs.transform", "baton.graphs.feature_spec", "baton.pipeline.dataplane")
CACHEABLE = True

Kind = Literal["zscore", "minmax", "identity", "bucketize", "vocabulary", "hash", "drop"]


@dataclasses.dataclass(frozen=True)
class ColumnTransform:
    kind: Kind
    buckets: int = 10  # bucketize: quantile buckets; hash: hash buckets
    top_k: int | None = None  # vocabulary: keep the k most frequent values
    min_frequency: int = 1
    oov_buckets: int = 1

    def __post_init__(self) -> None:
        if self.buckets < 1 or self.oov_buckets < 1 or self.min_frequency < 1:
            raise ValueError(f"buckets, oov_buckets and min_frequency must be >= 1. Received: "
                             f"{self.buckets}, {self.oov_buckets}, {self.min_frequency}")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top_k must be >= 1 or null. Received: {self.top_k}")


@dataclasses.dataclass(frozen=True)
class Config:
    numeric: Literal["zscore", "minmax", "identity", "bucketize"] = "zscore"
    images: Literal["identity", "zscore", "minmax"] = "identity"  # tensor features (images)
    categorical: Literal["vocabulary", "hash"] = "vocabulary"
    top_k: int | None = None
    oov_buckets: int = 1
    buckets: int = 10
    columns: dict[str, ColumnTransform] = dataclasses.field(default_factory=dict)
    beam_pipeline_args: list[str] = dataclasses.field(default_factory=list)
    batch_rows: int = 65_536  # rows parsed per TensorFlow call inside the DoFns
    chunk_rows: int = 4_096  # rows per transformed record

    def __post_init__(self) -> None:
        if self.batch_rows < 1 or self.chunk_rows < 1:
            raise ValueError(f"batch_rows and chunk_rows must be >= 1. Received: "
                             f"{self.batch_rows}, {self.chunk_rows}")


def plan_columns(config: Config, schema) -> dict[str, dict]:  # noqa: ANN001
    """Column -> transform settings, from the defaults and `columns:` overrides."""
    from baton.pipeline.configs import did_you_mean

    names = [c.name for c in schema.features]
    for name in config.columns:
        if name not in names:
            raise StageError(f"transform.columns: no feature column {name!r}"
                             f"{did_you_mean(name, names)}; feature columns are {names}")
    plan = {}
    pixels = schema.image_pixels
    for col in schema.features:
        kind = config.numeric if col.is_numeric else config.categorical
        default = ColumnTransform(
            config.images if col.name in pixels or col.shape else kind, buckets=config.buckets,
            top_k=config.top_k, oov_buckets=config.oov_buckets)
        step = config.columns.get(col.name, default)
        if step.kind == "drop":
            continue
        if col.shape and step.kind not in ("zscore", "minmax", "identity"):
            raise StageError(f"transform.columns.{col.name}: kind {step.kind!r} does not fit a "
                             f"tensor column of shape {list(col.shape)}; tensors take "
                             "identity, zscore or minmax (over all of their values) or drop")
        numeric_kind = step.kind in ("zscore", "minmax", "identity", "bucketize")
        if numeric_kind != col.is_numeric:
            raise StageError(f"transform.columns.{col.name}: kind {step.kind!r} does not fit a "
                             f"{col.dtype} column")
        plan[col.name] = dataclasses.asdict(step)
    if not plan:
        raise StageError("transform: every feature column is dropped; nothing to train on")
    return plan


def run(ctx: StageContext, config: Config) -> None:
    from baton.graphs import transform as tgraph
    from baton.pipeline.dataplane import beam_runner, beam_transform
    from baton.pipeline.dataplane.analysis import feature_spec
    from baton.pipeline.dataplane.schema_file import ExamplesSchema, shard_files
    from baton.pipeline.dataplane.transformed_io import write_metadata

    examples = ctx.inputs["examples"]
    schema = ExamplesSchema.load(examples)
    if not schema.splits.get("train"):
        raise StageError(f"transform: examples in {examples} have no train rows "
                         f"(splits: {dict(schema.splits)})")
    plan = plan_columns(config, schema)
    label_col = schema.column(schema.label)
    raw = [(c.name, c.dtype, c.shape) for c in schema.features if c.name in plan]
    label = {"name": schema.label, "dtype": label_col.dtype, "task": schema.task}
    shards = [(split, str(f), i) for split in schema.splits
              for i, f in enumerate(shard_files(examples, split))]
    columns = [c for c in schema.columns if c.name in plan or c.name == schema.label]
    out_t, out_g = ctx.output("transformed"), ctx.output("transform_graph")
    spill = ctx.work_dir / ".spill"
    spill.mkdir(exist_ok=True)
    scratch = ctx.work_dir / ".beam-results"
    scratch.mkdir(exist_ok=True)
    total = sum(schema.splits.values())
    ctx.log(f"{total} rows in {len(shards)} shards on {beam_runner.runner_name(config.beam_pipeline_args)}")
    started = time.perf_counter()
    try:
        beam_runner.run(lambda p: beam_transform.build(
            p, shards=shards, columns=columns, plan=plan, raw=raw, label=label,
            spill_dir=str(spill), out_dir=str(out_t), analysis_path=str(scratch / tgraph.ANALYSIS_FILE),
            counts_path=str(scratch / "counts.json"), batch_rows=config.batch_rows,
            chunk_rows=config.chunk_rows), config.beam_pipeline_args)
        analysis = json.loads((scratch / tgraph.ANALYSIS_FILE).read_text())
        counts = json.loads((scratch / "counts.json").read_text())
    finally:
        shutil.rmtree(spill, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)
    beam_s = time.perf_counter() - started
    spec = dataclasses.replace(feature_spec(analysis), images=_images(ctx, schema, plan))
    tgraph.save(analysis, out_g)
    export_s = time.perf_counter() - started - beam_s
    spec.save(out_g)
    splits = {s: counts.get(f"rows_{s}", 0) for s in schema.splits}
    dtypes = {f.name: f.dtype for f in spec.features}
    dtypes[schema.label] = "int64" if schema.task == "classification" else "float32"
    write_metadata(out_t, splits, dtypes, schema.label, config.chunk_rows,
                   {f.name: f.shape for f in spec.features if f.shape})
    spec.save(out_t)
    dropped = {s: counts.get(f"dropped_{s}", 0) for s in schema.splits}
    ctx.log(f"transformed {splits}; dropped (unknown or missing label) {dropped}")
    ctx.record(rows=sum(splits.values()), **{f"rows_{s}": n for s, n in splits.items()},
               dropped_label=sum(dropped.values()), features=len(spec.features),
               beam_seconds=round(beam_s, 3), export_seconds=round(export_s, 3))


def _images(ctx: StageContext, schema, plan: dict[str, dict]) -> tuple:  # noqa: ANN001
    """The images of the examples kept as numeric features: tensor columns in the plan, or
    (older examples) pixel columns that all stay numeric features; the others are logged."""
    from baton.graphs.feature_spec import Image

    out = []
    tensors = {c.name for c in schema.columns if c.shape}
    for name, shape in schema.images.items():
        image = Image(name, tuple(shape))
        if name in tensors:
            if name in plan:
                out.append(image)
        elif all(plan.get(p, {}).get("kind") in ("zscore", "minmax", "identity")
                 for p in image.pixels):
            out.append(image)
        else:
            ctx.log(f"image {name!r}: some pixels are dropped or bucketized; the feature spec "
                    "records no image shape for it")
    if out:
        ctx.log("images: " + ", ".join(f"{i.name} {list(i.shape)}" for i in out))
    return tuple(out)
