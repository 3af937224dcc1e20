"""Batcher semantics with a fake signature (no TensorFlow): fast and exact."""

import functools
import threading
import time

import numpy as np
import pytest

from serving.batcher import BatchScheduler, Task
from serving.config import BatchingOptions
from serving.status import Code, ServingError


class FakeSignature:
    """Doubles its input; records batch sizes; can block to let a queue build up."""

    name = "serving_default"

    def __init__(self, delay=0.0):
        self.calls = []
        self.delay = delay
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, feeds):
        self.gate.wait(10)
        self.calls.append(len(feeds["x"]))
        time.sleep(self.delay)
        return {"y": feeds["x"] * 2, "n": np.full(len(feeds["x"]), len(feeds["x"]))}


def run_all(sched, sig, arrays):
    results = [None] * len(arrays)
    events = [threading.Event() for _ in arrays]

    def cb(i, out, err):
        results[i] = err if err is not None else out
        events[i].set()

    for i, a in enumerate(arrays):
        sched.submit(Task(sig, {"x": a}, functools.partial(cb, i)))
    for e in events:
        assert e.wait(10)
    return results


def test_concurrent_requests_are_merged_and_split_back():
    sig = FakeSignature()
    sig.gate.clear()  # hold the first batch so the rest queue up behind it
    s = BatchScheduler(BatchingOptions(max_batch_size=8, num_batch_threads=1))
    try:
        first = threading.Event()
        s.submit(Task(sig, {"x": np.zeros(1, np.float32)}, lambda o, e: first.set()))
        time.sleep(0.1)  # the worker has taken it and waits on the gate
        arrays = [np.array([float(i)], np.float32) for i in range(8)]
        threading.Timer(0.2, sig.gate.set).start()
        res = run_all(s, sig, arrays)
        assert first.wait(5)
    finally:
        s.close()
    assert [r["y"].tolist() for r in res] == [[2.0 * i] for i in range(8)]
    assert sig.calls == [1, 8]  # the 8 waiting ones ran as one call
    assert [int(r["n"][0]) for r in res] == [8] * 8


def test_padding_to_allowed_batch_sizes():
    sig = FakeSignature()
    sig.gate.clear()
    s = BatchScheduler(BatchingOptions(max_batch_size=8, allowed_batch_sizes=(4, 8)))
    try:
        first = threading.Event()
        s.submit(Task(sig, {"x": np.array([1.0, 2.0])}, lambda o, e: first.set()))
        time.sleep(0.1)
        threading.Timer(0.2, sig.gate.set).start()
        res = run_all(s, sig, [np.array([3.0]), np.array([4.0, 5.0])])
        assert first.wait(5)
    finally:
        s.close()
    assert sig.calls == [4, 4]  # 2 rows padded to 4, then 1+2=3 padded to 4
    assert [r["y"].tolist() for r in res] == [[6.0], [8.0, 10.0]]


def test_too_large_refused_or_split():
    sig = FakeSignature()
    s = BatchScheduler(BatchingOptions(max_batch_size=4))
    try:
        with pytest.raises(ServingError, match="Task size 5 is larger than maximum input batch "
                                               "size 4") as e:
            s.submit(Task(sig, {"x": np.zeros(5)}, lambda o, e: None))
        assert e.value.http_status == 400
    finally:
        s.close()
    s = BatchScheduler(BatchingOptions(max_batch_size=4, enable_large_batch_splitting=True))
    try:
        (res,) = run_all(s, sig, [np.arange(10, dtype=np.float32)])
    finally:
        s.close()
    assert res["y"].tolist() == (np.arange(10) * 2).tolist()
    assert sorted(sig.calls[-3:]) == [2, 4, 4]


def test_queue_bound_gives_unavailable():
    sig = FakeSignature()
    sig.gate.clear()
    s = BatchScheduler(BatchingOptions(max_batch_size=2, max_enqueued_batches=2))
    try:
        s.submit(Task(sig, {"x": np.zeros(1)}, lambda o, e: None))
        time.sleep(0.1)  # the worker took it and is blocked
        for _ in range(4):  # 2 batches of 2 rows fit
            s.submit(Task(sig, {"x": np.zeros(1)}, lambda o, e: None))
        with pytest.raises(ServingError) as e:
            s.submit(Task(sig, {"x": np.zeros(1)}, lambda o, e: None))
        assert e.value.code == Code.UNAVAILABLE and e.value.http_status == 503
        assert s.depth() == {"": 4}
    finally:
        sig.gate.set()
        s.close()


def test_batch_timeout_waits_for_more():
    sig = FakeSignature()
    s = BatchScheduler(BatchingOptions(max_batch_size=4, batch_timeout_micros=300_000))
    try:
        events = []
        for _i in range(3):
            ev = threading.Event()
            events.append(ev)
            s.submit(Task(sig, {"x": np.zeros(1)}, lambda o, e, ev=ev: ev.set()))
            time.sleep(0.02)
        assert all(ev.wait(5) for ev in events)
    finally:
        s.close()
    assert sig.calls == [3]


def test_mismatched_batch_dims_rejected():
    with pytest.raises(ServingError, match="same size in the 0th"):
        Task(FakeSignature(), {"a": np.zeros(2), "b": np.zeros(3)}, lambda o, e: None)


def test_signature_error_reaches_every_task_and_worker_survives():
    class Boom(FakeSignature):
        def __call__(self, feeds):
            raise ServingError(Code.INVALID_ARGUMENT, "boom")

    s = BatchScheduler(BatchingOptions(max_batch_size=4))
    try:
        res = run_all(s, Boom(), [np.zeros(1), np.zeros(1)])
        assert all(isinstance(r, ServingError) and r.message == "boom" for r in res)
        (ok,) = run_all(s, FakeSignature(), [np.ones(1)])
        assert ok["y"].tolist() == [2.0]
    finally:
        s.close()
