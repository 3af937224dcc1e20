"""statistics: per-split feature statistics on Beam, inferred schema, table and HTML."""

from __future__ import annotations

import json

import numpy as np
import pytest

from baton.pipeline.dataplane.statistics.render import html_path, statistics_table
from baton.pipeline.testing import run_stage
from tests.pipeline.dataplane.helpers import penguins


@pytest.fixture(scope="module")
def stats(tmp_path_factory):
    root = tmp_path_factory.mktemp("stats")
    art = penguins(root)
    out, metrics = run_stage("statistics", {}, {"examples": art["examples"]}, root)
    return out, metrics


def test_statistics_match_the_csv(stats):
    import csv

    from baton.pipeline.datasets import PENGUINS_CSV

    out, metrics = stats
    data = json.loads((out["statistics"] / "statistics.json").read_text())
    assert metrics["rows"] == 344
    # 344 rows: Beam stays in this process whatever the cores (beam_runner.plan_workers)
    assert (metrics["beam_workers"], metrics["beam_running_mode"]) == (1, "in_memory")
    assert metrics["beam_workers_reason"].startswith("inventory: ")
    rows = list(csv.DictReader(PENGUINS_CSV.open()))
    mass = np.array([float(r["body_mass_g"]) for r in rows if r["body_mass_g"] != "NA"])
    splits = data["splits"]
    count = sum(s["features"]["body_mass_g"]["count"] for s in splits.values())
    missing = sum(s["features"]["body_mass_g"]["missing"] for s in splits.values())
    assert (count, missing) == (len(mass), 2)
    assert min(s["features"]["body_mass_g"]["min"] for s in splits.values()) == mass.min()
    train = splits["train"]["features"]["body_mass_g"]
    assert train["quantiles"]["0.00"] == train["min"] and train["quantiles"]["1.00"] == train["max"]
    assert sum(train["histogram"]["counts"]) == pytest.approx(train["count"])
    island = splits["train"]["features"]["island"]
    assert island["distinct"] == 3 and sum(c for _, c in island["top"]) == island["count"]


def test_inferred_schema_has_types_presence_and_domains(stats):
    out, _ = stats
    schema = json.loads((out["schema"] / "schema.json").read_text())
    f = schema["features"]
    assert f["island"]["domain"]["values"] == ["Biscoe", "Dream", "Torgersen"]
    assert f["body_mass_g"]["type"] == "float32" and "min" in f["body_mass_g"]["domain"]
    assert 0.0 < f["sex"]["presence"]["max_missing_fraction"] < 0.2


def test_table_and_html_render(stats):
    out, _ = stats
    table = statistics_table(out["statistics"])
    assert "split train" in table and "body_mass_g" in table and "Biscoe" in table
    page = html_path(out["statistics"]).read_text()
    assert page.count("<svg") >= 16 and "flipper_length_mm" in page
    assert (out["statistics"] / "statistics.txt").read_text().strip() == table
