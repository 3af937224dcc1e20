"""strategies.probe: the candidates of `workers: auto`, their figures and the choice (no TF)."""

from __future__ import annotations

import pytest

from baton import energy
from baton.strategies import probe
from baton.strategies.probe import Candidate, Measurement

ONE, TWO, THREE = Candidate("one_device", 1), Candidate("multi_worker_mirrored", 2), Candidate(
    "multi_worker_mirrored", 3)


def _m(cand: Candidate, ex_s: float, j: float, error: str = "") -> Measurement:
    return Measurement(cand, steps=0 if error else 30, seconds=1.0, examples_per_sec=ex_s,
                       j_per_example=j, error=error)


def test_candidates_are_one_process_then_two_to_max_workers() -> None:
    assert probe.candidates(1) == [ONE]
    assert probe.candidates(3) == [ONE, TWO, THREE]
    with pytest.raises(ValueError, match="max_workers must be >= 1. Received: max_workers=0"):
        probe.candidates(0)


def test_speed_picks_the_most_examples_per_second_and_says_why() -> None:
    best, reason = probe.choose([_m(ONE, 14200, 0.002), _m(TWO, 6700, 0.001)], "speed")
    assert best.candidate == ONE
    assert reason == "picked 1 worker: 14,200 ex/s vs 2 workers 6,700 ex/s (0.47x)"
    best, _ = probe.choose([_m(ONE, 5000, 0.002), _m(TWO, 9000, 0.003)], "speed")
    assert best.candidate == TWO


def test_energy_picks_the_fewest_joules_per_example() -> None:
    measured = [_m(ONE, 14200, 0.004), _m(TWO, 16000, 0.002), _m(THREE, 17000, 0.003)]
    best, reason = probe.choose(measured, "energy")
    assert best.candidate == TWO
    assert reason.startswith("picked 2 workers: 0.002 J/example (green-algorithms) vs 1 worker "
                             "0.004 J/example (2.00x)")
    assert probe.choose(measured, "speed")[0].candidate == THREE


def test_ties_go_to_fewer_workers_and_failed_probes_are_named() -> None:
    assert probe.choose([_m(TWO, 100, 1.0), _m(ONE, 100, 1.0)], "speed")[0].candidate == ONE
    assert probe.choose([_m(TWO, 100, 1.0), _m(ONE, 100, 1.0)], "energy")[0].candidate == ONE
    best, reason = probe.choose([_m(ONE, 100, 1.0), _m(TWO, 0, 0, error="probe cluster failed")],
                                "speed")
    assert best.candidate == ONE and reason.endswith("; 2 workers failed (probe cluster failed)")
    with pytest.raises(ValueError, match="every topology probe failed"):
        probe.choose([_m(ONE, 0, 0, error="boom")], "speed")
    with pytest.raises(ValueError, match="Received: objective='cost'"):
        probe.choose([_m(ONE, 1, 1)], "cost")


def test_measure_estimates_energy_from_every_tasks_cpu_seconds() -> None:
    windows = [
        {"steps": 30, "seconds": 0.5, "cpu_s": 0.8, "peak_rss_mb": 1024},
        {"steps": 30, "seconds": 0.5, "cpu_s": 0.6, "peak_rss_mb": 1024},
    ]
    m = probe.measure(TWO, windows, 64, pue=1.5)
    assert m.ok and m.examples_per_sec == pytest.approx(30 * 64 / 0.5)
    assert m.cpu_s == pytest.approx(1.4)
    expected = (energy.estimate_joules(0.8, 0.5, 1.0) + energy.estimate_joules(0.6, 0.5, 1.0)) * 1.5
    assert m.energy_j == pytest.approx(expected) and m.energy_method == energy.ESTIMATE
    assert m.j_per_example == pytest.approx(expected / (30 * 64))
    rapl = probe.measure(TWO, windows, 64, pue=1.0, rapl_j=12.0)
    assert rapl.energy_j == 12.0 and rapl.energy_method == energy.RAPL
    assert not probe.measure(ONE, [], 64).ok
    row = probe.measure(ONE, windows[:1], 64).as_dict()
    assert row["workers"] == 1 and row["examples_per_sec"] == 3840.0


def test_table_marks_the_choice() -> None:
    measured = [_m(ONE, 14200, 0.002), _m(TWO, 6700, 0.001)]
    lines = probe.table(measured, measured[0])
    assert lines[0].split()[:3] == ["topology", "steps", "ex/s"]
    assert lines[1].endswith("<- chosen") and "14,200" in lines[1]
    assert "6,700" in lines[2] and "chosen" not in lines[2]


def test_rapl_sampler_interpolates_the_joules_of_a_window(tmp_path) -> None:
    zone = tmp_path / "intel-rapl:0"
    zone.mkdir()
    (zone / "name").write_text("package-0\n")
    (zone / "max_energy_range_uj").write_text("262143328850\n")
    (zone / "energy_uj").write_text("1000000\n")
    counter = energy.RaplCounter.open(tmp_path)
    assert counter is not None
    sampler = probe.RaplSampler(counter)
    t0 = sampler._samples[0][0]
    (zone / "energy_uj").write_text("11000000\n")  # +10 J
    sampler._samples.append((t0 + 10.0, counter.joules_since(sampler._start)))
    assert sampler.joules_between(t0 + 2.0, t0 + 7.0) == pytest.approx(5.0)
    assert sampler.joules_between(t0 - 1.0, t0 + 20.0) == pytest.approx(10.0)
