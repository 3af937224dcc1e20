"""Dynamic batching: many requests, one signature call.

A shared scheduler (as TF Serving's SharedBatchScheduler) owns `num_batch_threads`
worker threads and one queue per (signature, input layout). A worker takes the queue
whose head waited longest, merges tasks up to the execution batch size, waits at most
`batch_timeout_micros` for more, pads to `allowed_batch_sizes`, calls the signature once
with numpy inputs, and slices the outputs back per task. While a batch runs (TF releases
the GIL) new requests accumulate, so batches grow with load and a lone request waits for
nobody. Completions are handed back to each asyncio loop once per batch, not per request.

Every completion of a task that has a loop runs on that loop (`call_soon_threadsafe`),
never on a worker thread: the REST callback writes to a transport and the gRPC one
resolves a future, and neither may happen off the loop (under uvloop a transport write
from another thread crashes the process). That includes requests split into several
batches (`enable_large_batch_splitting`): the parts complete on the workers, the whole
on the request's loop.

A batch failing on one request's data is re-run in halves (`_isolated`).

REST requests carry `--rest_api_timeout_in_ms` as in TF Serving's BatchingSession: a
task's deadline is its enqueue time plus the timeout; a batch whose tasks have all
passed their deadline when a worker takes it is not run, and its tasks fail with
RESOURCE_EXHAUSTED "Run() timeout exceeded while waiting in batching queue" (HTTP 429);
otherwise the batch runs under the latest deadline of its tasks, and the HTTP layer
answers 504 DEADLINE_EXCEEDED if the run outlives it.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import threading
import time
from collections.abc import Callable

import numpy as np

from baton.serving.config import BatchingOptions
from baton.serving.status import Code, ServingError, invalid, unavailable

QUEUE_TIMEOUT_MESSAGE = "Run() timeout exceeded while waiting in batching queue"


class Task:
    """One request's inputs (already numpy, batch dimension first) and its completion."""

    __slots__ = ("signature", "feeds", "size", "done", "loop", "enqueued", "key", "model",
                 "api", "timeout", "deadline", "running", "unbatchable")

    def __init__(self, signature, feeds: dict[str, np.ndarray], done: Callable, loop=None,
                 model: str = "", api: str = "", timeout: float = 0.0,
                 key: tuple | None = None):
        self.signature = signature
        self.feeds = feeds
        self.done = done  # done(outputs: dict | None, error: ServingError | None)
        self.loop = loop  # asyncio loop to complete on, or None for the worker thread
        self.model = model
        self.api = api  # metrics label ("Predict", "predict", ...); "" records no runtime
        self.timeout = timeout  # seconds (REST --rest_api_timeout_in_ms); 0: none
        self.deadline = 0.0  # monotonic; 0: none. Set at enqueue, extended at dequeue
        self.running = False  # taken by a worker (or split into parts)
        # Why these feeds cannot share a batch ("" when they can): no inputs, a scalar,
        # or inputs of different lengths. Such a task runs alone, as its own call (TF
        # Serving's plain Session::Run); with batching it is refused, as BatchingSession
        # refuses it, unless the signature has no inputs at all.
        self.unbatchable = ""
        if key is not None:
            # The caller built `feeds` from the signature's specs and knows their layout
            # (rest_json's row plan: every input [n] of its spec's dtype).
            self.size = len(next(iter(feeds.values())))
            self.key: tuple = key
        elif len(feeds) == 1:  # the common case, without the set and the sort
            (k, a), = feeds.items()
            shape = a.shape
            if shape:
                self.size = shape[0]
                self.key = (id(signature), (k, shape[1:], a.dtype.str))
            else:
                self._alone(f"Received shapes: {{{k!r}: []}}", scalar=True)
        else:
            sizes = {a.shape[0] if a.ndim else -1 for a in feeds.values()}
            if len(sizes) == 1 and -1 not in sizes:
                self.size = sizes.pop()
                self.key = (id(signature),) + tuple(
                    (k, a.shape[1:], a.dtype.str) for k, a in sorted(feeds.items()))
            else:
                self._alone("Received shapes: "
                            f"{ {k: list(v.shape) for k, v in feeds.items()} }",
                            scalar=-1 in sizes)
        self.enqueued = 0.0

    def _alone(self, shapes: str, scalar: bool = False) -> None:
        self.size = 1
        self.key = ("alone", id(self))  # a queue of its own: never merged
        if self.feeds:  # batching_util.h ComputeTensorBatchSize's words
            self.unbatchable = ("Batching Run() input tensors must have at least one "
                                f"dimension. {shapes}" if scalar else
                                "Batching Run() input tensors must have equal 0th-dimension "
                                f"size. {shapes}")


