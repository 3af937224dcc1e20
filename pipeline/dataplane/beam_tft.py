"""A preprocessing_fn on Beam: one analyze pass per phase, then apply on record batches.

    phase k:  train shards --AnalyzePhase(k)--> partial accumulators --CombineGlobally--> values
    apply:    all shards --ApplyPreprocessing--> transformed/<split>/part-NNNNN.tfrecord

Each DoFn rebuilds the traced graph in its worker (`setup`), from the function's reference
and the values known so far, so a worker in another process imports the user's module itself
(the spec's directory is on its search path). TensorFlow runs once per record batch (the
stage's `batch_rows`, tens of thousands of rows), never per row. The first phase also
accumulates the label's classes, which the module's `transform_label` then encodes. The
built-in column kinds run here too, as graphs.column_kinds' preprocessing_fn. This module imports
Beam at its top: import it only inside a stage's `run`.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import apache_beam as beam

from baton.pipeline.dataplane.fn_source import FnSource
from baton.pipeline.dataplane.reader import raw_columns
from baton.pipeline.dataplane.schema_file import Column


class AnalyzePhase(beam.DoFn):
    """Per train shard: this phase's partial accumulators (and, in phase 1, the label's)."""

    def __init__(self, source: FnSource, raw: list[tuple[str, str, Any]],
                 resolved: Mapping[int, list[Any]], columns: Sequence[Column], label: str,
                 batch_rows: int, with_label: bool) -> None:
        self.source, self.raw = source, raw
        self.resolved = pickle.dumps(dict(resolved))
        self.columns, self.label, self.batch_rows = list(columns), label, batch_rows
        self.with_label = with_label

    def setup(self) -> None:
        from baton.graphs import tft_engine

        phases = tft_engine.Phases(self.source.load(),
                                   tft_engine.raw_specs(self.raw))
        phases.resolved = pickle.loads(self.resolved)
        self.phase = phases.next()

    def process(self, element: tuple[str, str, int]) -> Iterator[Any]:
        from baton.pipeline.dataplane import accumulators as accs_mod
        from baton.pipeline.dataplane.reader import read_batches

        split, path, _ = element
        if split != "train":
            return
        label_col = next(c for c in self.columns if c.name == self.label)
        label_acc = accs_mod.new_accumulators([label_col]) if self.with_label else None
        parts: dict[int, Any] = {}
        for batch in read_batches(path, self.columns, self.batch_rows):
            if label_acc is not None:
                accs_mod.update(label_acc, batch)
            if self.phase is not None and self.phase.analyzers:
                from baton.graphs.tft_engine import merge_all

                part = self.phase.accumulate(raw_columns(batch, self.columns))
                parts = merge_all(self.phase, [parts, part]) if parts else part
        yield pickle.dumps({"tft": parts, "label": label_acc})


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
        from baton.graphs.tft_analyzers import merge
        from baton.pipeline.dataplane import accumulators as accs_mod

        for k, a in part["tft"].items():
            acc["tft"][k] = a if k not in acc["tft"] else merge(self.kinds[k], acc["tft"][k], a)
        if part["label"] is not None:
            acc["label"] = (part["label"] if acc["label"] is None
                            else accs_mod.merge_all([acc["label"], part["label"]]))
        return acc


class ApplyPreprocessing(beam.DoFn):
    """Transforms one shard with the final graph and writes columnar chunks."""

    def __init__(self, source: FnSource, raw: list[tuple[str, str, Any]],
                 resolved: Mapping[int, list[Any]], analysis: Mapping[str, Any],
                 columns: Sequence[Column], out_dir: str, batch_rows: int,
                 chunk_rows: int) -> None:
        self.source, self.raw = source, raw
        self.resolved, self.analysis = pickle.dumps(dict(resolved)), dict(analysis)
        self.columns, self.out_dir = list(columns), out_dir
        self.batch_rows, self.chunk_rows = batch_rows, chunk_rows

    def setup(self) -> None:
        from baton.graphs.tft_module import build_module

        self.built = build_module(self.source.load(), self.raw,
                                  self.analysis["label"], pickle.loads(self.resolved))
        self.features = [name for name, _, _ in self.raw]
        self.label = self.analysis["label"]["name"]

    def process(self, element: tuple[str, str, int]) -> Iterator[Any]:
        import tensorflow as tf

        from baton.pipeline.dataplane.reader import read_batches
        from baton.pipeline.dataplane.transformed_io import write_chunks

        split, path, index = element
        out = Path(self.out_dir) / split
        out.mkdir(parents=True, exist_ok=True)
        rows = dropped = 0
        with tf.io.TFRecordWriter(str(out / f"part-{index:05d}.tfrecord")) as writer:
            for batch in read_batches(path, self.columns, self.batch_rows):
                raw = raw_columns(batch, self.columns)
                n = len(next(iter(raw.values())))
                feats = {k: v.numpy() for k, v in self.built.module.transform_features(
                    {f: raw[f] for f in self.features}).items()}
                for k, v in feats.items():
                    if v.shape[:1] != (n,):
                        from baton.errors import StageError

                        raise StageError(f"{self.source.where}: applying: "
                                         f"output {k!r} has "
                                         f"{v.shape[0] if v.ndim else 'no'} rows for a batch "
                                         f"of {n}: outputs keep the batch dimension")
                label, keep = self._label(raw[self.label])
                if not keep.all():
                    dropped += int((~keep).sum())
                    feats = {k: v[keep] for k, v in feats.items()}
                    label = label[keep]
                feats[self.label] = label
                rows += write_chunks(writer, feats, self.chunk_rows)
        yield {f"rows_{split}": rows, f"dropped_{split}": dropped}

    def _label(self, raw_label: Any) -> tuple[Any, Any]:
        """(encoded label, keep): the module's own `transform_label`; a row whose class is
        unknown (id -1) or whose target is missing (NaN) is dropped."""
        import numpy as np

        y = self.built.module.transform_label(raw_label).numpy()
        return y, (y >= 0) if y.dtype.kind == "i" else ~np.isnan(y)


def build_phase(p: Any, *, shards: list[tuple[str, str, int]], dofn: AnalyzePhase,
                kinds: Mapping[int, str], result_path: str) -> None:
    def write(value: bytes) -> None:
        Path(result_path).write_bytes(value)

    (p | "Shards" >> beam.Create(shards)
       | "Analyze" >> beam.ParDo(dofn)
       | "Merge" >> beam.CombineGlobally(MergePhase(kinds))
       | "Write" >> beam.Map(write))


def build_apply(p: Any, *, shards: list[tuple[str, str, int]], dofn: ApplyPreprocessing,
                counts_path: str) -> None:
    from baton.pipeline.dataplane.beam_merge import SumCounts, write_json

    (p | "Shards" >> beam.Create(shards)
       | "Reshuffle" >> beam.Reshuffle()
       | "Apply" >> beam.ParDo(dofn)
       | "Count" >> beam.CombineGlobally(SumCounts())
       | "Write" >> beam.Map(write_json, counts_path))
