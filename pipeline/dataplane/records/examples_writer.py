"""Write columnar batches as the examples artifact: sharded TFRecords of tf.Example per split.

Every ingest source (TFDS, CSV, synthetic) produces columnar numpy batches; this module splits
them into train/eval by ratio (deterministically, from a seed) or takes a named split as is,
drops rows whose label is missing (counted), and rotates shards every `rows_per_shard` rows so
that downstream Beam stages get one unit of parallel work per shard.

Beside each TFRecord shard it writes the same rows, in the same order, as an Arrow IPC stream
(`columnar/<split>/part-NNNNN.arrow`). The TFRecords are the contract; the columnar copy is
an index for speed: parsing tf.Examples costs microseconds per row even in C++, while reading
Arrow is memory-mapped, so statistics and transform read it when present
(`reader.read_batches` falls back to the TFRecords when it is not).

A missing numeric value is an absent feature in the TFRecords and a null in the Arrow copy
(whose schema says so in its metadata, `MISSING_KEY`); a NaN that is a value of the data (a
CSV `NaN` not listed in `na_values`) is written as a NaN float in both, so statistics can count
it apart from missing values.

A tensor column (`Column.shape`, e.g. an image) arrives as `[rows, *shape]` (or `[rows, K]`)
float32 values: one `float_list` of K = prod(shape) values per row in the TFRecords, a
`fixed_size_list<float32>[K]` in the Arrow copy; a row whose values are all NaN is a missing
tensor (an absent feature, a null list).

The TFRecord files are written by this module, not by `tf.io.TFRecordWriter`: `example_codec`
frames a whole batch (length, masked CRC-32C of the length, example, masked CRC-32C of the
example) into one buffer, and each shard's rows are one contiguous slice of it, appended with
a single `write`. The bytes are those TFRecordWriter writes (uncompressed), which
`tests/pipeline/dataplane/test_example_codec.py` checks; writing needs no TensorFlow.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from baton.pipeline.dataplane.records.example_codec import Strings, as_strings, encode
from baton.pipeline.dataplane.records.schema_file import Column

COLUMNAR = "columnar"
MISSING_KEY = b"baton.missing"  # Arrow schema metadata: b"null" = a null is a missing value


def arrow_schema(columns: Sequence[Column]) -> Any:
    """float32 numeric columns (null = missing), fixed_size_list<float32>[K] tensor columns,
    dictionary<int32, binary> strings."""
    import pyarrow as pa

    def arrow_type(c: Column) -> Any:
        if c.shape:
            return pa.list_(pa.float32(), c.size)
        return pa.float32() if c.is_numeric else pa.dictionary(pa.int32(), pa.binary())

    return pa.schema([(c.name, arrow_type(c)) for c in columns], metadata={MISSING_KEY: b"null"})


def to_record_batch(columns: Sequence[Column], values: Sequence[Any],
                    nan: Mapping[str, np.ndarray] | None = None) -> Any:
    """The Arrow copy of a batch: a missing number is null; a NaN marked in `nan` stays NaN."""
    import pyarrow as pa

    arrays = []
    for c, v in zip(columns, values, strict=True):
        if c.shape:
            v = np.asarray(v, np.float32).reshape(len(v), c.size)
            missing = np.isnan(v).all(axis=1)
            arrays.append(pa.FixedSizeListArray.from_arrays(
                pa.array(v.reshape(-1)), c.size,
                mask=pa.array(missing) if missing.any() else None))
        elif c.is_numeric:
            v = np.asarray(v, np.float32)
            missing = np.isnan(v)
            if nan and c.name in nan:
                missing &= ~nan[c.name]
            arrays.append(pa.array(v, mask=missing) if missing.any() else pa.array(v))
        elif isinstance(v, Strings):
            s = v.compact()  # only the values this batch uses
            arrays.append(pa.DictionaryArray.from_arrays(pa.array(s.codes), s.values))
        else:
            uniq, idx = np.unique(np.asarray(v, object).astype(str), return_inverse=True)
            arrays.append(pa.DictionaryArray.from_arrays(
                pa.array(idx.astype(np.int32)), pa.array([u.encode() for u in uniq], pa.binary())))
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(columns))


def missing_mask(values: Any, numeric: bool) -> np.ndarray:
    """True where a value is missing: NaN for numeric columns, "" for strings."""
    if isinstance(values, Strings):
        return values.missing()
    if numeric:
        return np.isnan(np.asarray(values, np.float32))
    return np.asarray(values, dtype=object) == ""


class SplitWriter:
    """Shards of one split: `<dir>/part-00000.tfrecord`, a new file every `rows_per_shard` rows."""

    def __init__(self, directory: Path, rows_per_shard: int, columnar: Path | None = None,
                 schema: Any = None) -> None:
        self.directory = directory
        self.columnar = columnar
        self._schema = schema
        self._arrow: Any = None
        self.rows_per_shard = max(1, rows_per_shard)
        self.rows = 0
        self._shard = -1
        self._in_shard = 0
        self._writer: Any = None
        directory.mkdir(parents=True, exist_ok=True)

    def write(self, records: Any, batch: Any = None) -> None:
        """Append framed TFRecord records (an Arrow binary array from
        `example_codec.encode(..., framed=True)`) and the same rows as a pyarrow RecordBatch,
        if columnar."""
        from baton.pipeline.dataplane.records.example_codec import _bytes_of

        data, offsets = _bytes_of(records)
        i = 0
        n = len(records)
        while i < n:
            if self._writer is None or self._in_shard >= self.rows_per_shard:
                self._open_next()
            take = min(n - i, self.rows_per_shard - self._in_shard)
            assert self._writer is not None
            self._writer.write(data[int(offsets[i]):int(offsets[i + take])].data)
            if batch is not None and self._arrow is not None:
                self._arrow.write_batch(batch.slice(i, take))
            self._in_shard += take
            self.rows += take
            i += take

    def _open_next(self) -> None:
        self._close_files()
        self._shard += 1
        self._in_shard = 0
        name = f"part-{self._shard:05d}"
        self._writer = open(self.directory / f"{name}.tfrecord", "wb")  # noqa: SIM115
        if self.columnar is not None and self._schema is not None:
            import pyarrow as pa

            self.columnar.mkdir(parents=True, exist_ok=True)
            self._arrow = pa.ipc.new_stream(str(self.columnar / f"{name}.arrow"), self._schema)

    def _close_files(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._arrow is not None:
            self._arrow.close()
            self._arrow = None

    def close(self) -> None:
        if self._writer is None:  # an empty split still gets one (empty) shard file
            self._open_next()
        self._close_files()


class ExamplesWriter:
    """Routes columnar batches to per-split shard writers.

    Args:
        out_dir: the examples artifact directory (`ctx.output("examples")`).
        columns: the column layout, label included.
        label: the label column; rows where it is missing are dropped and counted.
        ratios: split name -> fraction (normalised), used by `write_batch(..., split=None)`.
        seed: makes the ratio split reproducible.
        threads: batches encoded at once (None: this task's usable cores). Encoding (the
            tf.Example bytes, their CRCs, the Arrow copy) is numpy and Arrow work that
            releases the GIL, so it runs on worker threads while the caller parses the next
            batch; one more thread writes them into the shards in the batches' order, so the
            bytes do not depend on the thread count and the caller's thread, which parses,
            does not wait on page-cache copies (0.2 s of the text table's 1M-row ingest).
            At most `threads + 2` batches are encoded and not yet written. Measured on the
            census-like 1M-row CSV (2 cores): the ingest stage used 1.05 cores before the
            encoding threads; the text table's ingest, 0.64 -> 0.60 s with the writing thread.
    """

    def __init__(
        self,
        out_dir: Path,
        columns: Sequence[Column],
        label: str,
        ratios: Mapping[str, float],
        seed: int,
        rows_per_shard: int,
        threads: int | None = None,
    ) -> None:
        if threads is None:
            from baton.strategies import inventory

            threads = inventory.beam_workers(inventory.node_inventory())
        self._threads = threads
        self._pool: Any = None  # the encoding threads
        self._queue: queue.Queue[tuple[SplitWriter, Any] | None] = queue.Queue()
        self._slots = threading.BoundedSemaphore(threads + 2)  # batches encoded, not written
        self._writing: Any = None  # the writing thread's future
        self.columns = list(columns)
        self.label = label
        total = sum(ratios.values())
        self._names = list(ratios)
        self._cuts = np.cumsum([ratios[n] / total for n in self._names])
        self._rng = np.random.default_rng(seed)
        self._out_dir = out_dir
        self._rows_per_shard = rows_per_shard
        self.writers: dict[str, SplitWriter] = {}
        self.dropped_missing_label = 0
        for name in self._names:
            self._writer(name)

    def _writer(self, split: str) -> SplitWriter:
        if split not in self.writers:
            self.writers[split] = SplitWriter(self._out_dir / split, self._rows_per_shard,
                                              self._out_dir / COLUMNAR / split,
                                              arrow_schema(self.columns))
        return self.writers[split]

    def write_batch(self, batch: Mapping[str, np.ndarray], split: str | None = None,
                    nan: Mapping[str, np.ndarray] | None = None) -> None:
        """Write one batch (column name -> values); `split=None` assigns rows by ratio.

        Numeric values are NaN where missing; `nan` (numeric column -> bool mask) marks the
        NaNs that are values of the data instead. A row whose label is NaN is dropped either
        way (counted in `dropped_missing_label`).
        """
        names = [c.name for c in self.columns]
        numeric = [c.is_numeric for c in self.columns]
        cols = [_tensor(batch[c.name], c) if c.shape else batch[c.name] for c in self.columns]
        nan = {k: v for k, v in (nan or {}).items() if k in names}
        label_col = self.columns[names.index(self.label)]
        keep = ~missing_mask(batch[self.label], label_col.is_numeric)
        self.dropped_missing_label += int((~keep).sum())
        if split is not None:
            self._write(split, names, [c[keep] for c in cols], numeric,
                        {k: v[keep] for k, v in nan.items()})
            return
        draw = self._rng.random(len(keep))
        which = np.searchsorted(self._cuts, draw, side="right").clip(0, len(self._names) - 1)
        for i, name in enumerate(self._names):
            sel = keep & (which == i)
            if sel.all():
                self._write(name, names, cols, numeric, nan)
            elif sel.any():
                self._write(name, names, [c[sel] for c in cols], numeric,
                            {k: v[sel] for k, v in nan.items()})

    def _write(self, split: str, names: list[str], cols: list[Any], numeric,  # noqa: ANN001
               nan: Mapping[str, np.ndarray]) -> None:
        if not len(cols[0]):
            return

        def encoded() -> tuple[Any, Any]:
            strings = [c if num else as_strings(c) for c, num in zip(cols, numeric, strict=True)]
            return (encode(names, strings, numeric, nan, framed=True),
                    to_record_batch(self.columns, strings, nan))

        if self._threads <= 1:
            self._writer(split).write(*encoded())
            return
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="baton-encode")
            self._writing = ThreadPoolExecutor(1, thread_name_prefix="baton-write").submit(
                self._write_in_order)
        while not self._slots.acquire(timeout=0.1):  # bounded memory: wait for a write
            if self._writing.done():
                self._writing.result()  # the writing thread failed: its error, here
        self._queue.put((self._writer(split), self._pool.submit(encoded)))

    def _write_in_order(self) -> None:
        """The writing thread: each encoded batch into its shard, in the order submitted,
        until None (close)."""
        while (item := self._queue.get()) is not None:
            writer, job = item
            try:
                writer.write(*job.result())
            finally:
                self._slots.release()

    def close(self) -> dict[str, int]:
        """Close every shard; returns rows written per split."""
        try:
            if self._writing is not None:
                self._queue.put(None)
                self._writing.result()  # every batch written, or the first failure raised
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True, cancel_futures=True)
                self._pool = None
        for w in self.writers.values():
            w.close()
        return {name: w.rows for name, w in self.writers.items()}


def _tensor(values: Any, column: Column) -> np.ndarray:
    """A tensor column's batch as `[rows, K]` float32, or ValueError naming the shape."""
    v = np.asarray(values, np.float32)
    if v.ndim < 2 or v.size != len(v) * column.size:
        raise ValueError(f"column {column.name!r}: expected rows of shape {column.shape}. "
                         f"Received: an array of shape {v.shape}")
    return v.reshape(len(v), column.size)
