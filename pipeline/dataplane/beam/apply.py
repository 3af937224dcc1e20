"""The apply step of a preprocessing_fn on Beam: the final graph on record batches of a shard.

It runs in the same Beam pipeline as the last analyzer phase (beam_tft.build_last): that
phase's merged accumulators arrive as a side input, and the DoFn finishes the analysis and
builds the transform module itself (graphs.tft.module) before its first shard. One pipeline
fewer than analyze-then-apply, which measured ~0.35 s of Beam's own cost per pipeline on the
in-process runner (translation, stages, bundle start and stop) at 1M-10M rows.

In the driver's process the DoFn hands the module it built back to the driver
(dataplane.beam.local_objects: a box the driver lends), so the driver exports the very object the
rows went through instead of tracing the function again; in any other process the driver
builds the same module from the same values. Building checks the outputs (id ranges, shapes)
before any row is transformed, and its errors read as the driver's would
("building the transform: ...", dataplane.transform.user_errors).

Per shard, record batches are gathered to `batch_rows`, fed to the exported
`transform_features` with their string columns encoded (graphs.tft.feed), and encoded as
columnar chunks on `threads` threads; this thread writes them in order (ordered_threads), so
the bytes written do not depend on the thread count. The rows written with a non-finite float
output are counted on the same arrays (transformed_io.nonfinite_rows) and reported with the
row counts, so the stage does not read the artifact back to warn about them. Imports Beam at
its top: import it only inside a stage's `run`.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.internal import pickler as beam_pickler

from baton.pipeline.dataplane.beam.shard_sink import shard_path
from baton.pipeline.dataplane.beam.shard_source import local_shard
from baton.pipeline.dataplane.records.reader import encoded_columns
from baton.pipeline.dataplane.records.schema_file import Column
from baton.pipeline.dataplane.transform.fn_source import FnSource
from baton.pipeline.dataplane.transform.user_errors import UserErrors

NONFINITE = "nonfinite_"  # a count's key: nonfinite_<split>/<output>


class ApplyPreprocessing(beam.DoFn):
    """Transforms one shard with the final graph and writes columnar chunks.

    Args:
        resolved: the analyzer values of the phases before the last.
        last: `tft_engine.finishing` of the last phase, computed in this pipeline (its merged
            accumulators are `process`'s side input); empty when it has no analyzers.
        label: {"name", "dtype", "task"} of the label column.
        label_acc: the label's accumulators from an earlier phase, or None when the last
            phase's side input carries them.
        box_key: a dict lent by the driver (dataplane.beam.local_objects): the built module and
            the analysis go into it when the DoFn runs in the driver's process.
        threads: batches transformed and encoded at once.
    """

    def __init__(self, source: FnSource, raw: list[tuple[str, str, Any]],
                 resolved: Mapping[int, list[Any]], last: Mapping[int, Any],
                 label: Mapping[str, str], label_acc: Any, columns: Sequence[Column],
                 out_dir: str, batch_rows: int, chunk_rows: int, box_key: str | None = None,
                 threads: int = 1) -> None:
        self.source, self.raw = source, raw
        # Beam's pickler (cloudpickle): a vocabulary's key_fn may be a lambda
        self.known = beam_pickler.dumps((dict(resolved), dict(last), label_acc))
        self.label_meta = dict(label)
        self.columns, self.out_dir = list(columns), out_dir
        self.batch_rows, self.chunk_rows = batch_rows, chunk_rows
        self.box_key, self.threads = box_key, threads

    def setup(self) -> None:
        self.built: Any = None
        self.label = self.label_meta["name"]
        self.labels: dict[tuple[bytes, ...], Any] = {}  # distinct label values -> their ids

    def process(self, element: tuple[str, Any, int], merged: bytes) -> Iterator[Any]:
        import tensorflow as tf

        from baton.pipeline.dataplane.beam import early_export
        from baton.pipeline.dataplane.beam.local_objects import borrow
        from baton.pipeline.dataplane.beam.ordered_threads import ordered_map
        from baton.pipeline.dataplane.records.reader import (
            batch_rows_for,
            group_batches,
            read_batches,
        )

        if self.built is None:
            self._build(pickle.loads(merged))
        split, ref, index = element
        needed = [c for c in self.columns if c.name in self.feeder.used]
        read = [*needed, next(c for c in self.columns if c.name == self.label)]
        rows = dropped = 0
        nonfinite: dict[str, int] = {}
        # out_dir: a local directory or a bucket prefix (dataplane.beam.shard_sink uploads the shard)
        with UserErrors(f"{self.source.where}: applying"), local_shard(ref) as path, \
                shard_path(self.out_dir, split, f"part-{index:05d}.tfrecord") as target, \
                tf.io.TFRecordWriter(target) as writer:
            batches = group_batches(read_batches(path, read, self.batch_rows),
                                    batch_rows_for(read, self.batch_rows))
            for records, n, gone, bad in ordered_map(lambda b: self._transform(b, needed),
                                                     batches, self.threads):
                for record in records:
                    writer.write(record)
                rows += n
                dropped += gone
                for name, k in bad.items():
                    nonfinite[name] = nonfinite.get(name, 0) + k
        early_export.applied(borrow(self.box_key))  # the driver may write the SavedModel now
        # the counts the stage reports, summed over shards (beam_merge.SumCounts)
        yield {f"rows_{split}": rows, f"dropped_{split}": dropped,
               **{f"{NONFINITE}{split}/{name}": k for name, k in nonfinite.items()}}

    def _build(self, merged: Mapping[str, Any]) -> None:
        """The module from the analyzer values, unless the driver built it early (a single
        train shard's partial is the merged value: dataplane.beam.early_build)."""
        from baton.pipeline.dataplane.beam import early_build
        from baton.pipeline.dataplane.beam.local_objects import borrow

        box = borrow(self.box_key)
        self.built, analysis, self.feeder, self.ranks = (
            early_build.take(box) or self.build_state(merged))
        if box is not None:
            box.update(built=self.built, analysis=analysis)

    def build_state(self, merged: Mapping[str, Any]) -> tuple[Any, Any, Any, Any]:
        """(module, label analysis, its feeding function, ragged outputs' ranks) from the
        earlier phases' analyzer values and the last one's merged accumulators."""
        from baton.graphs.input_pipeline import ragged_rank
        from baton.graphs.tft import engine as tft_engine
        from baton.graphs.tft.feed import Feeder
        from baton.graphs.tft.module import build_module
        from baton.pipeline.dataplane.transform.analysis import label_analysis

        resolved, last, label_acc = beam_pickler.loads(self.known)
        resolved.update(tft_engine.finalize(last, merged["tft"]))
        features = [(n, d, s) for n, d, s in self.raw]
        analysis = label_analysis(label_acc if label_acc is not None else merged["label"] or {},
                                  features, self.label_meta)
        with UserErrors(f"{self.source.where}: building the transform"):
            built = build_module(self.source.load(), features, analysis["label"], resolved)
        # the exported function itself, its string columns fed encoded (graphs.tft.feed)
        feeder = Feeder(built.module.transform_features, tft_engine.raw_specs(self.raw),
                        built.inputs)
        ranks = {f.name: ragged_rank(f) for f in built.features if f.encoding == "ragged"}
        return built, analysis, feeder, ranks

    def _transform(self, group: list[Any], needed: Sequence[Column]
                   ) -> tuple[list[bytes], int, int, dict[str, int]]:
        """Consecutive record batches as one: (their columnar chunk records, rows kept, rows
        dropped, {float output: kept rows holding a non-finite value})."""
        import numpy as np

        from baton.errors import StageError
        from baton.graphs.tft.module import OutputError, check_rows
        from baton.pipeline.dataplane.records.transformed_io import (
            Ragged,
            encode_chunks,
            nonfinite_rows,
            to_numpy,
        )

        n = sum(b.num_rows for b in group)
        out = self.feeder(encoded_columns(group, needed))
        try:
            check_rows(out, n)
        except OutputError as e:
            raise StageError(f"{self.source.where}: applying: {e}") from None
        feats = {k: to_numpy(v, self.ranks.get(k)) for k, v in out.items()}
        labels = [self._label(b.column(self.label)) for b in group]
        label, keep = (labels[0] if len(labels) == 1 else
                       (np.concatenate([y for y, _ in labels]),
                        np.concatenate([k for _, k in labels])))
        dropped = 0
        if not keep.all():
            dropped = int((~keep).sum())
            feats = {k: v.take(keep) if isinstance(v, Ragged) else v[keep]
                     for k, v in feats.items()}
            label = label[keep]
        nonfinite = nonfinite_rows(feats)  # the outputs only: a NaN target was dropped above
        feats[self.label] = label
        return encode_chunks(feats, self.chunk_rows), len(label), dropped, nonfinite

    def _label(self, column: Any) -> tuple[Any, Any]:
        """(encoded label, keep): the module's own `transform_label`; a row whose class is
        unknown (id -1) or whose target is missing (NaN) is dropped. A string label (a
        dictionary column) is encoded once per distinct value and gathered by the rows'
        codes: the same ids, since `transform_label` maps each value on its own."""
        import numpy as np
        import pyarrow as pa

        from baton.pipeline.dataplane.records.reader import dictionary_parts, numeric_values

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
