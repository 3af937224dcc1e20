"""The Prometheus exposition itself: TF Serving's names, buckets and text (no TensorFlow)."""

import pytest

from baton.serving.metrics import LATENCY_US, Metrics


def lines(m):
    return m.render().decode().splitlines()


def test_counters_have_no_total_suffix_and_histograms_are_cumulative():
    m = Metrics()
    m.request("m", "Predict", "GRPC", "OK", 15e-6)  # 15 us
    m.request("m", "Predict", "GRPC", "OK", 40e-6)
    m.request("m", "Predict", "GRPC", "NOT_FOUND", 1.0)  # errors: counted, no latency
    out = lines(m)
    assert "# TYPE :tensorflow:serving:request_count counter" in out
    assert ':tensorflow:serving:request_count{model_name="m",status="OK"} 2' in out
    assert ':tensorflow:serving:request_count{model_name="m",status="NOT_FOUND"} 1' in out
    assert not any("request_count_total" in ln for ln in out)
    p = ':tensorflow:serving:request_latency_bucket{model_name="m",API="Predict",entrypoint="GRPC"'
    assert f'{p},le="10"}} 0' in out
    assert f'{p},le="18"}} 1' in out  # TF Serving's Exponential(10, 1.8, 33) bounds
    assert f'{p},le="32.4"}} 1' in out
    assert f'{p},le="58.32"}} 2' in out
    assert f'{p},le="+Inf"}} 2' in out
    assert sum(1 for ln in out if ln.startswith(p)) == len(LATENCY_US) + 1
    assert (':tensorflow:serving:request_latency_count{model_name="m",API="Predict",'
            'entrypoint="GRPC"} 2') in out


def test_label_values_are_escaped_and_families_always_typed():
    m = Metrics(loaded=lambda: {'a"b\\c': [3]}, depth=lambda: {"x": 5})
    m.examples('a"b\\c', 3)
    out = lines(m)
    assert ':tensorflow:serving:request_example_count_total{model="a\\"b\\\\c"} 3' in out
    assert 'baton_serving_model_version_available{model_name="a\\"b\\\\c",version="3"} 1' \
        in out
    assert 'baton_serving_batch_queue_rows{model_name="x"} 5' in out
    for family in ("batching_session:queuing_latency histogram",
                   "batching_session:wrapped_run_count counter",
                   "runtime_latency histogram"):
        assert f"# TYPE :tensorflow:serving:{family}" in out


def test_the_exposition_parses_as_a_prometheus_scraper_reads_it():
    from prometheus_client.parser import text_string_to_metric_families

    m = Metrics(loaded=lambda: {"m": [1, 2]}, depth=lambda: {"m": 0})
    m.request("m", "Predict", "GRPC", "OK", 15e-6)
    m.examples("m", 4)
    families = {f.name: f for f in text_string_to_metric_families(m.render().decode())}
    count = families[":tensorflow:serving:request_count"]
    assert count.type == "counter"
    # (the client library's parser names counter samples `_total` itself; the text has none)
    assert [(s.labels, s.value) for s in count.samples] == [({"model_name": "m", "status": "OK"}, 1.0)]
    latency = families[":tensorflow:serving:request_latency"]
    assert latency.type == "histogram"
    assert any(s.name.endswith("_count") and s.value == 1.0 for s in latency.samples)


def test_energy_since_start_and_per_1000_requests_are_exported():
    from prometheus_client.parser import text_string_to_metric_families

    m = Metrics()
    families = {f.name: f for f in text_string_to_metric_families(m.render().decode())}
    (energy,) = families["baton_serving_energy_joules"].samples
    assert energy.labels["method"] in ("rapl", "green-algorithms") and energy.value >= 0
    assert not families["baton_serving_joules_per_1000_requests"].samples  # no request yet
    sum(i * i for i in range(300_000))  # some CPU time, as requests would take
    for _ in range(4):
        m.request("m", "Predict", "GRPC", "OK", 15e-6)
    families = {f.name: f for f in text_string_to_metric_families(m.render().decode())}
    (energy,) = families["baton_serving_energy_joules"].samples
    (per,) = families["baton_serving_joules_per_1000_requests"].samples
    assert energy.value > 0
    assert per.value == pytest.approx(energy.value / 4 * 1000, rel=0.05)
