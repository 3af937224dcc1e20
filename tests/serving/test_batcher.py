"""Batcher semantics with a fake signature (no TensorFlow): fast and exact."""

import asyncio
import functools
import threading
import time

import numpy as np
import pytest

from baton.serving.batcher import BatchScheduler, Task
from baton.serving.config import BatchingOptions
from baton.serving.status import Code, ServingError


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


def test_without_batching_large_requests_are_not_bounded_by_rows():
    """TF Serving without --enable_batching has no batching queue: 8 requests of 5000
    rows each wait for the one busy thread (they were refused as a full batch queue when
    each queue held max_enqueued_batches * max_batch_size rows)."""
    sig = FakeSignature()
    sig.gate.clear()
    s = BatchScheduler(BatchingOptions(max_batch_size=1, max_enqueued_batches=4096,
                                       num_batch_threads=1), batching=False)
    try:
        arrays = [np.full(5000, float(i)) for i in range(8)]
        threading.Timer(0.3, sig.gate.set).start()
        res = run_all(s, sig, arrays)
    finally:
        sig.gate.set()
        s.close()
    assert all(not isinstance(r, ServingError) for r in res), res
    assert [r["y"][0] for r in res] == [2.0 * i for i in range(8)]
    assert sig.calls == [5000] * 8  # each its own call


def test_without_batching_the_bound_is_requests_waiting_and_says_nothing_of_batching():
    sig = FakeSignature()
    sig.gate.clear()
    s = BatchScheduler(BatchingOptions(max_batch_size=1, max_enqueued_batches=3,
                                       num_batch_threads=1), batching=False)
    try:
        s.submit(Task(sig, {"x": np.zeros(10)}, lambda o, e: None))
        time.sleep(0.1)  # the worker took it and is blocked: it no longer waits
        s.submit(Task(sig, {"x": np.zeros(7000)}, lambda o, e: None))
        s.submit(Task(sig, {"a": np.zeros(2), "b": np.zeros(3)}, lambda o, e: None))  # alone
        s.submit(Task(sig, {"x": np.zeros(1)}, lambda o, e: None))  # 3 waiting, any queue
        with pytest.raises(ServingError) as e:
            s.submit(Task(sig, {"x": np.zeros(1)}, lambda o, e: None))
        assert e.value.code == Code.UNAVAILABLE and e.value.http_status == 503
        assert "batch" not in e.value.message.lower()
        assert e.value.message == "Server is overloaded: 3 requests are already waiting to run"
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


def test_mismatched_batch_dims_rejected_with_batching_run_alone_without():
    """As TF Serving: BatchingSession refuses inputs without a common 0th dimension; a
    plain Session::Run (no --enable_batching) runs them, and a signature with no inputs."""
    task = Task(FakeSignature(), {"a": np.zeros(2), "b": np.zeros(3)}, lambda o, e: None)
    assert "must have equal 0th-dimension size" in task.unbatchable
    s = BatchScheduler(BatchingOptions(max_batch_size=4))
    try:
        with pytest.raises(ServingError, match="must have equal 0th-dimension size"):
            s.submit(task)
        with pytest.raises(ServingError, match="must have at least one dimension"):
            s.submit(Task(FakeSignature(), {"a": np.zeros(())}, lambda o, e: None))
    finally:
        s.close()

    class Echo(FakeSignature):
        def __call__(self, feeds):
            return {"n": np.array(len(feeds))}

    plain = BatchScheduler(BatchingOptions(max_batch_size=1, num_batch_threads=2),
                           batching=False)
    got: list = []
    done = threading.Event()
    try:
        for feeds in ({"a": np.zeros(2), "b": np.zeros(3)}, {"a": np.zeros(())}, {}):
            plain.submit(Task(Echo(), feeds, lambda o, e: (got.append((o, e)),
                                                           len(got) == 3 and done.set())))
        assert done.wait(5)
    finally:
        plain.close()
    assert sorted(int(o["n"]) for o, e in got if e is None) == [0, 1, 2]


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


def _new_loop(kind):
    if kind == "uvloop":
        import uvloop  # a dependency (not on Windows): never a skip

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def _run_on_loop(loop, sched, tasks_feeds, sig):
    """Submits tasks with `loop` and returns [(thread ident of done, out or error)]."""
    async def main():
        futs, seen = [], []
        for feeds in tasks_feeds:
            fut = loop.create_future()
            futs.append(fut)

            def done(out, err, fut=fut):
                seen.append(threading.get_ident())
                # thread-safe either way, so a wrong thread fails the assertion, not the loop
                loop.call_soon_threadsafe(fut.set_result, err if err is not None else out)

            sched.submit(Task(sig, feeds, done, loop))
        results = [await asyncio.wait_for(f, 10) for f in futs]
        return seen, results

    return loop.run_until_complete(main())


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
def test_split_request_completes_once_on_its_own_loop(loop_kind):
    """A request split into parts completes on the loop it came from (not a worker).

    Completing it on a worker thread wrote to the REST transport off the loop (a
    segfault under uvloop) and resolved gRPC futures without waking the loop (~50 ms).
    """
    loop = _new_loop(loop_kind)
    sig = FakeSignature()
    s = BatchScheduler(BatchingOptions(max_batch_size=4, enable_large_batch_splitting=True,
                                       num_batch_threads=2))
    try:
        seen, (res, small) = _run_on_loop(
            loop, s, [{"x": np.arange(10, dtype=np.float32)}, {"x": np.ones(2, np.float32)}],
            sig)
    finally:
        s.close()
        loop.close()
    assert seen == [threading.get_ident()] * 2  # once each, on the loop's thread
    assert res["y"].tolist() == (np.arange(10) * 2).tolist()
    assert small["y"].tolist() == [2.0, 2.0]
    assert sum(sig.calls) == 12 and max(sig.calls) <= 4


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
def test_split_request_failing_part_fails_the_request_once_on_its_loop(loop_kind):
    class FailsOnTwo(FakeSignature):
        def __call__(self, feeds):
            if len(feeds["x"]) == 2:
                raise ServingError(Code.INVALID_ARGUMENT, "part failed")
            return super().__call__(feeds)

    loop = _new_loop(loop_kind)
    s = BatchScheduler(BatchingOptions(max_batch_size=4, enable_large_batch_splitting=True))
    try:
        seen, (res,) = _run_on_loop(loop, s, [{"x": np.arange(10, dtype=np.float32)}],
                                    FailsOnTwo())
    finally:
        s.close()
        loop.close()
    assert seen == [threading.get_ident()]
    assert isinstance(res, ServingError) and res.message == "part failed"


