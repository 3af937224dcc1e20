"""A preprocessing_fn on Beam: one analyze pass per phase, the last one with the apply step.

    phase k < last:  train shards --AnalyzePhase(k)--> partials --CombineGlobally--> values
    last phase:      train shards --AnalyzePhase--> partials --CombineGlobally--> values
                     all shards --ApplyPreprocessing(values as a side input)-->
                         transformed/<split>/part-NNNNN.tfrecord          (build_last)

A function with k analyzer phases runs k pipelines (one, a label-only pass plus the apply,
when it has no analyzers). Each DoFn rebuilds the traced graph in its worker (`setup`), from
the function's reference and the values known so far, so a worker in another process imports
the user's module itself; in the driver's process it uses the driver's trace
(dataplane.beam.local_objects). TensorFlow runs once per gathered record batch (the stage's
`batch_rows`), never per row, on `threads` threads (dataplane.beam.ordered_threads). The first
phase also accumulates the label's classes, which the module's `transform_label` then
encodes. The built-in column kinds run here too, as graphs.column_kinds' preprocessing_fn.
This module imports Beam at its top: import it only inside a stage's `run`.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam

from baton.pipeline.dataplane.beam.apply import ApplyPreprocessing
from baton.pipeline.dataplane.beam.shard_source import local_shard
from baton.pipeline.dataplane.records.reader import encoded_columns
from baton.pipeline.dataplane.records.schema_file import Column
from baton.pipeline.dataplane.transform.fn_source import FnSource
from baton.pipeline.dataplane.transform.user_errors import UserErrors
from baton.storage import objects


class AnalyzePhase(beam.DoFn):
    """Per train shard: this phase's partial accumulators (and, in phase 1, the label's).

    `local_key`: the driver's traced phase, lent to a DoFn running in its process
    (dataplane.beam.local_objects); elsewhere `setup` traces it. `threads`: batches worked on at
    once (dataplane.beam.ordered_threads), merged in the batches' order.
    """

    def __init__(self, source: FnSource, raw: list[tuple[str, str, Any]],
                 resolved: Mapping[int, list[Any]], columns: Sequence[Column], label: str,
                 batch_rows: int, with_label: bool, local_key: str | None = None,
                 threads: int = 1, step: str = "analyzer phase",
                 box_key: str | None = None) -> None:
        self.source, self.raw, self.step = source, raw, step
        self.resolved = pickle.dumps(dict(resolved))
        self.columns, self.label, self.batch_rows = list(columns), label, batch_rows
        self.with_label = with_label
        self.local_key, self.threads = local_key, threads
        self.box_key = box_key  # the last phase's: its partial handed over (early_build)

    def setup(self) -> None:
        from baton.graphs.tft import engine as tft_engine
        from baton.pipeline.dataplane.beam.local_objects import borrow

        lent = borrow(self.local_key)
        if lent is not None:
            (self.phase,) = lent
        else:
            with UserErrors(f"{self.source.where}: {self.step}"):
                phases = tft_engine.Phases(self.source.load(),
                                           tft_engine.raw_specs(self.raw))
                phases.resolved = pickle.loads(self.resolved)
                self.phase = phases.next()
        if self.phase is not None and self.phase.analyzers:
            _ = self.phase.feeder  # traced here, not by the first batches' threads at once

    def process(self, element: tuple[str, Any, int]) -> Iterator[Any]:
        split, ref, _ = element
        if split != "train":
            return
        with local_shard(ref) as path:  # (a remote shard: fetched into this worker's cache)
            yield from self._analyze(path)

    def _analyze(self, path: str) -> Iterator[Any]:
        from baton.pipeline.dataplane.beam.ordered_threads import ordered_map
        from baton.pipeline.dataplane.records.reader import (
            batch_rows_for,
            group_batches,
            read_batches,
        )
        from baton.pipeline.dataplane.statistics import accumulators as accs_mod

        phase = self.phase if self.phase is not None and self.phase.analyzers else None
        label_col = next(c for c in self.columns if c.name == self.label)
        label_acc = accs_mod.new_accumulators([label_col]) if self.with_label else None
        needed = [c for c in self.columns if phase is not None and c.name in phase.inputs]
        read = needed + [label_col] if label_acc is not None and label_col not in needed \
            else needed

        def batches() -> Iterator[list[Any]]:
            rows = batch_rows_for(read, self.batch_rows)
            for group in group_batches(read_batches(path, read, self.batch_rows), rows):
                if label_acc is not None:
                    for batch in group:
                        accs_mod.update(label_acc, batch)  # in order, on this thread
                yield group

        parts: dict[int, Any] = {}
        if phase is None:  # no analyzer in this phase: read only for the label's classes
            for _ in batches():  # (batches() updates label_acc as it reads)
                continue
        else:
            from baton.graphs.tft.engine import merge_all

            def work(group: list[Any]) -> dict[int, Any]:
                return phase.accumulate(encoded_columns(group, needed))

            with UserErrors(f"{self.source.where}: {self.step}"):
                for part in ordered_map(work, batches(), self.threads):
                    parts = merge_all(phase, [parts, part]) if parts else part
        from baton.pipeline.dataplane.beam import early_build
        from baton.pipeline.dataplane.beam.local_objects import borrow

        partial = pickle.dumps({"tft": parts, "label": label_acc})
        early_build.analyzed(borrow(self.box_key), partial)
        yield partial


class MergePhase(beam.CombineFn):
    """Merges the shards' partials: the phase's analyzers by kind, the label accumulators."""

    def __init__(self, kinds: Mapping[int, str]) -> None:
        self.kinds = dict(kinds)

    def create_accumulator(self) -> dict[str, Any]:
        return {"tft": {}, "label": None}

    def add_input(self, acc: dict[str, Any], element: bytes) -> dict[str, Any]:
        return self._merge(acc, pickle.loads(element))

    def merge_accumulators(self, accumulators: Any) -> dict[str, Any]:
        out = self.create_accumulator()
        for a in accumulators:
            out = self._merge(out, a)
        return out

    def extract_output(self, acc: dict[str, Any]) -> bytes:
        return pickle.dumps(acc)

    def _merge(self, acc: dict[str, Any], part: Mapping[str, Any]) -> dict[str, Any]:
        from baton.graphs.tft.analyzers import merge
        from baton.pipeline.dataplane.statistics import accumulators as accs_mod

        for k, a in part["tft"].items():
            acc["tft"][k] = a if k not in acc["tft"] else merge(self.kinds[k], acc["tft"][k], a)
        if part["label"] is not None:
            acc["label"] = (part["label"] if acc["label"] is None
                            else accs_mod.merge_all([acc["label"], part["label"]]))
        return acc


def _merged(combine: beam.CombineFn, shards: list[tuple[str, Any, int]],
            every_shard: bool = False) -> beam.PTransform:
    """`CombineGlobally(combine)`, without the default value for an empty input when the
    input cannot be empty: one element per train shard (AnalyzePhase; the stage refuses
    examples without train rows) or per shard (`every_shard`, the apply step). The default
    costs its own branch (a Create and a side input), ~0.04 s of Beam's bundles per run."""
    merged = beam.CombineGlobally(combine)
    nonempty = bool(shards) if every_shard else any(s[0] == "train" for s in shards)
    return merged.without_defaults() if nonempty else merged


