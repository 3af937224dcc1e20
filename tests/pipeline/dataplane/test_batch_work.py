"""How the transform's DoFns work on batches: threads with ordered results, objects lent by
the driver to DoFns in its own process only, and record batches joined for TensorFlow."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from baton.pipeline.dataplane.beam import local_objects
from baton.pipeline.dataplane.beam.ordered_threads import ordered_map


def test_ordered_map_keeps_the_order_and_bounds_the_batches_in_flight():
    lock = threading.Lock()
    running, most, started = 0, 0, []

    def work(i: int) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
            started.append(i)
        time.sleep(0.002 * (i % 3))  # later items often finish first
        with lock:
            running -= 1
        return i * i

    consumed = []
    for i, out in enumerate(ordered_map(work, range(40), threads=3)):
        consumed.append(out)
        assert len(started) <= i + 1 + 3  # the caller's loop is never more than 3 ahead
    assert consumed == [i * i for i in range(40)]
    assert most > 1


def test_ordered_map_raises_the_work_error_and_one_thread_runs_inline():
    def work(i: int) -> int:
        if i == 5:
            raise ValueError("batch 5 is bad")
        return i

    got = []
    with pytest.raises(ValueError, match="batch 5 is bad"):
        for out in ordered_map(work, range(20), threads=2):
            got.append(out)
    assert got == [0, 1, 2, 3, 4]
    names = set()
    list(ordered_map(lambda i: names.add(threading.current_thread().name), range(3), 1))
    assert names == {threading.current_thread().name}


def test_a_lent_object_is_borrowed_only_by_its_process_and_only_during_the_loan(monkeypatch):
    obj = object()
    with local_objects.lend(obj) as key:
        assert local_objects.borrow(key) is obj
        assert local_objects.borrow("another key") is None
        real = local_objects.os.getpid()
        monkeypatch.setattr(local_objects.os, "getpid", lambda: real + 1)  # a forked child
        assert local_objects.borrow(key) is None
        monkeypatch.undo()
    assert local_objects.borrow(key) is None
    assert local_objects.borrow(None) is None


def test_grouped_batches_encode_the_rows_of_the_plain_columns(tmp_path):
    import pyarrow as pa

    from baton.pipeline.dataplane.records.reader import (
        encoded_columns,
        group_batches,
        raw_columns,
        read_batches,
    )
    from baton.pipeline.dataplane.records.schema_file import Column

    cols = [Column("x", "float32"), Column("s", "string")]
    sidecar = tmp_path / "columnar" / "train" / "part-00000.arrow"
    sidecar.parent.mkdir(parents=True)
    shard = tmp_path / "train" / "part-00000.tfrecord"
    rng = np.random.default_rng(0)
    with pa.ipc.new_stream(str(sidecar), pa.schema([("x", pa.float32()),
                                                    ("s", pa.dictionary(pa.int32(),
                                                                        pa.binary()))])) as w:
        for size in (300, 250, 1000, 10, 5):  # each batch its own dictionary
            values = pa.array([f"v{i}".encode() for i in rng.integers(0, 9, size)], pa.binary())
            w.write_batch(pa.record_batch([pa.array(rng.normal(size=size).astype(np.float32)),
                                           values.dictionary_encode()], names=["x", "s"]))
    plain = list(read_batches(shard, cols, 512))
    groups = list(group_batches(iter(plain), 512))
    assert [[b.num_rows for b in g] for g in groups] == [[300, 250], [1000], [10, 5]]
    for group in groups:
        enc = encoded_columns(group, cols)
        raw = [raw_columns(b, cols) for b in group]
        np.testing.assert_array_equal(enc["x"], np.concatenate([r["x"] for r in raw]))
        assert enc["s"].codes.dtype == np.int32
        assert enc["s"].decoded().tolist() == [v for r in raw for v in r["s"].tolist()]


def test_examples_encoded_on_threads_are_written_byte_for_byte_as_on_one(tmp_path):
    from baton.pipeline.dataplane.records.examples_writer import ExamplesWriter
    from baton.pipeline.dataplane.records.schema_file import Column

    cols = [Column("x", "float32"), Column("s", "string"), Column("y", "string")]
    rng = np.random.default_rng(1)
    batches = [{"x": rng.normal(size=n).astype(np.float32),
                "s": np.array([f"v{i}" for i in rng.integers(0, 7, n)], object),
                "y": np.array(["a", "b", ""], object)[rng.integers(0, 3, n)]}
               for n in (500, 1, 800, 300)]
    written = {}
    for threads in (1, 3):
        out = tmp_path / str(threads)
        w = ExamplesWriter(out, cols, "y", {"train": 0.7, "eval": 0.3}, 5, 400, threads=threads)
        for b in batches:
            w.write_batch(b)
        counts = w.close()
        written[threads] = (counts, w.dropped_missing_label,
                            {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*"))
                             if p.is_file()})
    assert written[1] == written[3]
    assert len(written[1][2]) > 4  # several shards of both splits, TFRecords and Arrow copies


def test_a_batch_that_fails_to_encode_is_raised_and_nothing_after_it_is_written(tmp_path,
                                                                                 monkeypatch):
    """A thread writes the encoded batches in order; a batch that failed stops it (the ones
    after would leave a gap in the shard) and its error reaches the caller."""
    import contextlib

    from baton.pipeline.dataplane.records import examples_writer
    from baton.pipeline.dataplane.records.schema_file import Column

    real = examples_writer.encode

    def encode(names, columns, *a, **k):
        if columns[0][0] == 1.0:  # the second batch (each batch's x starts with its number)
            raise ValueError("batch 2 is bad")
        return real(names, columns, *a, **k)

    monkeypatch.setattr(examples_writer, "encode", encode)
    cols = [Column("x", "float32"), Column("y", "string")]
    w = examples_writer.ExamplesWriter(tmp_path, cols, "y", {"train": 1.0}, 5, 10_000, threads=2)
    with pytest.raises(ValueError, match="batch 2 is bad"):
        for i in range(40):
            w.write_batch({"x": np.full(100, i, np.float32), "y": np.array(["a"] * 100, object)})
        w.close()
    with contextlib.suppress(ValueError):  # the threads end either way
        w.close()
    assert w.writers["train"].rows == 100  # only the batch before the bad one