def _blocked_scheduler(**kw):
    """A one-thread scheduler whose worker is busy with a first batch until sig.gate."""
    sig = FakeSignature()
    sig.gate.clear()
    s = BatchScheduler(BatchingOptions(max_batch_size=4, num_batch_threads=1, **kw))
    first = threading.Event()
    s.submit(Task(sig, {"x": np.zeros(1)}, lambda o, e: first.set()))
    time.sleep(0.1)  # the worker has taken it and waits on the gate
    return sig, s, first


def test_batch_whose_tasks_all_timed_out_in_the_queue_is_not_run():
    sig, s, first = _blocked_scheduler()
    try:
        results = [None, None]
        events = [threading.Event(), threading.Event()]
        tasks = []
        for i in range(2):
            def cb(out, err, i=i):
                results[i] = err if err is not None else out
                events[i].set()
            tasks.append(Task(sig, {"x": np.ones(1)}, cb, timeout=0.05))
            s.submit(tasks[-1])
        time.sleep(0.2)  # both deadlines pass while they wait
        sig.gate.set()
        assert first.wait(5) and all(e.wait(5) for e in events)
    finally:
        sig.gate.set()
        s.close()
    for r in results:
        assert isinstance(r, ServingError) and r.code == Code.RESOURCE_EXHAUSTED
        assert r.message == "Run() timeout exceeded while waiting in batching queue"
        assert r.http_status == 429
    assert sig.calls == [1]  # the timed-out batch never ran


@pytest.mark.parametrize("other_timeout", [0.0, 30.0])
def test_batch_with_a_live_task_runs_everyone_under_the_latest_deadline(other_timeout):
    sig, s, first = _blocked_scheduler()
    try:
        late = Task(sig, {"x": np.ones(1)}, lambda o, e: None, timeout=0.05)
        s.submit(late)
        res = [None]
        done = threading.Event()
        live = Task(sig, {"x": np.full(1, 2.0)},
                    lambda o, e: (res.__setitem__(0, e or o), done.set()),
                    timeout=other_timeout)
        s.submit(live)
        time.sleep(0.2)
        sig.gate.set()
        assert first.wait(5) and done.wait(5)
    finally:
        sig.gate.set()
        s.close()
    assert sig.calls == [1, 2]  # as TF Serving: the batch runs if any task is in time
    assert res[0]["y"].tolist() == [4.0]
    assert late.deadline == live.deadline  # 0 (none) or the live task's deadline


class Picky(FakeSignature):
    """Fails a whole call when any row is negative, as TensorFlow fails a batch on one
    request's bad value."""

    stateful = False

    def __call__(self, feeds):
        self.gate.wait(10)
        self.calls.append(len(feeds["x"]))
        if (feeds["x"] < 0).any():
            raise ServingError(Code.INVALID_ARGUMENT, "negative")
        return {"y": feeds["x"] * 2}


@pytest.mark.parametrize("stateful", [False, True])
def test_a_batch_failing_on_one_request_fails_only_that_request(stateful):
    sig = Picky()
    sig.stateful = stateful
    sig.gate.clear()  # hold the worker so the tasks queue up and share one batch
    s = BatchScheduler(BatchingOptions(max_batch_size=64, num_batch_threads=1))
    done: dict = {}
    try:
        s.submit(Task(sig, {"x": np.ones(1)}, lambda o, e: done.setdefault("first", e)))
        time.sleep(0.2)  # the first task is taken alone and waits at the gate
        for i in range(8):
            x = np.array([-1.0 if i == 5 else float(i)])
            s.submit(Task(sig, {"x": x}, lambda o, e, i=i: done.setdefault(i, (o, e))))
        sig.gate.set()
        deadline = time.monotonic() + 10
        while len(done) < 9 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        s.close()
    assert sig.calls[:2] == [1, 8]  # the eight were one batch
    failed = {i for i in range(8) if done[i][1] is not None}
    if stateful:  # never run twice: every request of the failed batch gets the error
        assert failed == set(range(8)) and len(sig.calls) == 2
    else:
        assert failed == {5} and done[5][1].message == "negative"
        assert [float(done[i][0]["y"][0]) for i in (0, 7)] == [0.0, 14.0]