class BatchSlice(dict):
    """One task's outputs (name -> its rows of the batch's output) that also know the
    batch: `batch` is (the batch's outputs, a dict shared by its tasks), `rows` this
    task's (start, end). A front end can then derive something once per batch (rest's
    JSON text of every row) instead of once per request."""

    __slots__ = ("batch", "rows")

    def __init__(self, shared: tuple[dict, dict], start: int, end: int):
        super().__init__((k, v[start:end]) for k, v in shared[0].items())
        self.batch = shared
        self.rows = (start, end)


class _Queue:
    __slots__ = ("tasks", "rows")

    def __init__(self) -> None:
        self.tasks: collections.deque[Task] = collections.deque()
        self.rows = 0


def _complete(batch: list[tuple[Task, dict | None, ServingError | None]]) -> None:
    for task, out, err in batch:
        # A broken client callback must not kill the worker (try/except, not
        # contextlib.suppress: this runs once per request on the event loop).
        try:  # noqa: SIM105
            task.done(out, err)
        except Exception:  # noqa: BLE001, S110
            pass


def deliver(results: list[tuple[Task, dict | None, ServingError | None]]) -> None:
    """Runs each task's completion on its own loop (one hand-off per loop), or inline."""
    by_loop: dict = {}
    for r in results:
        by_loop.setdefault(r[0].loop, []).append(r)
    for loop, items in by_loop.items():
        if loop is None:
            _complete(items)
        else:
            with contextlib.suppress(RuntimeError):  # loop closed: client is gone
                loop.call_soon_threadsafe(_complete, items)


