"""Background backups (strategies.snapshot): a save holds the step it was taken at while the
next steps change the live variables, its files restore like a synchronous write's, what cannot
be copied generically is written on the training thread, and a run resumed from a background
backup ends where the uninterrupted run does."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from baton.strategies import backup as backup_mod
from tests.strategies.test_backup import _trackables


def _set(model, optimizer, value: float, step: int) -> None:
    for v in [*model.trainable_variables, *optimizer.variables[1:]]:  # not `iterations`
        v.assign(np.full(v.shape, value, dtype="float32"))
    optimizer.iterations.assign(step)


def _values(model, optimizer) -> list[np.ndarray]:
    return [np.array(v.numpy()) for v in [*model.trainable_variables, *optimizer.variables]]


def _restored(directory):
    model, optimizer = _trackables()
    state = backup_mod.Backup(directory, True, "worker:0", model=model, optimizer=optimizer,
                              fingerprint="job").restore()
    return state, _values(model, optimizer)


@pytest.mark.parametrize("planned", [1, backup_mod.TRACE_PAYS_FROM])  # eager / traced write
def test_a_background_save_holds_its_step_while_training_goes_on(tmp_path, planned) -> None:
    model, optimizer = _trackables()
    b = backup_mod.Backup(tmp_path, True, "worker:0", model=model, optimizer=optimizer,
                          fingerprint="job", planned_saves=planned, background=True)
    b.prepare()
    assert b.background, b.refused
    b.flush()  # the warm-up (traces) is done
    gate, writing = threading.Event(), threading.Event()
    write = b._write

    def held(prefix: str) -> None:  # the write waits until the "next chunk" has run
        writing.set()
        assert gate.wait(30)
        write(prefix)

    b._write = held
    _set(model, optimizer, 1.0, step=5)
    expected = _values(model, optimizer)
    assert b.save(5, {"history": [1]}) == str(tmp_path / "ckpt-5")
    assert writing.wait(30)
    _set(model, optimizer, 2.0, step=9)  # the live variables move on during the write
    gate.set()
    assert b.latest() == str(tmp_path / "ckpt-5")  # latest() waits for the write
    state, values = _restored(tmp_path)
    assert state == {"history": [1], "fingerprint": "job"}
    assert all(np.array_equal(a, e) for a, e in zip(values, expected, strict=True))
    b._write = write
    b.save(9, {"history": [1, 2]})
    b.close()
    state, values = _restored(tmp_path)
    assert state == {"history": [1, 2], "fingerprint": "job"}
    assert int(values[len(model.trainable_variables)]) == 9
    assert sorted(f.name for f in tmp_path.glob("*.index")) == ["ckpt-5.index", "ckpt-9.index"]


def test_background_and_training_thread_writes_restore_the_same_values(tmp_path) -> None:
    model, optimizer = _trackables()
    _set(model, optimizer, 0.5, step=3)
    for name, background in (("sync", False), ("background", True)):
        b = backup_mod.Backup(tmp_path / name, True, "worker:0", model=model,
                              optimizer=optimizer, fingerprint="job", background=background)
        b.save(3, {"history": []})
        b.close()
        assert b.background == background
    sync, bg = _restored(tmp_path / "sync"), _restored(tmp_path / "background")
    assert sync[0] == bg[0]
    assert all(np.array_equal(a, c) for a, c in zip(sync[1], bg[1], strict=True))


def test_a_failed_background_write_is_raised_at_the_next_wait(tmp_path) -> None:
    model, optimizer = _trackables()
    b = backup_mod.Backup(tmp_path, True, "worker:0", model=model, optimizer=optimizer,
                          background=True)

    def broken(prefix: str) -> None:
        raise OSError("disk full")

    b._write = broken
    b.save(1, {"history": []})
    with pytest.raises(OSError, match="disk full"):
        b.flush()
    b.save(2, {"history": []})
    b.close(quiet=True)  # another error is on its way up: this one is not raised over it
    assert b._pool is None


def test_what_cannot_be_copied_is_written_on_the_training_thread(tmp_path) -> None:
    import tensorflow as tf

    model, optimizer = _trackables()
    iterator = iter(tf.data.Dataset.range(5))  # saved by its own code, not as variables
    b = backup_mod.Backup(tmp_path, True, "worker:0", model=model, optimizer=optimizer,
                          iterator=iterator, background=True)
    b.save(1, {"history": []})
    assert not b.background and "Iterator" in b.refused
    assert b._pool is None and (tmp_path / "ckpt-1.index").exists()


def test_only_a_chief_writes_in_the_background(tmp_path) -> None:
    model, optimizer = _trackables()
    b = backup_mod.Backup(tmp_path, False, "worker:1", model=model, optimizer=optimizer,
                          background=True)
    assert not b.background
    assert b.save(3, {"history": []}) is None
    assert list(tmp_path.iterdir()) == []


def test_one_process_strategies_write_in_the_background_multi_worker_ones_do_not() -> None:
    import tensorflow as tf

    from baton.strategies.trainer import _one_process

    assert _one_process(tf.distribute.OneDeviceStrategy("/cpu:0"))
    assert _one_process(tf.distribute.get_strategy())
    assert not _one_process(tf.distribute.MultiWorkerMirroredStrategy.__new__(
        tf.distribute.MultiWorkerMirroredStrategy))


@pytest.mark.slow
def test_a_run_resumed_from_a_background_backup_ends_where_the_whole_run_does(tmp_path) -> None:
    from baton.strategies.loop import TaskRole
    from baton.strategies.trainer import TrainPlan, train

    spec, strategy, build, data = _small_mlp_job(512)

    def run(directory, max_steps=0):
        plan = TrainPlan(epochs=3, steps_per_epoch=16, global_batch_size=32,
                         steps_per_execution=4, backup_every=6, max_steps=max_steps)
        return train(strategy, build, spec, data, None, plan,
                     TaskRole(backup_dir=directory, fingerprint="job"))

    whole = run(tmp_path / "whole")
    first = run(tmp_path / "resumed", max_steps=30)  # stops at step 30: a backup step
    assert first.steps == 30
    resumed = run(tmp_path / "resumed")
    assert resumed.resumed_from == 30 and resumed.steps == 48
    for a, b in zip(whole.model.get_weights(), resumed.model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow
def test_a_resumed_balanced_run_keeps_the_splits_record_of_the_steps_before(tmp_path) -> None:
    """train_info's `balance.history` covers the whole run: the backup carries it (it held
    only the last attempt's samples, so a restart or a resize lost the record before it)."""
    from baton.strategies.loop import TaskRole
    from baton.strategies.trainer import TrainPlan, train

    spec, strategy, build, data = _small_mlp_job(512)

    def run(max_steps=0):
        plan = TrainPlan(epochs=3, steps_per_epoch=16, global_batch_size=32,
                         steps_per_execution=4, backup_every=8, balance=True,
                         max_steps=max_steps)
        return train(strategy, build, spec, data, None, plan,
                     TaskRole(backup_dir=tmp_path, fingerprint="job"))

    first = run(max_steps=24)  # a backup step
    before = [h["step"] for h in first.info["balance"]["history"]]
    assert before and max(before) <= 24, before
    resumed = run()
    assert resumed.resumed_from == 24 and resumed.steps == 48
    steps = [h["step"] for h in resumed.info["balance"]["history"]]
    assert steps[:len(before) - 1] == before[:-1], (before, steps)  # the first's "end" is not
    assert max(steps) == 48 and steps == sorted(steps), steps  # saved: it came after the backup


