"""Prometheus metrics with TF Serving's own names, label sets and buckets.

TF Serving exports TensorFlow monitoring metrics through its PrometheusExporter
(tensorflow_serving/util/prometheus_exporter.cc): the metric name with `/` turned into
`:`, counters without a `_total` suffix, histograms with TensorFlow's exponential
buckets, latencies in microseconds. The series below are those of TF Serving's
servables/tensorflow/util.cc and batching/batching_session.cc, with the same names and
label names, so dashboards and alerts written for tensorflow_model_server work here:

    :tensorflow:serving:request_count{model_name,status}               counter
    :tensorflow:serving:request_latency{model_name,API,entrypoint}     histogram, us
    :tensorflow:serving:runtime_latency{model_name,API,runtime}        histogram, us
    :tensorflow:serving:request_example_counts{model}                  histogram
    :tensorflow:serving:request_example_count_total{model}             counter
    :tensorflow:serving:batching_session:input_batch_size              histogram
    :tensorflow:serving:batching_session:processed_batch_size          histogram
    :tensorflow:serving:batching_session:padding_size{execution_batch_size}  histogram
    :tensorflow:serving:batching_session:queuing_latency{thread_pool_name}   histogram, us
    :tensorflow:serving:batching_session:wrapped_run_count             counter

Baton-only series carry their own `baton_serving_` prefix (TF Serving has no such
series): queued rows per model and loaded versions, read at scrape time from the
scheduler and the manager so they cost nothing per request; and the server's energy
since it started (`baton_serving_energy_joules{method}`, RAPL or the Green Algorithms
estimate, see baton.energy) with `baton_serving_joules_per_1000_requests` over all
requests answered.

The text is written here (Prometheus text format 0.0.4) rather than by
prometheus_client, which would rename every counter to `..._total`. Updates take one
uncontended lock per family; label children are created once and cached.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Sequence

from baton.energy import ProcessEnergy

PREFIX = ":tensorflow:serving:"
BATON_PREFIX = "baton_serving_"
# TF Serving: the (classic TensorFlow session) runtime label of runtime_latency.
RUNTIME = "TF1"


def exponential(scale: float, growth: float, count: int) -> tuple[float, ...]:
    """monitoring::Buckets::Exponential: `count` upper bounds, then +Inf."""
    out, bound = [], scale
    for _ in range(count):
        out.append(bound)
        bound *= growth
    return tuple(out)


LATENCY_US = exponential(10, 1.8, 33)  # util.cc request/runtime latency, ~20 minutes
BATCH_SIZE = exponential(1, 2, 14)  # batching_util.h: 1 .. 8192
QUEUING_US = exponential(100, 1.2, 52)  # batching_session.cc queuing latency, ~1 s
EXAMPLES = exponential(1, 2, 15)  # util.cc request_example_counts


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(names: Sequence[str], values: Sequence[str], extra: str = "") -> str:
    parts = [f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _number(x: float) -> str:
    return repr(float(x)) if x != int(x) else str(int(x))


class Counter:
    def __init__(self, name: str, help_text: str, labelnames: Sequence[str] = ()):
        self.name, self.help, self.labelnames = name, help_text, tuple(labelnames)
        self._values: dict[tuple, int] = {}
        self._lock = threading.Lock()

    def inc(self, *labels: str, by: int = 1) -> None:
        with self._lock:
            self._values[labels] = self._values.get(labels, 0) + by

    def value(self, *labels: str) -> int:
        return self._values.get(labels, 0)

    def total(self) -> int:
        with self._lock:
            return sum(self._values.values())

    def render(self, out: list[str]) -> None:
        out.append(f"# HELP {self.name} {self.help}")
        out.append(f"# TYPE {self.name} counter")
        with self._lock:
            items = sorted(self._values.items())
        for labels, v in items:
            out.append(f"{self.name}{_labels(self.labelnames, labels)} {v}")


class Histogram:
    """Cumulative-on-render histogram; `bounds` are the finite `le` values."""

    def __init__(self, name: str, help_text: str, labelnames: Sequence[str],
                 bounds: Sequence[float]):
        self.name, self.help, self.labelnames = name, help_text, tuple(labelnames)
        self.bounds = tuple(bounds)
        self._children: dict[tuple, list] = {}  # labels -> [counts..., +Inf count, sum]
        self._lock = threading.Lock()

    def observe(self, value: float, *labels: str, n: int = 1) -> None:
        i = bisect.bisect_left(self.bounds, value)  # first bound >= value (Prometheus le)
        with self._lock:
            c = self._children.get(labels)
            if c is None:
                c = self._children[labels] = [0] * (len(self.bounds) + 1) + [0.0]
            c[i] += n
            c[-1] += value * n

    def observe_many(self, values: Sequence[float], *labels: str) -> None:
        """observe(v, *labels) for each value, under one lock (a batch's tasks)."""
        if not values:
            return
        bounds = self.bounds
        idx = [bisect.bisect_left(bounds, v) for v in values]
        with self._lock:
            c = self._children.get(labels)
            if c is None:
                c = self._children[labels] = [0] * (len(bounds) + 1) + [0.0]
            for i in idx:
                c[i] += 1
            c[-1] += sum(values)

    def count(self, *labels: str) -> int:
        c = self._children.get(labels)
        return 0 if c is None else sum(c[:-1])

    def render(self, out: list[str]) -> None:
        out.append(f"# HELP {self.name} {self.help}")
        out.append(f"# TYPE {self.name} histogram")
        with self._lock:
            items = sorted((k, list(v)) for k, v in self._children.items())
        les = [f'le="{b:.6g}"' for b in self.bounds] + ['le="+Inf"']
        for labels, c in items:
            cumulative = 0
            for le, n in zip(les, c[:-1], strict=True):
                cumulative += n
                out.append(f"{self.name}_bucket{_labels(self.labelnames, labels, le)} "
                           f"{cumulative}")
            lab = _labels(self.labelnames, labels)
            out.append(f"{self.name}_sum{lab} {_number(c[-1])}")
            out.append(f"{self.name}_count{lab} {cumulative}")


class Metrics:
    """All server metrics; `render()` returns the text exposition.

    Args:
        depth: queued rows per model (scheduler), read at scrape time.
        loaded: loaded versions per model (manager), read at scrape time.
        batching: whether requests go through dynamic batching (TF Serving's
            BatchingSession metrics are recorded only then).
        thread_pool_name: the queuing_latency label (BatchingParameters.thread_pool_name;
            TF Serving's SharedBatchScheduler default is "batch_threads").
    """

    def __init__(self, depth: Callable[[], dict[str, int]] | None = None,
                 loaded: Callable[[], dict[str, list[int]]] | None = None,
                 batching: bool = True, thread_pool_name: str = "batch_threads"):
        self._depth = depth
        self._loaded = loaded
        self.energy = ProcessEnergy()
        self.batching = batching
        self.thread_pool_name = thread_pool_name
        p, b = PREFIX, PREFIX + "batching_session:"
        self.request_count = Counter(p + "request_count", "The total number of requests.",
                                     ["model_name", "status"])
        self.request_latency = Histogram(
            p + "request_latency",
            "Distribution of wall time (in microseconds) for Tensorflow Serving request.",
            ["model_name", "API", "entrypoint"], LATENCY_US)
        self.runtime_latency = Histogram(
            p + "runtime_latency",
            "Distribution of wall time (in microseconds) for Tensorflow runtime.",
            ["model_name", "API", "runtime"], LATENCY_US)
        self.example_counts = Histogram(
            p + "request_example_counts", "The number of tensorflow.Examples per request.",
            ["model"], EXAMPLES)
        self.example_count_total = Counter(
            p + "request_example_count_total", "The total number of tensorflow.Examples.",
            ["model"])
        self.input_batch_size = Histogram(
            b + "input_batch_size", "Tracks the batch size distribution on the inputs.",
            [], BATCH_SIZE)
        self.processed_batch_size = Histogram(
            b + "processed_batch_size", "Tracks the batch size distribution on processing.",
            [], BATCH_SIZE)
        self.padding_size = Histogram(
            b + "padding_size", "Tracks the padding size distribution on batches.",
            ["execution_batch_size"], BATCH_SIZE)
        self.queuing_latency = Histogram(
            b + "queuing_latency",
            "Distribution of wall time spent (in microseconds) in queuing",
            ["thread_pool_name"], QUEUING_US)
        self.wrapped_run_count = Counter(
            b + "wrapped_run_count", "Total count of run calls on the wrapped session")
        self._families: list[Counter | Histogram] = [
            self.request_count, self.request_latency, self.runtime_latency,
            self.example_counts, self.example_count_total, self.input_batch_size,
            self.processed_batch_size, self.padding_size, self.queuing_latency,
            self.wrapped_run_count]

    # -- request path ----------------------------------------------------------------
    def request(self, model: str, api: str, entrypoint: str, status: str,
                seconds: float) -> None:
        """One Predict/Classify/Regress request (TF Serving records latency on OK only)."""
        self.request_count.inc(model, status)
        if status == "OK":
            self.request_latency.observe(seconds * 1e6, model, api, entrypoint)

    def examples(self, model: str, n: int) -> None:
        """tf.Examples in one Classify/Regress request."""
        self.example_counts.observe(n, model)
        self.example_count_total.inc(model, by=n)

    # -- scheduler hooks (see BatchScheduler) ----------------------------------------
    def input_batch(self, size: int, n_tensors: int) -> None:
        # BatchingSession records the 0th dimension once per input tensor.
        self.input_batch_size.observe(size, n=n_tensors)

    def batch(self, tasks, size: int, padded: int, dequeued: float, started: float,
              finished: float) -> None:
        if self.batching:
            self.wrapped_run_count.inc()
            self.processed_batch_size.observe(padded)
            self.padding_size.observe(padded - size, str(padded))
            self.queuing_latency.observe_many(
                [(dequeued - t.enqueued) * 1e6 for t in tasks], self.thread_pool_name)
        # The session Run a request makes: with batching it includes the wait in the
        # batching queue, as BatchingSession::Run does in TF Serving. One lock per
        # (model, API) of the batch, usually one.
        by_series: dict[tuple[str, str], list[float]] = {}
        for t in tasks:
            if t.api:
                since = t.enqueued if self.batching else started
                by_series.setdefault((t.model, t.api), []).append((finished - since) * 1e6)
        for (model, api), values in by_series.items():
            self.runtime_latency.observe_many(values, model, api, RUNTIME)

    def runtime(self, model: str, api: str, seconds: float) -> None:
        self.runtime_latency.observe(seconds * 1e6, model, api, RUNTIME)

    # -- exposition ------------------------------------------------------------------
    def render(self) -> bytes:
        out: list[str] = []
        for f in self._families:
            f.render(out)
        q = BATON_PREFIX + "batch_queue_rows"
        out.append(f"# HELP {q} Rows waiting in batching queues (Baton only).")
        out.append(f"# TYPE {q} gauge")
        for model, n in sorted((self._depth() if self._depth else {}).items()):
            out.append(f"{q}{_labels(['model_name'], [model])} {n}")
        v = BATON_PREFIX + "loaded_versions"
        a = BATON_PREFIX + "model_version_available"
        loaded = sorted((self._loaded() if self._loaded else {}).items())
        out.append(f"# HELP {v} Number of versions loaded and serving (Baton only).")
        out.append(f"# TYPE {v} gauge")
        for model, versions in loaded:
            out.append(f"{v}{_labels(['model_name'], [model])} {len(versions)}")
        out.append(f"# HELP {a} 1 for each loaded version (Baton only).")
        out.append(f"# TYPE {a} gauge")
        for model, versions in loaded:
            for ver in versions:
                out.append(f"{a}{_labels(['model_name', 'version'], [model, str(ver)])} 1")
        self._render_energy(out)
        return ("\n".join(out) + "\n").encode()

    def _render_energy(self, out: list[str]) -> None:
        joules = self.energy.joules()
        requests = self.request_count.total()
        e = BATON_PREFIX + "energy_joules"
        out.append(f"# HELP {e} Energy since the server started, by method (Baton only).")
        out.append(f"# TYPE {e} counter")
        out.append(f"{e}{_labels(['method'], [self.energy.method])} {_number(joules)}")
        r = BATON_PREFIX + "joules_per_1000_requests"
        out.append(f"# HELP {r} Energy since start per 1,000 requests answered (Baton only).")
        out.append(f"# TYPE {r} gauge")
        if requests:
            out.append(f"{r}{_labels(['method'], [self.energy.method])} "
                       f"{_number(joules / requests * 1000)}")