class BatchScheduler:
    """Shared worker threads and per-signature queues.

    Args:
        options: batching knobs. With batching, `max_enqueued_batches * max_batch_size`
            rows bound each queue. Without, each request is its own batch of any size, so
            `max_enqueued_batches` bounds the number of requests waiting (in all queues).
        batching: False runs each request as its own call (TF Serving without
            --enable_batching, which has no batching queue) on the same bounded, measured
            machinery; its refusals never speak of batching.
        metrics: optional observer with `input_batch(size, n_tensors)` (per request),
            `batch(tasks, size, padded, dequeued, started, finished)` (per executed
            batch, on a worker) and `runtime(model, api, seconds)` (per split request).
    """

    def __init__(self, options: BatchingOptions, batching: bool = True, metrics=None):
        self.options = options
        self.batching = batching
        self.metrics = metrics
        self._cv = threading.Condition()
        self._queues: dict[tuple, _Queue] = {}
        self._closed = False
        self._busy = 0
        self._capacity = options.max_enqueued_batches * options.max_batch_size  # rows
        self._waiting = 0  # tasks queued, in all queues (the bound without batching)
        self._threads = [
            threading.Thread(target=self._run, name=f"batch-{i}", daemon=True)
            for i in range(options.num_batch_threads)
        ]
        for t in self._threads:
            t.start()

    # -- producer side ---------------------------------------------------------------
    def submit(self, task: Task) -> None:
        """Enqueues a task or raises (400 too large, 503 queue full / shutting down)."""
        limit = self.options.execution_size
        if self.batching:
            if task.unbatchable:
                raise invalid(task.unbatchable)
            if self.metrics is not None:
                self.metrics.input_batch(task.size, len(task.feeds))
            if task.size > limit:
                if not self.options.enable_large_batch_splitting:
                    raise invalid(f"Task size {task.size} is larger than maximum input "
                                  f"batch size {limit}")
                self._submit_split(task, limit)
                return
        self._enqueue(task)

    def _enqueue(self, task: Task) -> None:
        with self._cv:
            if self._closed:
                raise unavailable("Server is shutting down")
            q = self._queues.get(task.key)
            if self.batching:
                if q is not None and q.rows and q.rows + task.size > self._capacity:
                    raise unavailable("The batch scheduling queue to which this task was "
                                      "submitted is full")
            elif self._waiting >= self.options.max_enqueued_batches:
                # TF Serving runs an unbatched request as its own Session::Run, with no
                # queue: here only the number of waiting requests is bounded, never rows.
                raise unavailable(f"Server is overloaded: {self._waiting} requests are "
                                  "already waiting to run")
            if q is None:
                q = self._queues[task.key] = _Queue()
            task.enqueued = time.monotonic()
            if task.timeout > 0:
                task.deadline = task.enqueued + task.timeout
            q.tasks.append(task)
            q.rows += task.size
            self._waiting += 1
            self._cv.notify()

    def _submit_split(self, task: Task, limit: int) -> None:
        """Runs `task` as parts of at most `limit` rows; completes it once, on its loop."""
        parts: list = [None] * ((task.size + limit - 1) // limit)
        state: dict = {"left": len(parts), "error": None}
        lock = threading.Lock()
        task.enqueued = time.monotonic()
        if task.timeout > 0:
            task.deadline = task.enqueued + task.timeout
        task.running = True  # its parts are what waits in the queues

        def part_done(i, out, err):  # on a worker thread (the parts have no loop)
            with lock:
                parts[i] = out
                state["error"] = state["error"] or err
                state["left"] -= 1
                last = state["left"] == 0
            if not last:
                return
            err = state["error"]
            out = None
            if err is None:
                try:
                    out = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
                except Exception as e:  # noqa: BLE001 - e.g. parts with ragged outputs
                    err = ServingError(Code.INTERNAL, f"cannot merge split outputs: {e}")
            if err is None and self.metrics is not None and task.api:
                self.metrics.runtime(task.model, task.api, time.monotonic() - task.enqueued)
            deliver([(task, out, err)])

        subs = []
        for i, start in enumerate(range(0, task.size, limit)):
            feeds = {k: v[start:start + limit] for k, v in task.feeds.items()}
            subs.append(Task(task.signature, feeds, functools.partial(part_done, i), None,
                             task.model, "", task.timeout))
        for s in subs:
            self._enqueue(s)  # a full queue part-way fails the whole request (503)

    def depth(self) -> dict[str, int]:
        """Queued rows per model (for the queue-depth gauge)."""
        out: dict[str, int] = collections.Counter()
        with self._cv:
            for q in self._queues.values():
                if q.tasks:
                    out[q.tasks[0].model] += q.rows
        return dict(out)

    @property
    def idle(self) -> bool:
        with self._cv:
            return self._busy == 0 and not any(q.tasks for q in self._queues.values())

    def close(self, timeout: float = 10.0) -> None:
        """Stops accepting work, lets queued batches finish, joins the workers."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        for t in self._threads:
            t.join(timeout)

    # -- worker side -----------------------------------------------------------------
    def _take(self) -> list[Task] | None:
        opts = self.options
        with self._cv:
            while True:
                heads = [(q.tasks[0].enqueued, k) for k, q in self._queues.items() if q.tasks]
                if heads:
                    break
                if self._closed:
                    return None
                self._cv.wait()
            key = min(heads)[1]
            q = self._queues[key]
            tasks = q.tasks
            limit = opts.execution_size if self.batching else 1
            deadline = tasks[0].enqueued + opts.batch_timeout_micros / 1e6
            batch: list[Task] = []
            size = 0
            while True:
                while tasks and (not batch or size + tasks[0].size <= limit):
                    t = tasks.popleft()
                    batch.append(t)
                    size += t.size
                    q.rows -= t.size
                remaining = deadline - time.monotonic()
                if (size >= limit or remaining <= 0 or self._closed or not self.batching
                        or (tasks and batch)):
                    break
                self._cv.wait(remaining)
            if not tasks and self._queues.get(key) is q:
                del self._queues[key]
            self._waiting -= len(batch)
            self._busy += 1
            return batch

    def _expired(self, batch: list[Task], now: float) -> bool:
        """Applies the timeout at dequeue; True when no task of the batch is still live.

        As TF Serving's BatchingSession: a batch runs if any of its tasks is within its
        deadline (each task then waits for the latest deadline of the batch); without
        batching the timeout covers the call only (TF Serving has no queue there).
        """
        if not self.batching:
            for t in batch:
                if t.timeout > 0:
                    t.deadline = now + t.timeout
            return False
        latest = 0.0
        for t in batch:
            if not t.deadline:  # a task without timeout: the batch runs unbounded
                for u in batch:
                    u.deadline = 0.0
                return False
            if t.deadline > now:
                latest = max(latest, t.deadline)
        if not latest:
            return True
        for t in batch:
            t.deadline = latest
        return False

    def _run(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                return
            dequeued = time.monotonic()
            try:
                expired = self._expired(batch, dequeued)
                for t in batch:  # after the deadlines are settled: the HTTP sweep reads both
                    t.running = True
                if expired:
                    err = ServingError(Code.RESOURCE_EXHAUSTED, QUEUE_TIMEOUT_MESSAGE)
                    results: list = [(t, None, err) for t in batch]
                else:
                    results = self._isolated(batch, dequeued)
            except Exception as e:  # noqa: BLE001
                err = e if isinstance(e, ServingError) else ServingError(Code.INTERNAL, str(e))
                results = [(t, None, err) for t in batch]
            with self._cv:
                self._busy -= 1
            deliver(results)

    def _isolated(self, batch: list[Task], dequeued: float) -> list:
        """Runs the batch, then its halves if it fails with INVALID_ARGUMENT, and so on:
        only the requests whose data TensorFlow fails get the error (TF Serving fails
        the batch). Not for a stateful signature: each request's update must run once."""
        try:
            return self._execute(batch, dequeued)
        except ServingError as e:
            err = e
        except Exception as e:  # noqa: BLE001
            err = ServingError(Code.INTERNAL, str(e))
        if (len(batch) == 1 or err.code != Code.INVALID_ARGUMENT
                or getattr(batch[0].signature, "stateful", True)):
            return [(t, None, err) for t in batch]
        results: list = []
        todo = [batch[len(batch) // 2:], batch[:len(batch) // 2]]
        while todo:
            part = todo.pop()
            try:
                results.extend(self._execute(part, dequeued))
            except Exception as e:  # noqa: BLE001
                if len(part) > 1:
                    todo += [part[len(part) // 2:], part[:len(part) // 2]]
                else:
                    results.append((part[0], None, e if isinstance(e, ServingError)
                                    else ServingError(Code.INTERNAL, str(e))))
        return results

    def _execute(self, batch: list[Task], dequeued: float = 0.0) -> list:
        sig = batch[0].signature
        size = sum(t.size for t in batch)
        padded = size
        if len(batch) == 1:
            feeds = batch[0].feeds
        else:
            feeds = {k: np.concatenate([t.feeds[k] for t in batch]) for k in batch[0].feeds}
        if self.batching and self.options.allowed_batch_sizes and batch[0].key[0] != "alone":
            padded = next(s for s in self.options.allowed_batch_sizes if s >= size)
            if padded > size:
                feeds = {k: np.concatenate([v, np.repeat(v[:1], padded - size, axis=0)])
                         for k, v in feeds.items()}
        t0 = time.monotonic()
        out = sig(feeds)
        t1 = time.monotonic()
        if not self.batching or batch[0].key[0] == "alone":
            results = [(batch[0], out, None)]
        else:
            for k, v in out.items():  # BatchingSession::SplitOutputTensors' checks
                if v.ndim == 0:
                    raise ServingError(Code.FAILED_PRECONDITION,
                                       f"Batched output tensor has 0 dimensions ({k!r})")
                if v.shape[0] != padded:
                    raise ServingError(
                        Code.FAILED_PRECONDITION,
                        "Batched output tensor's 0th dimension does not equal the sum of the "
                        f"0th dimension sizes of the input tensors ({k!r}: {list(v.shape)}, "
                        f"{padded} rows)")
            results, start = [], 0
            shared: tuple[dict, dict] = (out, {})  # the batch's outputs, and what front ends derive from them
            for t in batch:
                end = start + t.size
                results.append((t, BatchSlice(shared, start, end), None))
                start = end
        if self.metrics is not None:
            self.metrics.batch(batch, size, padded, dequeued or t0, t0, t1)
        return results
