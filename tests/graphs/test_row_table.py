"""graphs.row_table: the in-memory split that `balance: auto` gathers its rows from."""

from __future__ import annotations

import numpy as np
import pytest

from baton.graphs import row_table as rt
from baton.graphs.synthetic import synthetic_dataset, synthetic_spec
from tests.strategies.jobs import train_job


def _table(n: int = 100) -> rt.RowTable:
    spec = synthetic_spec(3, (4,), 2)
    return rt.RowTable(lambda: synthetic_dataset(spec, n, 32))


def _batches(ds, k: int) -> list[np.ndarray]:  # noqa: ANN001
    return [b.numpy() for b in ds.take(k)]


def test_the_table_holds_every_row_once_in_the_datasets_order() -> None:
    spec = synthetic_spec(3, (4,), 2)
    table = _table(100)
    features, labels = table.rows()
    assert table.num_rows == 100 and labels.shape == (100,)
    first = next(iter(synthetic_dataset(spec, 100, 100)))
    for k, v in first[0].items():
        np.testing.assert_array_equal(features[k].numpy(), v.numpy())
    np.testing.assert_array_equal(labels.numpy(), first[1].numpy())


def test_each_epoch_is_a_permutation_and_batches_run_across_epoch_ends() -> None:
    table = _table(100)
    flat = np.concatenate(_batches(table.index_stream(30, seed=7), 10))  # 300 = 3 epochs
    epochs = flat.reshape(3, 100)
    for e in epochs:
        assert sorted(e.tolist()) == list(range(100))
    assert not np.array_equal(epochs[0], epochs[1])  # reshuffled every epoch
    assert not np.array_equal(epochs[0], np.arange(100))


def test_every_task_draws_the_same_stream_and_a_skip_resumes_it() -> None:
    a, b = _table(100), _table(100)
    whole = _batches(a.index_stream(30, seed=7), 8)
    for x, y in zip(whole, _batches(b.index_stream(30, seed=7), 8), strict=True):
        np.testing.assert_array_equal(x, y)
    for x, y in zip(whole[5:], _batches(b.index_stream(30, seed=7, skip=5), 3), strict=True):
        np.testing.assert_array_equal(x, y)
    other = _batches(a.index_stream(30, seed=8), 1)[0]
    assert not np.array_equal(whole[0], other)


def test_take_gathers_the_replicas_rows_of_the_global_batch() -> None:
    table = _table(100)
    features, labels = table.rows()
    idx = np.array([5, 99, 0, 42, 7], np.int32)
    mine, mine_labels = table.take(idx, 1, 4)
    np.testing.assert_array_equal(mine_labels.numpy(), labels.numpy()[[99, 0, 42]])
    for k, v in mine.items():
        np.testing.assert_array_equal(v.numpy(), features[k].numpy()[[99, 0, 42]])


def test_the_table_is_used_only_when_the_split_fits_its_share_of_memory() -> None:
    spec = synthetic_spec(3, (4,), 2)
    per_row = rt.row_bytes(spec)
    assert per_row > 0
    assert rt.fits(1000, spec, available=int(1000 * per_row / rt.MEMORY_SHARE))
    assert not rt.fits(1001, spec, available=int(1000 * per_row / rt.MEMORY_SHARE))
    assert not rt.fits(0, spec, available=1 << 40)


def test_an_empty_split_is_an_error_naming_it() -> None:
    import tensorflow as tf

    table = rt.RowTable(lambda: tf.data.Dataset.from_tensor_slices(
        ({"x": np.zeros((0,), np.float32)}, np.zeros((0,), np.int64))).batch(4))
    with pytest.raises(ValueError, match="training split has no rows"):
        table.rows()


def test_the_job_uses_the_table_under_balance_auto_when_the_split_fits(monkeypatch) -> None:
    spec = synthetic_spec(3, (4,), 2)
    job = train_job(feature_spec=spec.to_dict(), synthetic_examples=1000,
                   strategy="multi_worker_mirrored", balance="auto")
    table = job.data().row_table()
    assert table is not None and table.num_rows == 1000
    off = train_job(feature_spec=spec.to_dict(), synthetic_examples=1000,
                   strategy="multi_worker_mirrored", balance="off")
    assert off.data().row_table() is None
    monkeypatch.setattr(rt, "available_memory", lambda: 1000 * rt.row_bytes(spec))
    assert job.data().row_table() is None  # too large: the whole global batch is streamed instead


def test_available_memory_is_cut_to_the_cgroups_limit(tmp_path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/meminfo").write_text("MemTotal: 8000000 kB\nMemAvailable: 4000000 kB\n")
    assert rt.available_memory(tmp_path) == 4_000_000 * 1024  # no cgroup files: the node's
    v2 = tmp_path / "sys/fs/cgroup"
    v2.mkdir(parents=True)
    (v2 / "memory.max").write_text("max\n")
    (v2 / "memory.current").write_text("100\n")
    assert rt.available_memory(tmp_path) == 4_000_000 * 1024  # no limit
    (v2 / "memory.max").write_text(str(1 << 30) + "\n")  # a pod's limits.memory: 1 GiB
    (v2 / "memory.current").write_text(str(256 << 20) + "\n")
    assert rt.available_memory(tmp_path) == 768 << 20
    (v2 / "memory.max").unlink()
    v1 = v2 / "memory"
    v1.mkdir()
    (v1 / "memory.limit_in_bytes").write_text(str(2 << 30))
    (v1 / "memory.usage_in_bytes").write_text(str(1 << 30))
    assert rt.available_memory(tmp_path) == 1 << 30
