"""Energy and carbon: RAPL zones (a fake powercap tree), the estimate, the spec's `energy:`
settings, and what a run records and `baton inspect` shows."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from baton import energy
from baton.pipeline.accounting import Meter
from baton.pipeline.registry import stage


def _zone(root: Path, name: str, label: str, uj: int, span: int = 10_000_000) -> Path:
    z = root / name
    z.mkdir(parents=True)
    (z / "name").write_text(label + "\n")
    (z / "energy_uj").write_text(f"{uj}\n")
    (z / "max_energy_range_uj").write_text(f"{span}\n")
    return z


def _powercap(root: Path) -> Path:
    _zone(root, "intel-rapl:0", "package-0", 1_000_000)
    _zone(root, "intel-rapl:0:0", "core", 500_000)  # inside package-0: not counted twice
    _zone(root, "intel-rapl:0:1", "dram", 200_000)  # DRAM is outside the package: counted
    _zone(root, "intel-rapl:1", "package-1", 9_000_000)
    (root / "intel-rapl:2").mkdir()  # no readable counter: skipped
    return root


def test_rapl_zones_deltas_and_wrap_around(tmp_path) -> None:
    root = _powercap(tmp_path / "powercap")
    counter = energy.RaplCounter.open(root)
    assert counter is not None
    assert [z.name for z in counter.zones] == ["intel-rapl:0", "intel-rapl:0:1", "intel-rapl:1"]
    start = counter.read()
    (root / "intel-rapl:0" / "energy_uj").write_text("3000000\n")  # +2 J
    (root / "intel-rapl:0:1" / "energy_uj").write_text("700000\n")  # +0.5 J
    (root / "intel-rapl:1" / "energy_uj").write_text("500000\n")  # wrapped: +1.5 J
    assert counter.joules_since(start) == pytest.approx(4.0)
    assert energy.RaplCounter.open(tmp_path / "absent") is None


def test_method_choice_and_rapl_required_without_counters(tmp_path) -> None:
    root = _powercap(tmp_path / "powercap")
    assert energy.open_counter(energy.EnergyConfig(), root) is not None
    assert energy.open_counter(energy.EnergyConfig(method="estimate"), root) is None
    assert energy.open_counter(energy.EnergyConfig(), tmp_path / "none") is None  # auto: estimate
    with pytest.raises(ValueError, match=r"energy.method: rapl, but no readable RAPL counter"):
        energy.open_counter(energy.EnergyConfig(method="rapl"), tmp_path / "none")


@pytest.mark.parametrize("field,value,received", [
    ("carbon_intensity", -1.0, "-1.0"),
    ("pue", 0.9, "0.9"),
    ("carbon_intensity", float("inf"), "inf (not a finite number)"),
    ("carbon_intensity", float("nan"), "nan (not a finite number)"),
    ("pue", float("inf"), "inf (not a finite number)"),
    ("pue", float("nan"), "nan (not a finite number)"),
])
def test_bad_settings_name_the_field_and_value(field, value, received) -> None:
    with pytest.raises(ValueError, match=rf"^energy\.{field}: must be a finite number >= .*"
                                         rf"Received: {re.escape(received)}$"):
        energy.EnergyConfig(**{field: value})


def test_every_bad_setting_is_reported_at_once() -> None:
    with pytest.raises(ValueError) as caught:
        energy.EnergyConfig(carbon_intensity=float("inf"), pue=0.5)
    assert [e.path for e in caught.value.errors] == ["energy.carbon_intensity", "energy.pue"]


def test_meter_records_rapl_or_estimate_times_pue_and_carbon(tmp_path) -> None:
    root = _powercap(tmp_path / "powercap")
    cfg = energy.EnergyConfig(carbon_intensity=100.0, pue=1.5)
    with Meter(config=cfg, rapl=energy.RaplCounter.open(root)) as m:
        (root / "intel-rapl:0" / "energy_uj").write_text("4600000\n")  # +3.6 J over the block
    u = m.usage.as_dict()
    assert u["energy_method"] == "rapl" and u["energy_j"] == pytest.approx(5.4, abs=0.05)
    assert u["co2e_g"] == pytest.approx(5.4 / 3.6e6 * 100, rel=1e-2)
    with Meter(config=cfg) as m:
        sum(i * i for i in range(200_000))
    u = m.usage
    assert u.energy_method == "green-algorithms"
    expected = energy.estimate_joules(u.cpu_s, u.wall_s, u.peak_rss_mb / 1024) * 1.5
    assert u.energy_j == pytest.approx(expected) and u.energy_j > 0


SPEC = """\
pipeline: cost
energy: {energy}
stages:
  - name: source
    type: tests.pipeline.fake_stages:source
    config: {{path: data.txt}}
  - name: count
    type: tests.pipeline.fake_stages:count
    inputs: {{lines: source.lines}}