@pytest.mark.slow
def test_a_sigterm_landing_on_an_epochs_last_step_keeps_that_epochs_record(tmp_path) -> None:
    """Seen in the suite: SIGTERM landed on the chunk that ended epoch 2, the backup was saved
    at that step before the epoch's record, and the resumed run's history.json went 1, 3, 4..."""
    import keras

    from baton.errors import Preempted
    from baton.strategies.loop import TaskRole
    from baton.strategies.objectives import Objectives
    from baton.strategies.trainer import TrainPlan, train

    spec, strategy, build, data = _small_mlp_job(256)
    plan = TrainPlan(epochs=3, steps_per_epoch=8, global_batch_size=32, steps_per_execution=4)
    role = TaskRole(backup_dir=tmp_path, fingerprint="job")

    class SigtermAfterStep4(keras.callbacks.Callback):  # the next chunk (steps 5-8) sees it
        def on_train_batch_end(self, batch, logs=None):
            if batch == 3 and not role.stop.is_set():
                role.stop.set()

    with pytest.raises(Preempted) as stop:
        train(strategy, build, spec, data, None, plan, role,
              objectives=Objectives(callbacks=lambda: [SigtermAfterStep4()]))
    assert stop.value.step == 8  # the last step of epoch 1
    resumed = train(strategy, build, spec, data, None, plan,
                    TaskRole(backup_dir=tmp_path, fingerprint="job"))
    assert resumed.resumed_from == 8 and resumed.steps == 24
    assert [h["epoch"] for h in resumed.history] == [1, 2, 3]
    assert [h["step"] for h in resumed.history] == [8, 16, 24]


