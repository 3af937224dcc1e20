"""The Beam combiners the data passes share: shard accumulators merged, counts summed.

Statistics (and the transform's label pass) compute per-shard accumulator dicts
(pipeline.dataplane.statistics.accumulators) and merge them associatively; only what is made of the
merged result differs, so subclasses give `finish`. `SumCounts` adds the per-shard row counts
the apply pass reports, and `write_json` lands a pipeline's single result in a file.
Imports Beam at its top: import inside `run` only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import apache_beam as beam

from baton.pipeline.dataplane.statistics import accumulators as accs_mod


class MergeShardAccumulators(beam.CombineFn):
    def create_accumulator(self) -> dict[str, Any]:
        return {}

    def add_input(self, acc: dict[str, Any], element: dict[str, Any]) -> dict[str, Any]:
        return accs_mod.merge_all([acc, element]) if acc else element

    def merge_accumulators(self, accumulators: Any) -> dict[str, Any]:
        return accs_mod.merge_all([a for a in accumulators if a])

    def extract_output(self, acc: dict[str, Any]) -> dict[str, Any]:
        return self.finish(acc)

    def finish(self, acc: dict[str, Any]) -> dict[str, Any]:
        """What the merged accumulators become; each pass defines it."""
        raise TypeError(f"{type(self).__name__} must define finish(acc)")


class SumCounts(beam.CombineFn):
    def create_accumulator(self) -> dict[str, int]:
        return {}

    def add_input(self, acc: dict[str, int], element: Mapping[str, int]) -> dict[str, int]:
        for k, v in element.items():
            acc[k] = acc.get(k, 0) + v
        return acc

    def merge_accumulators(self, accumulators: Any) -> dict[str, int]:
        out: dict[str, int] = {}
        for a in accumulators:
            self.add_input(out, a)
        return out

    def extract_output(self, acc: dict[str, int]) -> dict[str, int]:
        return acc


def write_json(value: Any, path: str) -> None:
    """`value` at `path`: a local file, or an object (written by a worker on another machine
    for the driver to read back, dataplane.beam.shard_source.result_location)."""
    from baton.storage import objects

    objects.write_bytes(path, (json.dumps(value, indent=1) + "\n").encode())
