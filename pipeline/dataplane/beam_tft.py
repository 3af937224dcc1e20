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
from baton.pipeline.dataplane.reader import encoded_columns
from baton.pipeline.dataplane.schema_file import Column


class AnalyzePhase(beam.DoFn):
    """Per train shard: this phase's partial accumulators (and, in phase 1, the label's).

    `local_key`: the driver's traced phase, lent to a DoFn running in its process
    (dataplane.local_objects); elsewhere `setup` traces it. `threads`: batches worked on at
    once (dataplane.ordered_threads), merged in the batches' order.
    """

    def __init__(self, source: FnSource, raw: list[tuple[str, str, Any]],
                 resolved: Mapping[int, list[Any]], columns: Sequence[Column], label: str,
                 batch_rows: int, with_label: bool, local_key: str | None = None,
                 threads: int = 1) -> None:
        self.source, self.raw = source, raw
        self.resolved = pickle.dumps(dict(resolved))
        self.columns, self.label, self.batch_rows = list(columns), label, batch_rows
        self.with_label = with_label
        self.local_key, self.threads = local_key, threads

    def setup(self) -> None:
        from baton.graphs import tft_engine
        from baton.pipeline.dataplane.local_objects import borrow

        lent = borrow(self.local_key)
        if lent is not None:
            (self.phase,) = lent
        else:
            phases = tft_engine.Phases(self.source.load(),
                                       tft_engine.raw_specs(self.raw))
            phases.resolved = pickle.loads(self.resolved)
            self.phase = phases.next()
        if self.phase is not None and self.phase.analyzers:
            _ = self.phase.feeder  # traced here, not by the first batches' threads at once

    def process(self, element: tuple[str, str, int]) -> Iterator[Any]:
        from baton.pipeline.dataplane import accumulators as accs_mod
        from baton.pipeline.dataplane.ordered_threads import ordered_map
        from baton.pipeline.dataplane.reader import batch_rows_for, group_batches, read_batches

        split, path, _ = element
        if split != "train":
            return
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
        if phase is None:
            for _ in batches():
                pass
        else:
            from baton.graphs.tft_engine import merge_all

            def work(group: list[Any]) -> dict[int, Any]:
                return phase.accumulate(encoded_columns(group, needed))

            for part in ordered_map(work, batches(), self.threads):
                parts = merge_all(phase, [parts, part]) if parts else part
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
    """Transforms one shard with the final graph and writes columnar chunks.

    `local_key`: the driver's built module, lent to a DoFn in its process
    (dataplane.local_objects); elsewhere `setup` builds it. `threads`: batches transformed and
    encoded at once (dataplane.ordered_threads); this thread writes them in order.
    """

    def __init__(self, source: FnSource, raw: list[tuple[str, str, Any]],
                 resolved: Mapping[int, list[Any]], analysis: Mapping[str, Any],
                 columns: Sequence[Column], out_dir: str, batch_rows: int,
                 chunk_rows: int, local_key: str | None = None, threads: int = 1) -> None:
        self.source, self.raw = source, raw
        self.resolved, self.analysis = pickle.dumps(dict(resolved)), dict(analysis)
        self.columns, self.out_dir = list(columns), out_dir
        self.batch_rows, self.chunk_rows = batch_rows, chunk_rows
        self.local_key, self.threads = local_key, threads

    def setup(self) -> None:
        from baton.graphs import tft_engine
        from baton.graphs.tft_feed import Feeder
        from baton.graphs.tft_module import build_module
        from baton.pipeline.dataplane.local_objects import borrow

        built = borrow(self.local_key)
        if built is None:
            built = build_module(self.source.load(), self.raw,
                                 self.analysis["label"], pickle.loads(self.resolved))
        self.built = built
        self.features = [name for name, _, _ in self.raw]
        self.label = self.analysis["label"]["name"]
        # the exported function itself, its string columns fed encoded (graphs.tft_feed)
        self.feeder = Feeder(self.built.module.transform_features,
                             tft_engine.raw_specs(self.raw), self.built.inputs)
        self.labels: dict[tuple[bytes, ...], Any] = {}  # distinct label values -> their ids

    def process(self, element: tuple[str, str, int]) -> Iterator[Any]:
        import tensorflow as tf

        from baton.pipeline.dataplane.ordered_threads import ordered_map
        from baton.pipeline.dataplane.reader import batch_rows_for, group_batches, read_batches

        split, path, index = element
        out = Path(self.out_dir) / split
        out.mkdir(parents=True, exist_ok=True)
        needed = [c for c in self.columns if c.name in self.feeder.used]
        read = [*needed, next(c for c in self.columns if c.name == self.label)]
        rows = dropped = 0
        with tf.io.TFRecordWriter(str(out / f"part-{index:05d}.tfrecord")) as writer:
            batches = group_batches(read_batches(path, read, self.batch_rows),
                                    batch_rows_for(read, self.batch_rows))
            for records, n, gone in ordered_map(lambda b: self._transform(b, needed), batches,
                                                self.threads):
                for record in records:
                    writer.write(record)
                rows += n
                dropped += gone
        yield {f"rows_{split}": rows, f"dropped_{split}": dropped}

    def _transform(self, group: list[Any], needed: Sequence[Column]
                   ) -> tuple[list[bytes], int, int]:
        """Consecutive record batches as one: (their columnar chunk records, rows kept, rows
        dropped)."""
        import numpy as np

        from baton.pipeline.dataplane.transformed_io import encode_chunks

        n = sum(b.num_rows for b in group)
        feats = {k: v.numpy() for k, v in self.feeder(encoded_columns(group, needed)).items()}
        for k, v in feats.items():
            if v.shape[:1] != (n,):
                from baton.errors import StageError

                raise StageError(f"{self.source.where}: applying: "
                                 f"output {k!r} has "
                                 f"{v.shape[0] if v.ndim else 'no'} rows for a batch "
                                 f"of {n}: outputs keep the batch dimension")
        labels = [self._label(b.column(self.label)) for b in group]
        label, keep = (labels[0] if len(labels) == 1 else
                       (np.concatenate([y for y, _ in labels]),
                        np.concatenate([k for _, k in labels])))
        dropped = 0
        if not keep.all():
            dropped = int((~keep).sum())
            feats = {k: v[keep] for k, v in feats.items()}
            label = label[keep]
        feats[self.label] = label
        return encode_chunks(feats, self.chunk_rows), len(label), dropped

    def _label(self, column: Any) -> tuple[Any, Any]:
        """(encoded label, keep): the module's own `transform_label`; a row whose class is
        unknown (id -1) or whose target is missing (NaN) is dropped. A string label (a
        dictionary column) is encoded once per distinct value and gathered by the rows'
        codes: the same ids, since `transform_label` maps each value on its own."""
        import numpy as np
        import pyarrow as pa

        from baton.pipeline.dataplane.reader import dictionary_parts, numeric_values

        if pa.types.is_dictionary(column.type):
            values, codes = dictionary_parts(column)
            key = tuple(values)
            table = self.labels.get(key)
            if table is None:
                table = self.built.module.transform_label(
                    np.array([*values, b""], dtype=object)).numpy()
                if len(key) <= 1024:  # the classes: the same few values batch after batch
                    self.labels[key] = table
            y = table[codes]
        else:
            y = self.built.module.transform_label(numeric_values(column)).numpy()
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
