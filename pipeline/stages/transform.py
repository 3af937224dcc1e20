"""transform: analyze the train split and transform every split on Beam; export the TF graph.

The transform is a preprocessing_fn: the user's (`preprocessing_fn:`, docs/preprocessing.md) or
the one the column kinds below stand for (graphs.column_kinds). Both run the same way: one Beam
pass per analyzer phase, the last one in the same pipeline as the apply pass calling the final
graph per record batch (dataplane.beam.apply), and that graph exported (graphs.tft.module).

Outputs:
- `transformed/<split>/part-NNNNN.tfrecord` (columnar chunks, see `dataplane.records.transformed_io`)
  plus `metadata.json`, read by `graphs.input_pipeline.make_dataset`;
- `transform_graph/`: a SavedModel with `transform_features` and `transform_label`, plus
  `feature_spec.json`, `tft_metadata.json`, vocabularies in `assets/`, and `analysis.json` (the
  label's classes; for the column kinds each column's mean, variance, vocabulary, boundaries).

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

import contextlib
import dataclasses
import functools
import json
import pickle
import shutil
import time
from pathlib import Path
from typing import Any

from baton.errors import BatonError, StageError
from baton.pipeline.context import StageContext
from baton.pipeline.dataplane.transform.column_plan import (  # noqa: F401 - ColumnTransform: the config's
    ColumnTransform,
    TransformSettings,
    plan_columns,
)
from baton.pipeline.dataplane.transform.user_errors import UserErrors  # noqa: F401 - also the dry run's

INPUTS = {"examples": True}
OUTPUTS = ("transformed", "transform_graph")
CODE_DEPS = ("baton.graphs.transform", "baton.graphs.column_kinds", "baton.graphs.feature_spec", "baton.pipeline.dataplane",
             "baton.graphs.tft", "baton.graphs.quantile_sketch",
             "baton.graphs.label_outputs", "baton.graphs.nonfinite")
CACHEABLE = True

@dataclasses.dataclass(frozen=True)
class Config(TransformSettings):
    beam_pipeline_args: list[str] = dataclasses.field(default_factory=list)
    batch_rows: int = 65_536  # rows per TensorFlow call inside the DoFns (about: see reader)
    chunk_rows: int = 4_096  # rows per transformed record

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.batch_rows < 1 or self.chunk_rows < 1:
            raise ValueError(f"batch_rows and chunk_rows must be >= 1. Received: "
                             f"{self.batch_rows}, {self.chunk_rows}")


def check_spec(config: Config, stage: Any, spec: Any) -> list[str]:
    """The preprocessing_fn must import and be a function (refused by `plan`, exit 2, with the
    module's file:line when importing it fails), before any stage runs."""
    if config.preprocessing_fn is None:
        return []
    from baton.graphs.user_refs import RefError, import_ref

    try:
        fn = import_ref(config.preprocessing_fn, getattr(spec, "spec_dir", None),
                        what="preprocessing_fn")
    except RefError as exc:
        return [f"config.preprocessing_fn: {exc}"]
    if not callable(fn):
        return [f"config.preprocessing_fn: {config.preprocessing_fn!r} is not a function. "
                f"Received: {type(fn).__name__}"]
    return []


def external_inputs(config: Config, spec_dir: Path | None) -> list[Path]:
    """The preprocessing_fn's module and the modules it imports beside the spec: their bytes
    join the cache key (editing a helper reruns the transform)."""
    if config.preprocessing_fn is None:
        return []
    from baton.pipeline.user_code import user_code_files

    return user_code_files([config.preprocessing_fn], spec_dir)


def run(ctx: StageContext, config: Config) -> None:
    from baton.pipeline.dataplane.frozen_heap import frozen_heap
    from baton.pipeline.dataplane.heap_reuse import heap_reuse

    # the libraries' objects stay out of garbage collections; freed batches' memory is reused
    with frozen_heap(), heap_reuse():
        _run(ctx, config)


def _run(ctx: StageContext, config: Config) -> None:
    from baton.graphs.column_kinds import ColumnsFn
    from baton.pipeline.dataplane.records.schema_file import ExamplesSchema
    from baton.pipeline.dataplane.transform.fn_source import UserFn

    examples = ctx.inputs["examples"]
    schema = ExamplesSchema.load(examples)
    if not schema.splits.get("train"):
        raise StageError(f"transform: examples in {examples} have no train rows "
                         f"(splits: {dict(schema.splits)})")
    if config.preprocessing_fn is not None:
        search = str(ctx.spec_dir) if ctx.spec_dir else None
        # the user's modules travel to the workers inside the DoFns (fn_source.UserFn.staged)
        _run_tft(ctx, config, schema, examples, UserFn.staged(str(config.preprocessing_fn), search),
                 [c for c in schema.features])
        return
    plan = plan_columns(config, schema)
    _run_tft(ctx, config, schema, examples, ColumnsFn(plan),
             [c for c in schema.features if c.name in plan], plan)


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


def _run_tft(ctx: StageContext, config: Config, schema: Any, examples: Path, source: Any,
             features: list[Any], plan: dict[str, dict] | None = None) -> None:
    """A preprocessing_fn (the user's, or the column plan's `ColumnsFn`): its analyzer phases
    and its apply pass on Beam, its final graph exported as the transform SavedModel
    (graphs.tft.module). `features`: the raw feature columns it reads (the serving inputs)."""
    from baton.graphs.tft import engine as tft_engine
    from baton.graphs.tft import module as tft_module
    from baton.graphs.user_refs import RefError
    from baton.pipeline.dataplane.beam import apply as beam_apply
    from baton.pipeline.dataplane.beam import early_build, early_export, local_objects
    from baton.pipeline.dataplane.beam import runner as beam_runner
    from baton.pipeline.dataplane.beam import tft as beam_tft
    from baton.pipeline.dataplane.beam.shard_source import result_location, shard_refs
    from baton.pipeline.dataplane.records.schema_file import shard_files
    from baton.pipeline.dataplane.records.transformed_io import write_metadata
    from baton.pipeline.dataplane.transform.analysis import label_analysis, save_transform_graph
    from baton.storage import objects

    where = source.where
    try:
        fn = source.load()
    except RefError as exc:
        raise StageError(f"{where}: {exc}") from None
    label = schema.label
    label_col = schema.column(label)
    raw_feats = [(c.name, "float32" if c.is_numeric else "string", tuple(c.shape))
                 for c in features]
    raw_all = [*raw_feats, (label, "float32" if label_col.is_numeric else "string", ())]
    names = {name for name, _, _ in raw_all}
    columns = [c for c in schema.columns if c.name in names]
    args, placed = beam_runner.plan_workers(
        config.beam_pipeline_args, rows=sum(schema.splits.values()),
        work_items=sum(len(shard_files(examples, s)) for s in schema.splits))
    # workers on other machines (a bucket run on Dataflow, Flink, Spark...) read the shards'
    # objects and hand their results back through the store (dataplane.beam.shard_source)
    elsewhere = beam_runner.runner_name(args) not in beam_runner.LOCAL
    remote = ctx.input_objects("examples", elsewhere)
    shards = [(split, ref, i) for split in schema.splits for i, ref in
              enumerate(shard_refs(shard_files(examples, split), examples, remote))]
    scratch = ctx.work_dir / ".beam-results"
    scratch.mkdir(exist_ok=True)
    results = ctx.results_prefix(elsewhere)
    ctx.log(f"{sum(schema.splits.values())} rows in {len(shards)} shards on "
            f"{beam_runner.runner_name(args)}, {placed['beam_workers']} worker(s) "
            f"({placed['beam_running_mode']}; {placed['beam_workers_reason']})")
    started = time.perf_counter()

    def user_errors(step: str) -> Any:
        return UserErrors(f"{where}: {step}")

    threads = beam_runner.batch_threads(placed)
    label_meta = {"name": label, "dtype": label_col.dtype, "task": schema.task}
    phases = tft_engine.Phases(fn, tft_engine.raw_specs(raw_all))
    label_acc = None
    out_t, out_g = ctx.output("transformed"), ctx.output("transform_graph")
    counts_path = result_location(scratch / "counts.json", results)

    def analyze(phase: Any, key: str, box_key: str | None = None) -> Any:
        return beam_tft.AnalyzePhase(source, raw_all, phases.resolved, columns, label,
                                     config.batch_rows, with_label=label_acc is None,
                                     local_key=key, threads=threads,
                                     step=f"analyzer phase {phases.number}", box_key=box_key)

    try:
        while True:  # the phases before the last, one pipeline each
            with user_errors("tracing"):
                phase = phases.next()
            kinds = {k: r.kind for k, r in (phase.analyzers.items() if phase else [])}
            result = result_location(scratch / f"phase-{phases.number}.pkl", results)
            if phase is None or phase.last:
                break
            with user_errors(f"analyzer phase {phase.number}"), \
                    local_objects.lend((phase,)) as key:
                beam_runner.run(functools.partial(
                    beam_tft.build_phase, shards=shards, dofn=analyze(phase, key), kinds=kinds,
                    result_path=result), args)
            merged = pickle.loads(objects.read_bytes(result))
            label_acc = label_acc if label_acc is not None else merged["label"]
            phases.finish(phase, merged["tft"])
            ctx.log(f"analyzer phase {phase.number}: {len(phase.analyzers)} analyzers "
                    f"({', '.join(sorted(set(kinds.values())))})")
        # the last phase (or the label alone) and the apply step: one pipeline
        # (dataplane.beam.apply builds the module from the phase's values in its workers)
        # (the module is built and the SavedModel written in Beam's idle moments:
        # dataplane.beam.early_build, early_export)
        box = early_build.prepare(early_export.prepare({}),
                                  sum(1 for s in shards if s[0] == "train"))
        exporter = early_export.EarlyExport(box, len(shards), out_g)
        exporter.start()
        builder = None
        try:
            with user_errors("applying"), local_objects.lend((phase,)) as key, \
                    local_objects.lend(box) as box_key:
                apply = beam_apply.ApplyPreprocessing(
                    source, list(raw_feats), phases.resolved,
                    tft_engine.finishing(phase) if phase else {}, label_meta, label_acc,
                    columns, ctx.direct_output("transformed", elsewhere), config.batch_rows,
                    config.chunk_rows, box_key=box_key, threads=threads)
                builder = early_build.EarlyBuild(
                    box, lambda partial: apply.build_state(pickle.loads(partial)))
                builder.start()
                beam_runner.run(functools.partial(
                    beam_tft.build_last, shards=shards, dofn=analyze(phase, key, box_key),
                    kinds=kinds, result_path=result, apply=apply, counts_path=counts_path),
                    args)
        except BaseException:
            with contextlib.suppress(BaseException):  # the pipeline's error is the one to see
                exporter.finish()
            raise
        finally:
            if builder is not None:
                builder.finish()
        exporter.finish()
        merged = pickle.loads(objects.read_bytes(result))
        label_acc = label_acc if label_acc is not None else merged["label"]
        if phase is not None:
            phases.finish(phase, merged["tft"])
            ctx.log(f"analyzer phase {phase.number} (with the apply step): "
                    f"{len(phase.analyzers)} analyzers "
                    f"({', '.join(sorted(set(kinds.values())))})")
        analysis = box.get("analysis") or label_analysis(label_acc or {}, raw_feats, label_meta)
        built = box.get("built")
        if built is None:  # the DoFns ran in other processes: the same module, built here
            with user_errors("building the transform"):
                built = tft_module.build_module(fn, list(raw_feats), analysis["label"],
                                                phases.resolved)
        counts = json.loads(objects.read_bytes(counts_path))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if results is not None:  # best effort: a failed attempt's prefix goes with it
            with contextlib.suppress(BatonError):
                objects.delete_tree(results)
    beam_s = time.perf_counter() - started
    spec = tft_module.feature_spec(built, raw_feats, analysis["label"],
                                   _images(ctx, schema, plan) if plan is not None else ())
    analysis.update(phases=phases.number, analyzers=len(phases.resolved))
    save_transform_graph(out_g, built, spec, analysis, source, phases.resolved, raw_feats,
                         model_saved=exporter.saved)
    export_s = time.perf_counter() - started - beam_s
    splits = {s: counts.get(f"rows_{s}", 0) for s in schema.splits}
    dtypes = {f.name: f.dtype for f in spec.features}
    dtypes[label] = "int64" if schema.task == "classification" else "float32"
    write_metadata(out_t, splits, dtypes, label, config.chunk_rows,
                   {f.name: f.shape for f in spec.features if f.shape},
                   {f.name: f.encoding for f in spec.features if not f.dense})
    spec.save(out_t)
    from baton.graphs.nonfinite import counts_note

    numeric = {f.name for f in spec.features if f.kind == "numeric"}
    bad = {s: {f: counts.get(f"{beam_apply.NONFINITE}{s}/{f}", 0) for f in sorted(numeric)}
           for s in schema.splits}
    nonfinite, nonfinite_rows = counts_note(bad, splits)
    if nonfinite is not None:
        ctx.log(f"{where}: {nonfinite}")
    dropped = {s: counts.get(f"dropped_{s}", 0) for s in schema.splits}
    note = tft_module.label_note(built, label)
    if note is not None:
        ctx.log(f"{where}: {note}")
    ctx.log(f"{where}: {len(phases.resolved)} analyzers in {phases.number} phases; "
            f"transformed {splits}; dropped (unknown or missing label) {dropped}")
    ctx.record(rows=sum(splits.values()), **{f"rows_{s}": n for s, n in splits.items()},
               dropped_label=sum(dropped.values()), features=len(spec.features),
               analyzers=len(phases.resolved), phases=phases.number,
               label_transformed=built.label_transformed, nonfinite_values=nonfinite_rows,
               beam_seconds=round(beam_s, 3), export_seconds=round(export_s, 3),
               batch_threads=threads, **placed)
