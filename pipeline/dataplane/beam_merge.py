"""The one way shard accumulators are merged in Beam, shared by statistics and transform.

Both passes compute per-shard accumulator dicts (pipeline.dataplane.accumulators) and merge them
associatively; only what is made of the merged result differs, so subclasses give `finish`.
Imports Beam at its top: import inside `run` only.
"""

from __future__ import annotations

from typing import Any

import apache_beam as beam

from baton.pipeline.dataplane import accumulators as accs_mod


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