def _small_mlp_job(rows: int):
    """A one-device job small enough to train in a second: (spec, strategy, build, data)."""
    import keras

    from baton.graphs import models
    from baton.graphs.synthetic import synthetic_dataset, synthetic_spec
    from baton.strategies.factory import make_strategy

    spec = synthetic_spec(numeric=4, categorical=(5,), classes=3)

    def build():
        return (models.build_model("mlp", spec, models.MLPConfig(hidden_units=(8,)), seed=1),
                keras.optimizers.Adam(0.01))

    def data(skip, ctx):
        ds = synthetic_dataset(spec, rows, 32, seed=1, shuffle=True, repeat=True,
                               drop_remainder=True)
        return ds.skip(skip) if skip else ds

    return spec, make_strategy("one_device"), build, data


@pytest.mark.parametrize("lr_callback", ["scheduler", "plateau"])
def test_keras_callbacks_that_set_the_learning_rate_reach_the_optimizer(lr_callback) -> None:
    """LearningRateScheduler and ReduceLROnPlateau read and set `model.optimizer.learning_rate`
    (which `compile` sets in `fit`): the loop lends the model its optimizer, and takes it back
    before the model is exported. Both failed with "no attribute 'optimizer'" (issue 11 audit)."""
    import keras

    from baton.strategies.loop import TaskRole
    from baton.strategies.objectives import Objectives
    from baton.strategies.trainer import TrainPlan, train

    spec, strategy, build, data = _small_mlp_job(256)
    seen: list[float] = []

    class Record(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            seen.append(float(self.model.optimizer.learning_rate))

    made = {"scheduler": lambda: keras.callbacks.LearningRateScheduler(lambda e, lr: lr * 0.5),
            "plateau": lambda: keras.callbacks.ReduceLROnPlateau(
                monitor="train_loss", mode="min", factor=0.5, patience=0, min_delta=1e9)}
    plan = TrainPlan(epochs=3, steps_per_epoch=4, global_batch_size=32, steps_per_execution=4)
    result = train(strategy, build, spec, data, None, plan, TaskRole(),
                   objectives=Objectives(callbacks=lambda: [made[lr_callback](), Record()]))
    # the scheduler halves at each epoch's start; the plateau one at the end of the second
    # epoch (the first sets its best; no loss improves on it by 1e9)
    expected = ([0.005, 0.0025, 0.00125] if lr_callback == "scheduler"
                else [0.01, 0.01, 0.005])
    assert seen == pytest.approx(expected, rel=1e-5), seen
    assert result.model.optimizer is None  # not carried into the export