def build_phase(p: Any, *, shards: list[tuple[str, Any, int]], dofn: AnalyzePhase,
                kinds: Mapping[int, str], result_path: str) -> None:
    def write(value: bytes) -> None:  # a local path, or an object (a remote worker's)
        objects.write_bytes(result_path, value)

    (p | "Shards" >> beam.Create(shards)
       | "Analyze" >> beam.ParDo(dofn)
       | "Merge" >> _merged(MergePhase(kinds), shards)
       | "Write" >> beam.Map(write))


def build_last(p: Any, *, shards: list[tuple[str, Any, int]], dofn: AnalyzePhase,
               kinds: Mapping[int, str], result_path: str, apply: ApplyPreprocessing,
               counts_path: str) -> None:
    """The last analyzer phase and the apply step in one pipeline: the phase's merged
    accumulators are written for the driver and reach the apply DoFn as a side input."""
    from baton.pipeline.dataplane.beam.merge import SumCounts, write_json

    def write(value: bytes) -> None:  # a local path, or an object (a remote worker's)
        objects.write_bytes(result_path, value)

    shard_items = p | "Shards" >> beam.Create(shards)
    merged = (shard_items
              | "Analyze" >> beam.ParDo(dofn)
              | "Merge" >> _merged(MergePhase(kinds), shards))
    _ = merged | "Write" >> beam.Map(write)
    (shard_items
       | "Reshuffle" >> beam.Reshuffle()
       | "Apply" >> beam.ParDo(apply, beam.pvalue.AsSingleton(merged))
       | "Count" >> _merged(SumCounts(), shards, every_shard=True)
       | "WriteCounts" >> beam.Map(write_json, counts_path))
