"""An elastic job's input under `balance: off`: a step trains on the same examples whatever the
number of workers (graphs.training_data.TrainingData.dataset_fns). Sharded per worker, a resize
from 2 workers to 1 changed them, and the resumed run drifted from an uninterrupted one (audit of issue 14)."""

from __future__ import annotations

import numpy as np
import pytest

from baton.graphs.synthetic import synthetic_spec
from baton.strategies.job import TrainJob
from tests.strategies.jobs import train_job

BATCH = 8


def _job(elastic: bool) -> TrainJob:
    return train_job(feature_spec=synthetic_spec(3, (4,), 2).to_dict(), synthetic_examples=40,
                    batch_size=BATCH, strategy="multi_worker_mirrored", elastic=elastic)


def _ids(features) -> np.ndarray:  # noqa: ANN001
    """A row's identity: its value of the first float feature (random normal: unique)."""
    name = next(k for k in sorted(features) if features[k].dtype.is_floating)
    return np.asarray(features[name]).reshape(len(features[name]), -1)[:, 0]


def _steps(job: TrainJob, workers: int, replicas_per_worker: int, skip: int, steps: int):
    """Each step's examples over the whole group: the rows of every replica, in replica order."""
    import tensorflow as tf

    train, _ = job.data().dataset_fns()
    per_replica = []
    for w in range(workers):
        ctx = tf.distribute.InputContext(workers, w, workers * replicas_per_worker)
        it = iter(train(skip, ctx))
        for _ in range(replicas_per_worker):
            per_replica.append([])
        for _ in range(steps):  # a task's local replicas take consecutive elements
            for r in range(replicas_per_worker):
                features, _labels = next(it)
                per_replica[w * replicas_per_worker + r].append(_ids(features))
    return [np.concatenate([rep[s] for rep in per_replica]) for s in range(steps)]


def _global(job: TrainJob, skip: int, steps: int):
    train, _ = job.data().dataset_fns()
    it = iter(train(skip, None))
    return [_ids(next(it)[0]) for _ in range(steps)]


@pytest.mark.parametrize("workers,local", [(1, 1), (2, 1), (4, 1), (2, 2)])
def test_every_group_size_trains_each_step_on_the_global_batch_of_the_one_stream(
        workers: int, local: int) -> None:
    job = _job(elastic=True)
    expected = _global(job, skip=3, steps=4)
    got = _steps(job, workers, local, skip=3, steps=4)
    for step, (a, b) in enumerate(zip(expected, got, strict=True)):
        assert a.shape == (BATCH,) and np.array_equal(a, b), (step, a, b)


def test_sharded_input_of_a_fixed_group_differs_by_group_size() -> None:
    """Why `elastic` is needed: the usual per-worker shards make other global batches."""
    job = _job(elastic=False)
    one, two = _steps(job, 1, 1, 0, 3), _steps(job, 2, 1, 0, 3)
    assert not all(np.array_equal(np.sort(a), np.sort(b)) for a, b in zip(one, two, strict=True))
