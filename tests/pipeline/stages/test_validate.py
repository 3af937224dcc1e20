"""validate: anomalies of statistics against a schema; fail unless allowed."""

from __future__ import annotations

import copy
import json

import pytest

from baton.errors import StageError
from baton.pipeline.dataplane.statistics.validation import check
from baton.pipeline.testing import run_stage
from tests.pipeline.dataplane.helpers import penguins


@pytest.fixture(scope="module")
def stats(tmp_path_factory):
    root = tmp_path_factory.mktemp("validate")
    out, _ = run_stage("statistics", {}, {"examples": penguins(root)["examples"]}, root)
    data = json.loads((out["statistics"] / "statistics.json").read_text())
    schema = json.loads((out["schema"] / "schema.json").read_text())
    return out, data, schema


def _kinds(data, schema, **kw):
    opts = {"drift_threshold": 0.1, "max_unseen_fraction": 0.0, "range_tolerance": 0.1} | kw
    return sorted({(a.column, a.kind) for a in check(data, schema, **opts)})


def test_penguins_eval_matches_the_train_schema(stats):
    _, data, schema = stats
    assert _kinds(data, schema) == []


def test_each_anomaly_kind_is_detected(stats):
    _, data, schema = stats
    bad = copy.deepcopy(data)
    feats = bad["splits"]["eval"]["features"]
    del feats["year"]  # missing column
    feats["colour"] = copy.deepcopy(feats["island"])  # extra column
    feats["sex"]["type"] = "float32"  # type drift
    feats["island"]["values"]["Atlantis"] = 50  # value outside the domain
    feats["island"]["count"] += 50
    feats["bill_depth_mm"]["inf"] = 2  # non-finite
    feats["body_mass_g"]["missing"] = 30  # too many missing
    feats["body_mass_g"]["max"] = 1e6  # out of domain
    q = feats["flipper_length_mm"]["quantiles"]
    feats["flipper_length_mm"]["quantiles"] = {k: v + 40 for k, v in q.items()}  # drift
    found = _kinds(bad, schema)
    assert found == sorted([
        ("year", "missing_column"), ("colour", "extra_column"), ("sex", "type_mismatch"),
        ("island", "out_of_domain"), ("island", "drift"), ("bill_depth_mm", "non_finite"),
        ("body_mass_g", "too_many_missing"), ("body_mass_g", "out_of_domain"),
        ("flipper_length_mm", "drift")])


def test_stage_fails_unless_allowed_and_writes_report(stats, tmp_path):
    out, data, schema = stats
    bad = copy.deepcopy(data)
    bad["splits"]["eval"]["features"]["bill_depth_mm"]["nan"] = 3
    (tmp_path / "stats.json").write_text(json.dumps(bad))
    stats_dir = tmp_path / "s"
    stats_dir.mkdir()
    (stats_dir / "statistics.json").write_text(json.dumps(bad))
    inputs = {"statistics": stats_dir, "schema": out["schema"]}
    with pytest.raises(StageError, match=r"1 anomalies not allowed: \[eval\] bill_depth_mm: "
                                         r"non_finite.*allow: \[non_finite\]"):
        run_stage("validate", {}, inputs, tmp_path)
    res, m = run_stage("validate", {"allow": ["non_finite"]}, inputs, tmp_path, run_id="r2")
    report = json.loads((res["anomalies"] / "anomalies.json").read_text())
    assert m == {"anomalies": 1, "blocking": 0, "warnings": 0, "kinds": "non_finite:1"}
    assert report["ok"] is True
    assert report["anomalies"][0]["kind"] == "non_finite"


def test_unknown_allowed_kind_is_a_config_error(tmp_path):
    from baton.configs import ConfigError

    with pytest.raises(ConfigError, match="did you mean 'drift'"):
        run_stage("validate", {"allow": ["drfit"]}, {"statistics": tmp_path, "schema": tmp_path},
                  tmp_path)


def test_a_curated_schema_file_is_part_of_the_cache_key(tmp_path):
    from baton.configs import build_config
    from baton.pipeline.stages import validate

    cfg = build_config(validate.Config, {"schema_path": "schemas/schema.json"}, "validate")
    assert validate.external_inputs(cfg, tmp_path) == [tmp_path / "schemas" / "schema.json"]
    assert validate.external_inputs(build_config(validate.Config, {}, "validate"), tmp_path) == []


def _wide_table(path, rows=569, columns=30, seed=0):
    """A breast-cancer-shaped table: 569 rows, 30 positive numeric columns, a 2-class label."""
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.lognormal(0.0, 0.5, size=(rows, columns))
    label = np.where(x[:, 0] > 1.0, "M", "B")
    head = ",".join([*(f"f{i}" for i in range(columns)), "diagnosis"])
    body = "\n".join(",".join([*(f"{v:.5f}" for v in r), lab]) for r, lab in zip(x, label,
                                                                                 strict=True))
    path.write_text(head + "\n" + body + "\n")


def test_inferred_numeric_ranges_warn_and_a_curated_schema_blocks(tmp_path):
    """The default ingest -> statistics -> validate on a 569-row, 30-column numeric table: eval
    values past train's min/max are warnings (TFDV infers no numeric domain), not a failure;
    the same domains in a curated schema_path block; string and type checks still block."""
    _wide_table(tmp_path / "wide.csv")
    ing, _ = run_stage("ingest", {"source": "csv", "path": "wide.csv", "label": "diagnosis"}, {},
                       tmp_path)
    st, _ = run_stage("statistics", {}, {"examples": ing["examples"]}, tmp_path)
    inputs = {"statistics": st["statistics"], "schema": st["schema"]}
    res, m = run_stage("validate", {}, inputs, tmp_path)
    report = json.loads((res["anomalies"] / "anomalies.json").read_text())
    ranged = [a for a in report["anomalies"] if a["kind"] == "out_of_domain"]
    assert ranged and all(a["severity"] == "warning" and a["split"] == "eval" for a in ranged)
    assert report["ok"] is True and m["blocking"] == 0 and m["warnings"] == len(ranged)
    assert "inferred from one split" in ranged[0]["message"]
    assert (res["anomalies"] / "anomalies.txt").read_text().startswith("warning: [eval] ")

    curated = tmp_path / "curated"
    curated.mkdir()
    (curated / "schema.json").write_text((st["schema"] / "schema.json").read_text())
    with pytest.raises(StageError, match=r"anomalies not allowed: \[eval\] f\d+: out_of_domain"):
        run_stage("validate", {"schema_path": str(curated)}, inputs, tmp_path, run_id="curated")

    # the categorical check keeps blocking with the inferred schema
    data = json.loads((st["statistics"] / "statistics.json").read_text())
    schema = json.loads((st["schema"] / "schema.json").read_text())
    label = data["splits"]["eval"]["features"]["diagnosis"]
    label["values"] = {**label.get("values", {}), "unknown": 5}
    label["distinct"] = label.get("distinct", 2) + 1
    anomalies = check(data, schema, drift_threshold=10, max_unseen_fraction=0.0,
                      range_tolerance=0.1)
    (bad,) = [a for a in anomalies if a.column == "diagnosis"]
    assert (bad.kind, bad.severity) == ("out_of_domain", "error")
