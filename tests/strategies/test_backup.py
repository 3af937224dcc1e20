"""Backups: eager then traced writes restore the same state, keep `max_to_keep`, and a save
interrupted before the index is replaced leaves the previous backup as the latest."""

from __future__ import annotations

import shutil

import pytest

from baton.strategies import backup as backup_mod


def _trackables():
    import keras

    inputs = keras.Input((3,))
    model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    optimizer = keras.optimizers.Adam(0.01)
    optimizer.build(model.trainable_variables)
    return model, optimizer


def _set(model, optimizer, value: float, step: int) -> None:
    import numpy as np

    for v in model.trainable_variables:
        v.assign(np.full(v.shape, value, dtype="float32"))
    optimizer.iterations.assign(step)


def _restored(directory, fingerprint="job"):
    model, optimizer = _trackables()
    state = backup_mod.Backup(directory, True, "worker:0", model=model, optimizer=optimizer,
                              fingerprint=fingerprint).restore()
    return state, float(model.trainable_variables[0].numpy().flat[0]), int(
        optimizer.iterations.numpy())


def test_eager_and_traced_saves_restore_the_latest_and_keep_two(tmp_path) -> None:
    model, optimizer = _trackables()
    b = backup_mod.Backup(tmp_path / "b", True, "worker:0", model=model, optimizer=optimizer,
                          fingerprint="job")
    eager = backup_mod.TRACE_PAYS_FROM  # no plan given: traced once this many were eager
    saves = eager + 3
    for i in range(saves):
        _set(model, optimizer, float(i), step=10 * i)
        b.save(10 * i, {"history": [i]})
        if i in (eager - 1, saves - 1):  # the last eager, the last traced
            assert (b._traced_write is None) == (i < eager)
            assert _restored(tmp_path / "b") == ({"history": [i], "fingerprint": "job"},
                                                 float(i), 10 * i)
    left = sorted(f.name for f in (tmp_path / "b").glob("*.index"))
    assert left == [f"ckpt-{10 * (saves - 2)}.index", f"ckpt-{10 * (saves - 1)}.index"]
    # relative names in the index: a moved directory still restores
    shutil.move(tmp_path / "b", tmp_path / "moved")
    assert _restored(tmp_path / "moved")[2] == 10 * (saves - 1)
    assert _restored(tmp_path / "moved", fingerprint="another job")[0] is None


@pytest.mark.parametrize("planned", [backup_mod.TRACE_PAYS_FROM - 1, backup_mod.TRACE_PAYS_FROM])
def test_a_planned_job_traces_from_its_first_save_only_when_that_pays(tmp_path, planned) -> None:
    model, optimizer = _trackables()
    b = backup_mod.Backup(tmp_path / "b", True, "worker:0", model=model, optimizer=optimizer,
                          fingerprint="job", planned_saves=planned)
    for i in range(2):
        _set(model, optimizer, float(i), step=i)
        b.save(i, {"history": [i]})
    assert (b._traced_write is not None) == (planned >= backup_mod.TRACE_PAYS_FROM)
    assert _restored(tmp_path / "b") == ({"history": [1], "fingerprint": "job"}, 1.0, 1)


def test_a_save_interrupted_before_the_index_leaves_the_previous_latest(tmp_path,
                                                                        monkeypatch) -> None:
    from tensorflow.python.checkpoint import checkpoint_management

    model, optimizer = _trackables()
    b = backup_mod.Backup(tmp_path, True, "worker:0", model=model, optimizer=optimizer)
    _set(model, optimizer, 1.0, step=5)
    b.save(5, {"history": []})

    def killed(*args, **kwargs):
        raise KeyboardInterrupt("killed after the data files, before the index")

    monkeypatch.setattr(checkpoint_management, "update_checkpoint_state_internal", killed)
    _set(model, optimizer, 2.0, step=9)
    with pytest.raises(KeyboardInterrupt):
        b.save(9, {"history": []})
    monkeypatch.undo()
    assert (tmp_path / "ckpt-9.index").exists()  # written, but not the latest
    assert _restored(tmp_path, fingerprint="")[1:] == (1.0, 5)
    _set(model, optimizer, 3.0, step=12)
    b.save(12, {"history": []})  # the next save sweeps the orphan
    assert sorted(f.name for f in tmp_path.glob("*.index")) == ["ckpt-12.index", "ckpt-5.index"]


def test_a_non_chief_save_leaves_nothing(tmp_path) -> None:
    model, optimizer = _trackables()
    b = backup_mod.Backup(tmp_path, False, "worker:1", model=model, optimizer=optimizer)
    assert b.save(3, {"history": []}) is None
    assert list(tmp_path.iterdir()) == []
