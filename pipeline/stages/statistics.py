"""statistics: per-feature statistics of every split (Beam) and the schema inferred from train.

Outputs:
- `statistics/statistics.json` (see `pipeline.dataplane.statistics.stats`), `statistics/statistics.txt`
  (the table `baton inspect` prints) and `statistics/index.html` (per-feature histograms);
- `schema/schema.json`: type, presence and domain per feature plus a reference distribution.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json

from baton.errors import BatonError, StageError
from baton.pipeline.context import StageContext

INPUTS = {"examples": True}
OUTPUTS = ("statistics", "schema")
CODE_DEPS = ("baton.pipeline.dataplane",)
CACHEABLE = True


@dataclasses.dataclass(frozen=True)
class Config:
    reference_split: str = "train"  # the split the schema is inferred from
    max_domain: int = 1000  # string columns with more distinct values get no value domain
    missing_slack: float = 0.05  # allowed increase of the missing fraction over the reference
    beam_pipeline_args: list[str] = dataclasses.field(default_factory=list)
    batch_rows: int = 65_536

    def __post_init__(self) -> None:
        if not 0 <= self.missing_slack <= 1:
            raise ValueError(f"missing_slack must be in [0, 1]. Received: {self.missing_slack}")


def run(ctx: StageContext, config: Config) -> None:
    from baton.pipeline.dataplane.beam import runner as beam_runner
    from baton.pipeline.dataplane.beam import statistics as beam_statistics
    from baton.pipeline.dataplane.beam.shard_source import result_location, shard_refs
    from baton.pipeline.dataplane.records.schema_file import ExamplesSchema, shard_files
    from baton.pipeline.dataplane.statistics import render, stats
    from baton.storage import objects

    examples = ctx.inputs["examples"]
    schema = ExamplesSchema.load(examples)
    if config.reference_split not in schema.splits:
        raise StageError(f"statistics.reference_split: no split {config.reference_split!r}; "
                         f"splits are {sorted(schema.splits)}")
    files = {s: shard_files(examples, s) for s in schema.splits}
    out_s, out_schema = ctx.output("statistics"), ctx.output("schema")
    path = out_s / stats.STATS_FILE
    args, placed = beam_runner.plan_workers(config.beam_pipeline_args,
                                            rows=sum(schema.splits.values()),
                                            work_items=sum(map(len, files.values())))
    # workers on other machines read the shards' objects and write the result to the store
    elsewhere = beam_runner.runner_name(args) not in beam_runner.LOCAL
    remote = ctx.input_objects("examples", elsewhere)
    shards = [(s, ref) for s in schema.splits for ref in shard_refs(files[s], examples, remote)]
    results = ctx.results_prefix(elsewhere)
    out = result_location(path, results)
    try:
        beam_runner.run(lambda p: beam_statistics.build(
            p, shards=shards, columns=list(schema.columns), batch_rows=config.batch_rows,
            out_path=out), args)
        result = json.loads(objects.read_bytes(out))
    finally:
        if results is not None:  # best effort: a failed attempt's prefix goes with it
            with contextlib.suppress(BatonError):
                objects.delete_tree(results)
    result["label"], result["task"] = schema.label, schema.task
    stats.save_json(result, path)
    inferred = stats.infer_schema(result, schema.label, schema.task,
                                  reference_split=config.reference_split,
                                  max_domain=config.max_domain, missing_slack=config.missing_slack)
    stats.save_json(inferred, out_schema / stats.SCHEMA_FILE)
    (out_s / "statistics.txt").write_text(render.statistics_table(out_s) + "\n")
    render.write_html(result, out_s / render.HTML_FILE)
    rows = {s: v["rows"] for s, v in result["splits"].items()}
    ctx.log(f"statistics of {rows} rows, {len(schema.columns)} columns -> "
            f"{ctx.final_path('statistics') / render.HTML_FILE}")
    ctx.record(rows=sum(rows.values()), columns=len(schema.columns), **placed)
