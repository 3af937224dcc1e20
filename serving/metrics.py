"""Prometheus metrics with TF Serving's metric names, on a per-server registry.

Names follow tensorflow_model_server's Prometheus export (`:tensorflow:serving:...`,
latencies in microseconds) so existing dashboards keep working; prometheus_client adds
`_total` to counters. Queue depth and loaded versions are read at scrape time from the
scheduler and the manager, so they cost nothing per request. Labelled children are
cached because `.labels()` is the expensive part of an update.
"""

from __future__ import annotations

from collections.abc import Callable

_LATENCY_US = tuple(10.0 * 1.8 ** i for i in range(33))  # 10us .. ~1.5e9us like TF Serving's
_BATCH = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)


class Metrics:
    """All server metrics; `render()` returns the text exposition."""

    def __init__(self, depth: Callable[[], dict[str, int]] | None = None,
                 loaded: Callable[[], dict[str, list[int]]] | None = None):
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self._requests = Counter(":tensorflow:serving:request_count",
                                 "Total requests by model, API, entrypoint and status.",
                                 ["model_name", "API", "entrypoint", "status"], registry=r)
        self._latency = Histogram(":tensorflow:serving:request_latency",
                                  "End-to-end request latency in microseconds.",
                                  ["model_name", "API", "entrypoint"], buckets=_LATENCY_US,
                                  registry=r)
        self._runtime = Histogram(":tensorflow:serving:runtime_latency",
                                  "Signature (model) execution latency in microseconds.",
                                  ["model_name"], buckets=_LATENCY_US, registry=r)
        self._batch = Histogram(":tensorflow:serving:batching_session:processed_batch_size",
                                "Rows per executed batch, after padding.",
                                ["model_name"], buckets=_BATCH, registry=r)
        self._input = Histogram(":tensorflow:serving:batching_session:input_batch_size",
                                "Rows per executed batch, before padding.",
                                ["model_name"], buckets=_BATCH, registry=r)
        self._children: dict[tuple, object] = {}
        r.register(_StateCollector(depth, loaded))

    def _child(self, metric, *labels):
        key = (id(metric),) + labels
        c = self._children.get(key)
        if c is None:
            c = self._children[key] = metric.labels(*labels)
        return c

    def request(self, model: str, api: str, entrypoint: str, status: str,
                seconds: float) -> None:
        self._child(self._requests, model, api, entrypoint, status).inc()
        self._child(self._latency, model, api, entrypoint).observe(seconds * 1e6)

    def batch(self, model: str, size: int, padded: int, seconds: float) -> None:
        self._child(self._runtime, model).observe(seconds * 1e6)
        self._child(self._batch, model).observe(padded)
        self._child(self._input, model).observe(size)

    def render(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


class _StateCollector:
    def __init__(self, depth, loaded):
        self._depth = depth
        self._loaded = loaded

    def describe(self):
        return []

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        q = GaugeMetricFamily(":tensorflow:serving:batching_session:queue_depth",
                              "Rows waiting in batching queues.", labels=["model_name"])
        for model, n in sorted((self._depth() if self._depth else {}).items()):
            q.add_metric([model], n)
        yield q
        v = GaugeMetricFamily(":tensorflow:serving:loaded_versions",
                              "Number of versions loaded and serving.", labels=["model_name"])
        a = GaugeMetricFamily(":tensorflow:serving:model_version_available",
                              "1 for each loaded version.", labels=["model_name", "version"])
        for model, versions in sorted((self._loaded() if self._loaded else {}).items()):
            v.add_metric([model], len(versions))
            for ver in versions:
                a.add_metric([model, str(ver)], 1)
        yield v
        yield a
