"""The statistics Beam pipeline: per-shard accumulators, merged per split, finalized once.

    shards --StatsShard--> (split, accumulators) --CombinePerKey--> (split, statistics)
           --ToDict--> statistics.json

Memory is bounded by the accumulators (moments, a fixed-size quantile sketch, one count per
distinct string), never by the row count. Imports Beam at its top: import inside `run` only.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import apache_beam as beam

from baton.pipeline.dataplane.beam.merge import MergeShardAccumulators
from baton.pipeline.dataplane.records.schema_file import Column
from baton.pipeline.dataplane.statistics import accumulators as accs_mod


class StatsShard(beam.DoFn):
    def __init__(self, columns: Sequence[Column], batch_rows: int) -> None:
        self.columns, self.batch_rows = list(columns), batch_rows

    def process(self, element: tuple[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
        from baton.pipeline.dataplane.beam.shard_source import local_shard
        from baton.pipeline.dataplane.records.reader import read_batches

        split, ref = element  # a path, or a remote shard fetched into this worker's cache
        accs = accs_mod.new_accumulators(self.columns)
        with local_shard(ref) as path:
            for batch in read_batches(path, self.columns, self.batch_rows, keep_nan=True):
                accs_mod.update(accs, batch, keep_nan=True)
        yield split, accs


class MergeToStats(MergeShardAccumulators):
    def finish(self, acc: dict[str, Any]) -> dict[str, Any]:
        from baton.pipeline.dataplane.statistics.stats import split_stats

        return split_stats(acc)


def build(p: Any, *, shards: list[tuple[str, Any]], columns: Sequence[Column],
          batch_rows: int, out_path: str) -> None:
    from baton.pipeline.dataplane.beam.merge import write_json

    (
        p
        | "Shards" >> beam.Create(shards)
        | "Reshuffle" >> beam.Reshuffle()
        | "Accumulate" >> beam.ParDo(StatsShard(columns, batch_rows))
        | "Merge" >> beam.CombinePerKey(MergeToStats())
        | "Collect" >> beam.combiners.ToDict()
        | "Write" >> beam.Map(lambda splits: write_json({"splits": splits}, out_path))
    )
