"""The walking skeleton end to end: raw CSV to a pushed, servable model, then the cache."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from baton.pipeline import lineage

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def baton(cwd: Path, *args: str, timeout: float = 600,
          python_flags: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run([sys.executable, *python_flags, "-m", "baton.pipeline.cli", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def newest_run(cwd: Path, pipeline: str) -> Path:
    return sorted((cwd / "runs" / pipeline).glob("2*"))[-1]


def test_default_pipeline_then_full_cache_hit(tmp_path):
    res = baton(tmp_path, "run")
    assert res.returncode == 0, res.stderr[-3000:]
    run_dir = newest_run(tmp_path, "penguins")
    metrics = json.loads((run_dir / "evaluate" / "evaluation" / "metrics.json").read_text())
    assert metrics["overall"]["accuracy"] >= 0.9
    pushed = json.loads((run_dir / "push" / "pushed" / "push.json").read_text())
    assert pushed["pushed"] and (Path(pushed["path"]) / "saved_model.pb").is_file()
    assert Path(pushed["path"]).parent == tmp_path / "models" / "penguins"
    record = json.loads((run_dir / "run.json").read_text())
    assert [s["status"] for s in record["stages"]] == ["succeeded"] * len(record["stages"])
    assert record["totals"]["cpu_s"] > 0 and record["totals"]["energy_j"] > 0
    # energy per example of the train stage, its method named (no readable RAPL here: estimate)
    (train,) = [s for s in record["stages"] if s["type"] == "train"]
    u = train["usage"]
    assert u["energy_method"] in ("rapl", "green-algorithms") and u["co2e_g"] > 0
    # (energy_j is recorded to 0.1 J, j_per_example from the unrounded figure)
    assert u["j_per_example"] == pytest.approx(u["energy_j"] / train["metrics"]["examples_trained"],
                                               rel=0.01)
    assert record["totals"]["co2e_g"] == pytest.approx(record["totals"]["energy_j"] / 3.6e6 * 475,
                                                       rel=1e-3)

    res = baton(tmp_path, "run", python_flags=("-X", "importtime"))
    assert res.returncode == 0, res.stderr[-3000:]
    again = newest_run(tmp_path, "penguins")
    statuses = [s["status"] for s in json.loads((again / "run.json").read_text())["stages"]]
    assert statuses == ["cached"] * len(statuses)
    # a fully cached run is bookkeeping: it never imports TensorFlow (3-4 s of CPU on its own)
    imported = {line.rsplit("|", 1)[-1].strip() for line in res.stderr.splitlines()
                if line.startswith("import time:")}
    assert "baton.pipeline.runner" in imported
    assert not imported & {"tensorflow", "keras", "apache_beam"}, sorted(
        imported & {"tensorflow", "keras", "apache_beam"})
    # the cached run is complete on its own: the pushed version did not change
    assert json.loads((again / "push" / "pushed" / "push.json").read_text())["version"] == pushed["version"]
    versions = [p.name for p in (tmp_path / "models" / "penguins").iterdir() if p.name.isdigit()]
    assert versions == [str(pushed["version"])]

    res = baton(tmp_path, "inspect", str(again))
    assert res.returncode == 0 and "cached from" in res.stdout
    res = baton(tmp_path, "inspect", str(run_dir))
    assert "cost (carbon intensity 475 gCO2e/kWh, PUE 1" in res.stdout
    assert any(line.split()[:2] == ["train", u["energy_method"]] for line in res.stdout.splitlines())


SMALL = """\
pipeline: mini
stages:
  - name: ingest
    type: ingest
    config: {source: csv, path: data/penguins.csv, label: species}
  - name: transform
    type: transform
    inputs: {examples: ingest.examples}
  - name: train
    type: train
    inputs: {transformed: transform.transformed, transform_graph: transform.transform_graph}
    config: {epochs: 2}
"""


def test_editing_the_data_reruns_ingest_and_downstream_only(tmp_path):
    """In-process (the CLI is the test above): the cache, not the process, is under test."""
    from baton.pipeline.context import RunOptions
    from baton.pipeline.plan import plan
    from baton.pipeline.runner import run_pipeline
    from baton.pipeline.spec import load_spec

    (tmp_path / "data").mkdir()
    csv = tmp_path / "data" / "penguins.csv"
    shutil.copy(ROOT / "pipeline" / "data" / "penguins.csv", csv)
    (tmp_path / "mini.yaml").write_text(SMALL.replace("data/penguins.csv", str(csv)))

    def run() -> Path:
        result = run_pipeline(plan(load_spec(tmp_path / "mini.yaml")), RunOptions(quiet=True),
                              runs_dir=tmp_path / "runs", stream=io.StringIO())
        assert result.ok, result.error
        return result.run_dir

    first = run()
    lines = csv.read_text().splitlines()
    lines[1] = lines[1].replace("39.1", "39.2")  # one measurement corrected
    csv.write_text("\n".join(lines) + "\n")
    run_dir = run()
    assert run_dir != first
    hits = {s: lineage.read(run_dir / s)["cache"]["hit"] for s in ("ingest", "transform", "train")}
    assert hits == {"ingest": False, "transform": False, "train": False}
