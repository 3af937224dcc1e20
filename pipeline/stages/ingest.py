"""ingest: data in, `examples` out (sharded TFRecord tf.Examples per split + schema.json).

Sources:
- `penguins` (default): the embedded CSV through the `baton_penguins` TFDS builder.
- `tfds`: any TFDS catalog name (or prepared dataset directory) in `data_dir`; offline it works
  when the data is already there and otherwise fails naming the dataset and the directory.
- `csv`: files matching a glob; malformed rows go to `quarantine/` with the reason, and the stage
  fails only when their fraction exceeds `max_bad_fraction`.
- `synthetic`: deterministic generated data (rows, seed, columns, label rule) for scale tests,
  or small labelled images (`synthetic: {image: [8, 8, 1], classes: 3}`) for the CNN.

Images (TFDS `Image` features, synthetic images) become one tensor column each (float32 in
[0, 1], shape (H, W, C): one `float_list` of H*W*C values per example, row-major); `schema.json`
records the column's shape and, under `images`, that it is an image, and the transform hands it
on to the model as one `[B, H, W, C]` feature. `max_image_pixels` (unset: no limit) refuses
larger images.

Splits come from `splits` ratios (deterministic for a seed) or, for TFDS, from `split_names`
(output split -> TFDS split, e.g. `{train: train, eval: test}`).
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Literal

from baton.errors import StageError
from baton.pipeline.context import StageContext

INPUTS: dict[str, bool] = {}
OUTPUTS = ("examples",)
CODE_DEPS = ("baton.pipeline.dataplane", "baton.pipeline.datasets")
CACHEABLE = True


@dataclasses.dataclass(frozen=True)
class Synthetic:
    """A generated dataset: `numeric` float columns, `categorical` string columns, a label.

    The label is a fixed random linear rule of the columns (plus noise), cut into `classes`
    equally likely classes, or kept as a number when `classes` is 0 (regression).

    With `image: [H, W, C]` the rows are images instead (`numeric`, `categorical` and
    `vocab_size` are ignored): a tensor column `image`, label = the pattern drawn (2 to 6
    classes: horizontal, vertical, diagonal, antidiagonal, cross, square), `noise` = the std
    of the Gaussian pixel noise. See `pipeline.datasets.synthetic.generate_images`.
    """

    rows: int = 10_000
    seed: int = 0
    numeric: int = 4
    categorical: int = 1
    vocab_size: int = 20
    classes: int = 2
    missing: float = 0.0  # fraction of feature values left missing
    noise: float = 0.1
    image: tuple[int, ...] = ()  # (height, width, channels): generate images instead

    def __post_init__(self) -> None:
        for name in ("rows", "numeric", "categorical", "vocab_size", "classes"):
            if getattr(self, name) < 0:
                raise ValueError(f"synthetic.{name} must be >= 0. Received: {getattr(self, name)}")
        if not 0.0 <= self.missing < 1.0:
            raise ValueError(f"synthetic.missing must be in [0, 1). Received: {self.missing}")
        if self.noise < 0:
            raise ValueError(f"synthetic.noise must be >= 0. Received: {self.noise}")
        if self.image:
            from baton.pipeline.datasets.synthetic import PATTERNS

            if len(self.image) != 3 or min(self.image[:2]) < 4 or self.image[2] < 1:
                raise ValueError("synthetic.image must be [height, width, channels] with height "
                                 f"and width >= 4. Received: {list(self.image)}")
            if not 2 <= self.classes <= len(PATTERNS):
                raise ValueError(f"synthetic images need 2 to {len(PATTERNS)} classes (one "
                                 f"pattern each). Received: classes={self.classes}")


@dataclasses.dataclass(frozen=True)
class Config:
    source: Literal["penguins", "tfds", "csv", "synthetic"] = "penguins"
    dataset: str | None = None  # TFDS name for source=tfds, e.g. "iris" or "iris:2.1.0"
    data_dir: Path | None = None  # TFDS data_dir for source=tfds
    download: bool = True  # source=tfds: try to download when not prepared
    path: str | None = None  # glob of CSV files for source=csv
    label: str | None = None  # default: species / TFDS supervised label / "label"
    task: Literal["classification", "regression"] | None = None
    column_types: dict[str, Literal["float32", "string"]] = dataclasses.field(default_factory=dict)
    exclude: list[str] = dataclasses.field(default_factory=list)
    splits: dict[str, float] = dataclasses.field(default_factory=lambda: {"train": 0.8, "eval": 0.2})
    split_names: dict[str, str] = dataclasses.field(default_factory=dict)
    seed: int = 42
    rows_per_shard: int = 500_000
    batch_rows: int = 65_536
    max_image_pixels: int | None = None  # refuse images over this many values (H*W*C)
    max_bad_fraction: float = 0.01
    na_values: list[str] = dataclasses.field(default_factory=lambda: ["", "NA", "NaN", "nan", "null"])
    synthetic: Synthetic = dataclasses.field(default_factory=Synthetic)

    def __post_init__(self) -> None:
        if self.source == "penguins" and self.dataset not in (None, "penguins", "baton_penguins"):
            raise ValueError(f"dataset {self.dataset!r} is a TFDS name: set source: tfds "
                             f"(the default source is the embedded penguins)")
        if self.source == "tfds" and not self.dataset:
            raise ValueError("source 'tfds' needs dataset: a TFDS name. Received: dataset=None")
        if self.source == "csv" and not self.path:
            raise ValueError("source 'csv' needs path: a glob of CSV files. Received: path=None")
        if not self.split_names and (not self.splits or any(v <= 0 for v in self.splits.values())):
            raise ValueError(f"splits must map split names to positive ratios. Received: {self.splits}")
        if self.split_names and self.source != "tfds":
            raise ValueError(f"split_names needs source 'tfds'. Received: source={self.source!r}")
        if not 0.0 <= self.max_bad_fraction <= 1.0:
            raise ValueError(f"max_bad_fraction must be in [0, 1]. Received: {self.max_bad_fraction}")
        if self.rows_per_shard < 1 or self.batch_rows < 1:
            raise ValueError(f"rows_per_shard and batch_rows must be >= 1. Received: "
                             f"{self.rows_per_shard}, {self.batch_rows}")
        if self.max_image_pixels is not None and self.max_image_pixels < 1:
            raise ValueError(f"max_image_pixels must be >= 1 or unset. "
                             f"Received: {self.max_image_pixels}")
        if self.source == "synthetic" and self.synthetic.image and self.max_image_pixels:
            n = self.synthetic.image[0] * self.synthetic.image[1] * self.synthetic.image[2]
            if n > self.max_image_pixels:
                raise ValueError(
                    f"synthetic.image {list(self.synthetic.image)} has {n} pixel values, over "
                    f"max_image_pixels={self.max_image_pixels} (raise or unset it)")


def external_inputs(config: Config, spec_dir: Path) -> list[Path]:
    """The data files ingest reads, so editing the data reruns ingest (cache key)."""
    from baton.pipeline.datasets import PENGUINS_CSV

    if config.source == "penguins":
        return [PENGUINS_CSV]
    if config.source == "csv":
        from baton.pipeline.dataplane.sources.csv_source import expand_glob

        return expand_glob(str(config.path), spec_dir)
    if config.source == "tfds" and config.data_dir is not None:
        d = config.data_dir if config.data_dir.is_absolute() else spec_dir / config.data_dir
        return [d / config.dataset.split(":")[0].split("/")[0]] if config.dataset else [d]
    return []


def run(ctx: StageContext, config: Config) -> None:
    from baton.pipeline.dataplane.heap_reuse import heap_reuse

    with heap_reuse():  # each batch's freed encoding buffers serve the next batch
        _run(ctx, config)


def _run(ctx: StageContext, config: Config) -> None:
    out = ctx.output("examples")
    if config.source == "csv":
        from baton.pipeline.dataplane.sources import ingest_csv

        ingest_csv.ingest(ctx, config, out)
        return
    if config.source == "synthetic":
        from baton.pipeline.dataplane.sources import ingest_synthetic

        ingest_synthetic.ingest(ctx, config, out)
        return
    _ingest_tfds(ctx, config, out)


def _ingest_tfds(ctx: StageContext, config: Config, out: Path) -> None:
    import tensorflow_datasets as tfds

    from baton.pipeline.dataplane.records.examples_writer import ExamplesWriter
    from baton.pipeline.dataplane.records.schema_file import Column, ExamplesSchema
    from baton.pipeline.dataplane.sources import tfds_source

    tfds.disable_progress_bar()
    scratch = None
    if config.source == "penguins":
        from baton.pipeline.datasets.penguins import LABEL, BatonPenguins

        scratch = ctx.work_dir / ".tfds"  # prepared inside the run, removed before the rename
        builder = BatonPenguins(data_dir=str(scratch))
        try:
            builder.download_and_prepare()
        except (ValueError, KeyError, OSError) as exc:  # an edited embedded CSV
            raise StageError(f"embedded penguins CSV cannot be read: {exc}") from None
        default_label, source = LABEL, {"kind": "penguins", "tfds": builder.info.full_name}
    else:
        data_dir = ctx.resolve(config.data_dir) if config.data_dir else Path.home() / "tensorflow_datasets"
        builder = tfds_source.open_builder(str(config.dataset), data_dir, download=config.download)
        keys = builder.info.supervised_keys
        default_label = keys[1] if keys and isinstance(keys[1], str) else "label"
        source = {"kind": "tfds", "tfds": builder.info.full_name, "data_dir": str(data_dir)}
    try:
        columns, decoders = tfds_source.tabular_columns(builder, config.max_image_pixels)
        label = config.label or default_label
        images = {n: s for n, s in tfds_source.images(decoders).items() if n not in config.exclude}
        columns = [c for c in columns if c.name not in config.exclude]
        for c in columns:
            if c.shape and config.column_types.get(c.name, c.dtype) != c.dtype:
                raise StageError(f"column_types.{c.name}: {c.name!r} is a tensor (shape "
                                 f"{list(c.shape)}) and stays float32. Received: "
                                 f"{config.column_types[c.name]!r}")
        columns = [Column(c.name, config.column_types.get(c.name, c.dtype), c.shape)
                   for c in columns]
        _check_label(label, columns)
        task = config.task or ("regression" if _col(columns, label).is_numeric else "classification")
        if task == "classification" and _col(columns, label).is_numeric:
            columns = [Column(c.name, "string") if c.name == label else c for c in columns]
        writer = ExamplesWriter(out, columns, label, config.splits if not config.split_names
                                else dict.fromkeys(config.split_names, 1.0), config.seed,
                                config.rows_per_shard)
        plan = list(config.split_names.items()) if config.split_names else [(None, "train")]
        progress = ctx.progress(None, "rows", "ingest")
        for out_split, tfds_split in plan:
            for batch in tfds_source.iter_batches(builder, tfds_split, decoders, config.batch_rows):
                batch = _coerce(batch, columns)
                writer.write_batch(batch, split=out_split)
                progress.update(len(next(iter(batch.values()))))
        progress.close()
        counts = writer.close()
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    dropped = {"missing_label": writer.dropped_missing_label}
    if sum(counts.values()) == 0:
        what = (f"every row lacks label {label!r}" if writer.dropped_missing_label
                else "the dataset has no rows")
        raise StageError(f"ingest: 0 of {writer.dropped_missing_label} rows kept from "
                         f"{source['tfds']}: {what}")
    ExamplesSchema(tuple(columns), label, task, counts, source, dropped, images).save(out)
    if images:
        ctx.log("images: " + ", ".join(f"{n} {list(s)}" for n, s in images.items()))
    ctx.log(f"{sum(counts.values())} rows {counts}, dropped {dropped}")
    ctx.record(rows=sum(counts.values()), **{f"rows_{k}": v for k, v in counts.items()},
               dropped_missing_label=writer.dropped_missing_label)


def _col(columns, name):  # noqa: ANN001, ANN202
    return next(c for c in columns if c.name == name)


def _check_label(label: str, columns) -> None:  # noqa: ANN001
    names = [c.name for c in columns]
    if label not in names:
        from baton.configs import did_you_mean

        raise StageError(f"label: column {label!r} not found{did_you_mean(label, names)}; "
                         f"columns are {names}")


def _coerce(batch, columns):  # noqa: ANN001, ANN202
    """Apply `column_types` overrides (e.g. an integer class id used as a string label)."""
    import numpy as np

    out = {}
    for c in columns:
        v = batch[c.name]
        if c.is_numeric and v.dtype == object:
            raise StageError(f"column {c.name!r}: strings cannot be read as float32")
        if not c.is_numeric and v.dtype != object:
            v = np.array(["" if np.isnan(x) else (str(int(x)) if float(x).is_integer() else str(x))
                          for x in v.astype(np.float64)], object)
        out[c.name] = v
    return out