"""


def _baton(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    root = Path(__file__).resolve().parents[1]
    return subprocess.run([sys.executable, "-m", "baton", *args], cwd=cwd, capture_output=True,
                          text=True, env={**__import__("os").environ, "PYTHONPATH": str(root)})


@pytest.mark.parametrize("settings,error", [
    ("{carbon_intensity: -5}", "energy.carbon_intensity: must be a finite number >= 0 "
                               "(gCO2e per kWh). Received: -5.0"),
    ("{pue: 0.5}", "energy.pue: must be a finite number >= 1 (facility power / IT power). "
                   "Received: 0.5"),
    # YAML's infinities and NaN are floats: refused, not carried into every gCO2e figure
    ("{carbon_intensity: .inf}", "energy.carbon_intensity: must be a finite number >= 0 "
                                 "(gCO2e per kWh). Received: inf (not a finite number)"),
    ("{carbon_intensity: .nan}", "energy.carbon_intensity: must be a finite number >= 0 "
                                 "(gCO2e per kWh). Received: nan (not a finite number)"),
    ("{pue: .inf}", "energy.pue: must be a finite number >= 1 (facility power / IT power). "
                    "Received: inf (not a finite number)"),
    ("{method: watts}", "energy.method: must be one of"),
])
def test_bad_energy_settings_exit_2_before_any_stage(tmp_path, settings, error) -> None:
    (tmp_path / "data.txt").write_text("a\nb\n")
    (tmp_path / "spec.yaml").write_text(SPEC.format(energy=settings))
    res = _baton(tmp_path, "run", "spec.yaml")
    assert res.returncode == 2, res.stderr
    assert error in res.stderr and "spec.yaml:2" in res.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("check", [False, True], ids=["run", "check"])
def test_rapl_required_where_unreadable_exits_2_before_any_stage(tmp_path, check) -> None:
    """`--check` answers as the run would: both exit 2 with the same message."""
    if energy.RaplCounter.open() is not None:
        pytest.skip("this machine has readable RAPL counters")
    (tmp_path / "data.txt").write_text("a\nb\n")
    (tmp_path / "spec.yaml").write_text(SPEC.format(energy="{method: rapl}"))
    res = _baton(tmp_path, "run", "spec.yaml", *(["--check"] if check else []))
    assert res.returncode == 2, res.stdout + res.stderr
    assert "spec.yaml:2: energy.method: rapl, but no readable RAPL" in res.stderr
    assert "spec ok" not in res.stdout
    assert not (tmp_path / "runs").exists()


def test_a_run_records_carbon_at_the_spec_intensity_and_inspect_shows_the_cost(tmp_path) -> None:
    (tmp_path / "data.txt").write_text("a\nb\n")
    (tmp_path / "spec.yaml").write_text(SPEC.format(energy="{carbon_intensity: 100, pue: 1.2}"))
    res = _baton(tmp_path, "run", "spec.yaml")
    assert res.returncode == 0, res.stderr
    (run_dir,) = [d for d in (tmp_path / "runs" / "cost").iterdir() if (d / "run.json").is_file()]
    record = json.loads((run_dir / "run.json").read_text())
    assert record["energy"] == {"method": "auto", "carbon_intensity": 100.0, "pue": 1.2}
    t = record["totals"]
    assert t["co2e_g"] == pytest.approx(t["energy_j"] / 3.6e6 * 100, rel=1e-2, abs=1e-4)
    lineage = json.loads((run_dir / "count" / "lineage.json").read_text())
    assert lineage["usage"]["energy_method"] == t["energy_method"] == "green-algorithms"
    shown = _baton(tmp_path, "inspect", str(run_dir)).stdout
    assert "cost (carbon intensity 100 gCO2e/kWh, PUE 1.2; cached stages cost nothing):" in shown
    assert any(line.split()[:2] == ["run", "green-algorithms"] for line in shown.splitlines())
    assert "gCO2e" in shown.split("cost (")[0]  # and a column in the summary table


def _cost_rows(shown: str) -> dict[str, list[str]]:
    """The cost table's rows by stage label: 'run' and e.g. 'bad (failed)'."""
    table = shown.split("cost (", 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    rows = {}
    for line in table:
        cells = re.split(r"\s{2,}", line.strip())
        rows[cells[0]] = cells[1:]
    return rows


@stage(inputs={"lines": True}, outputs=("never",))
def burn_then_fail(ctx, config: dict) -> None:
    """Spends about 0.4 CPU seconds (some 5 J estimated) before failing, as a training stage
    that loses a worker does: joules a failed stage must still account for."""
    import time

    from baton.errors import StageError

    start = time.process_time()
    while time.process_time() - start < 0.4:
        sum(i * i for i in range(10_000))
    raise StageError("a worker was lost")


def _run_after_source(tmp_path, name: str, stage_fn: str):  # noqa: ANN001, ANN202
    """`baton run` of SPEC plus a stage `name` of this module's `stage_fn`: (the process, the
    run directory, its run.json)."""
    (tmp_path / "data.txt").write_text("a\nb\n")
    (tmp_path / "spec.yaml").write_text(SPEC.format(energy="{carbon_intensity: 100}") + (
        f"  - name: {name}\n    type: tests.test_energy:{stage_fn}\n"
        "    inputs: {lines: source.lines}\n"))
    res = _baton(tmp_path, "run", "spec.yaml", "-q")
    (run_dir,) = [d for d in (tmp_path / "runs" / "cost").iterdir() if (d / "run.json").is_file()]
    return res, run_dir, json.loads((run_dir / "run.json").read_text())


def test_a_failed_stage_has_a_cost_row_and_the_rows_add_up_to_the_run(tmp_path) -> None:
    res, run_dir, record = _run_after_source(tmp_path, "bad", "burn_then_fail")
    assert res.returncode == 1 and "a worker was lost" in res.stderr, res.stderr
    failed = record["stages"][-1]
    assert failed["status"] == "failed" and failed["usage"]["energy_j"] >= 2
    assert json.loads((run_dir / "bad.failed.json").read_text())["usage"] == failed["usage"]
    shown = _baton(tmp_path, "inspect", str(run_dir)).stdout
    rows = _cost_rows(shown)
    assert list(rows) == ["source", "count", "bad (failed)", "run"]
    assert rows["bad (failed)"][1] == f"{failed['usage']['energy_j']:.1f}"
    # each row and the total are rounded to 0.1 J from unrounded figures: 4 roundings apart
    stages = sum(float(r[1]) for label, r in rows.items() if label != "run")
    assert stages == pytest.approx(float(rows["run"][1]), abs=0.21)
    assert f"bad: failed; its record (inputs, config, usage): {run_dir}/bad.failed.json" in shown


@stage(inputs={"lines": True}, outputs=("never",))
def burn_then_interrupted(ctx, config: dict) -> None:
    """Spends about 0.4 CPU seconds, then is stopped as Ctrl-C (or SIGTERM's Preempted, a
    KeyboardInterrupt) stops a stage."""
    import time

    start = time.process_time()
    while time.process_time() - start < 0.4:
        sum(i * i for i in range(10_000))
    raise KeyboardInterrupt


def test_an_interrupted_stage_keeps_its_energy_in_the_run_record(tmp_path) -> None:
    """A run stopped mid-stage (Ctrl-C, a preempted node's SIGTERM) records the stage as
    interrupted with what it spent: the run's totals had left it out."""
    res, run_dir, record = _run_after_source(tmp_path, "stopped", "burn_then_interrupted")
    assert res.returncode == 130, res.stderr  # as Ctrl-C ends a run
    assert record["status"] == "interrupted"
    stopped = record["stages"][-1]
    assert stopped["name"] == "stopped" and stopped["status"] == "interrupted"
    # the stage burns 0.4 s by time.process_time(); the record reads os.times(), which counts
    # whole clock ticks (10 ms), so a tick or two may fall on either side
    assert stopped["usage"]["energy_j"] >= 2 and stopped["usage"]["cpu_s"] >= 0.38
    assert record["totals"]["energy_j"] == pytest.approx(
        sum(s["usage"]["energy_j"] for s in record["stages"]), abs=0.2)
    assert not list(run_dir.glob(".tmp*"))  # its partial outputs are gone
    rows = _cost_rows(_baton(tmp_path, "inspect", str(run_dir)).stdout)
    assert list(rows) == ["source", "count", "stopped (interrupted)", "run"]
