"""TensorBoard scalars written without the tensorboard package: read back from the event file."""

from __future__ import annotations

from pathlib import Path

import pytest

tf = pytest.importorskip("tensorflow")


def _events(logdir: Path) -> list[tuple[int, str, float, str]]:
    """(step, tag, value, plugin) of every summary value in the directory's event files."""
    out = []
    for path in sorted(logdir.glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for v in event.summary.value:
                value = float(tf.make_ndarray(v.tensor)) if v.HasField("tensor") else v.simple_value
                out.append((event.step, v.tag, round(value, 5), v.metadata.plugin_data.plugin_name))
    return out


def test_scalar_writer_writes_every_value_at_its_step_as_a_scalar(tmp_path: Path) -> None:
    from baton.graphs.summaries import ScalarWriter

    writer = tf.summary.create_file_writer(str(tmp_path))
    scalars = ScalarWriter(writer)
    scalars.write({"train/loss": 0.75, "eval/accuracy": 0.5}, step=64)
    scalars.write({"train/loss": 0.25, "eval/accuracy": 0.875}, step=128)
    scalars.write({"perf/examples_per_sec": 1234.5}, step=128)  # another set of names
    scalars.write({}, step=130)  # nothing to write
    writer.flush()
    assert sorted(_events(tmp_path)) == sorted([
        (64, "train/loss", 0.75, "scalars"), (64, "eval/accuracy", 0.5, "scalars"),
        (128, "train/loss", 0.25, "scalars"), (128, "eval/accuracy", 0.875, "scalars"),
        (128, "perf/examples_per_sec", 1234.5, "scalars"),
    ])
    assert len(scalars._traced) == 2  # one trace per set of names, reused across steps


def test_epoch_summaries_hold_the_history_record(tmp_path: Path) -> None:
    from baton.strategies.callbacks import LoopState, Summaries

    history = [{"epoch": 1, "step": 10, "train_loss": 1.5, "eval_accuracy": 0.25}]
    state = LoopState(10, 20, 10, 32, history)
    writer = tf.summary.create_file_writer(str(tmp_path))
    cb = Summaries(writer, state, per_chunk=False)
    cb.on_epoch_end(0)
    history.append({"epoch": 2, "step": 20, "train_loss": 0.5, "eval_accuracy": 0.75})
    state.step = 20
    cb.on_epoch_end(1)
    got = {(step, tag): value for step, tag, value, _ in _events(tmp_path)}
    assert got[(10, "train/loss")] == 1.5 and got[(20, "eval/accuracy")] == 0.75
    assert {tag for _, tag in got} == {"train/loss", "eval/accuracy", "perf/steps_per_sec",
                                        "perf/examples_per_sec"}
