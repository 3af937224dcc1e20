"""The transform's Beam pipeline: one analyze pass, then apply on record batches.

    shards --Analyze--> accumulators --CombineGlobally--> analysis (side input)
    shards --Apply(analysis)--> transformed/<split>/part-NNNNN.tfrecord --> row counts

Parallelism is per examples shard. Shards are read from their Arrow copy (written by
ingest) when present. Otherwise the analyze pass parses each shard once (TensorFlow,
64k records per call) and spills the parsed columns to an Arrow IPC stream (streams allow the per-batch
dictionaries) in a scratch
directory; the apply pass reads the spill (memory-mapped) rather than parsing the TFRecords a
second time. Memory stays at a few batches plus the vocabularies whatever the row count.
This module imports Beam at its top: import it only inside a stage's `run`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import apache_beam as beam

from baton.pipeline.dataplane import accumulators as accs_mod
from baton.pipeline.dataplane.beam_merge import MergeShardAccumulators
from baton.pipeline.dataplane.schema_file import Column

CHUNK_VALUES = 1 << 18  # values per transformed record when rows hold tensors (1 MB)


class AnalyzeShard(beam.DoFn):
    """Per shard: accumulators of the train split; every split spilled to an Arrow IPC stream."""

    def __init__(self, columns: Sequence[Column], analyze: Sequence[str], spill_dir: str,
                 batch_rows: int, sketch: Sequence[str] = ()) -> None:
        self.columns, self.analyze, self.sketch = list(columns), list(analyze), set(sketch)
        self.spill_dir, self.batch_rows = spill_dir, batch_rows

    def process(self, element: tuple[str, str, int]) -> Iterator[Any]:
        import pyarrow as pa

        from baton.pipeline.dataplane.reader import columnar_path, read_batches

        split, path, index = element
        analyze_cols = [c for c in self.columns if c.name in self.analyze]
        accs = (accs_mod.new_accumulators(analyze_cols, self.sketch) if split == "train"
                else None)
        if accs is None and columnar_path(path).is_file():
            return  # nothing to analyze, nothing to spill: apply reads the columnar copy
        spill = Path(self.spill_dir) / f"{split}-{index:05d}.arrow"
        spilling = not columnar_path(path).is_file()
        writer = None
        try:
            for batch in read_batches(path, self.columns, self.batch_rows):
                if accs is not None:
                    accs_mod.update(accs, batch)
                if not spilling:
                    continue
                if writer is None:
                    writer = pa.ipc.new_stream(str(spill), batch.schema)
                writer.write_batch(batch)
        finally:
            if writer is not None:
                writer.close()
        if accs is not None:
            yield accs


class MergeAccumulators(MergeShardAccumulators):
    """Merges accumulator dicts and finalizes them into the analysis dict."""

    def __init__(self, plan: Mapping[str, Any], raw: Sequence[tuple[Any, ...]],
                 label: Mapping[str, str]) -> None:
        self.plan, self.raw, self.label = dict(plan), list(raw), dict(label)

    def finish(self, acc: dict[str, Any]) -> dict[str, Any]:
        from baton.pipeline.dataplane.analysis import finalize

        return finalize(acc, self.plan, self.raw, self.label)


class ApplyShard(beam.DoFn):
    """Transforms one shard (from its spill, else its TFRecords) and writes columnar chunks."""

    def __init__(self, columns: Sequence[Column], spill_dir: str, out_dir: str,
                 batch_rows: int, chunk_rows: int) -> None:
        self.columns, self.spill_dir, self.out_dir = list(columns), spill_dir, out_dir
        self.batch_rows, self.chunk_rows = batch_rows, chunk_rows
        self._applier: Any = None
        self._analysis_id: int | None = None

    def process(self, element: tuple[str, str, int], analysis: dict[str, Any]) -> Iterator[Any]:
        import tensorflow as tf

        from baton.pipeline.dataplane.apply import Applier
        from baton.pipeline.dataplane.transformed_io import write_chunks

        if self._applier is None or self._analysis_id != id(analysis):
            self._applier, self._analysis_id = Applier(analysis), id(analysis)
        split, path, index = element
        out = Path(self.out_dir) / split
        out.mkdir(parents=True, exist_ok=True)
        rows = dropped = 0
        label_name = self._applier.label_name
        chunk_rows = self.chunk_rows
        row_values = sum(c.size for c in self.columns)
        if row_values > len(self.columns):  # tensor columns: chunks of at most CHUNK_VALUES
            chunk_rows = max(1, min(chunk_rows, CHUNK_VALUES // row_values))
        with tf.io.TFRecordWriter(str(out / f"part-{index:05d}.tfrecord")) as writer:
            for batch in self._batches(split, path, index):
                feats = self._applier.features(batch)
                label, keep = self._applier.label(batch)
                if not keep.all():
                    dropped += int((~keep).sum())
                    feats = {k: v[keep] for k, v in feats.items()}
                    label = label[keep]
                feats[label_name] = label
                rows += write_chunks(writer, feats, chunk_rows)
        yield {f"rows_{split}": rows, f"dropped_{split}": dropped}

    def _batches(self, split: str, path: str, index: int) -> Iterator[Any]:
        import pyarrow as pa

        from baton.pipeline.dataplane.reader import read_batches

        spill = Path(self.spill_dir) / f"{split}-{index:05d}.arrow"
        if not spill.exists():
            yield from read_batches(path, self.columns, self.batch_rows)
            return
        with pa.memory_map(str(spill)) as source:
            yield from pa.ipc.open_stream(source)
        spill.unlink()


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


def _write_json(value: Any, path: str) -> None:
    Path(path).write_text(json.dumps(value, indent=1) + "\n")


def build(p: Any, *, shards: list[tuple[str, str, int]], columns: Sequence[Column],
          plan: Mapping[str, Any], raw: Sequence[tuple[Any, ...]], label: Mapping[str, str],
          spill_dir: str, out_dir: str, analysis_path: str, counts_path: str,
          batch_rows: int, chunk_rows: int) -> None:
    """Add the analyze + apply graph to pipeline `p`; results land in the given paths."""
    analyze_names = [*plan, label["name"]]
    sketch = [name for name, step in plan.items() if step["kind"] == "bucketize"]
    files = p | "Shards" >> beam.Create(shards)
    analysis = (
        files
        | "Analyze" >> beam.ParDo(AnalyzeShard(columns, analyze_names, spill_dir, batch_rows,
                                               sketch))
        | "Merge" >> beam.CombineGlobally(MergeAccumulators(plan, raw, label))
    )
    analysis | "WriteAnalysis" >> beam.Map(_write_json, analysis_path)
    (
        files
        | "Reshuffle" >> beam.Reshuffle()
        | "Apply" >> beam.ParDo(ApplyShard(columns, spill_dir, out_dir, batch_rows, chunk_rows),
                                beam.pvalue.AsSingleton(analysis))
        | "Count" >> beam.CombineGlobally(SumCounts())
        | "WriteCounts" >> beam.Map(_write_json, counts_path)
    )
