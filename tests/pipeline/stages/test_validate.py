"""validate: anomalies of statistics against a schema; fail unless allowed."""

from __future__ import annotations

import copy
import json

import pytest

from baton.errors import StageError
from baton.pipeline.dataplane.validation import check
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
    assert m == {"anomalies": 1, "blocking": 0, "kinds": "non_finite:1"} and report["ok"] is True
    assert report["anomalies"][0]["kind"] == "non_finite"


def test_unknown_allowed_kind_is_a_config_error(tmp_path):
    from baton.pipeline.configs import ConfigError

    with pytest.raises(ConfigError, match="did you mean 'drift'"):
        run_stage("validate", {"allow": ["drfit"]}, {"statistics": tmp_path, "schema": tmp_path},
                  tmp_path)


def test_a_curated_schema_file_is_part_of_the_cache_key(tmp_path):
    from baton.pipeline.configs import build_config
    from baton.pipeline.stages import validate

    cfg = build_config(validate.Config, {"schema_path": "schemas/schema.json"}, "validate")
    assert validate.external_inputs(cfg, tmp_path) == [tmp_path / "schemas" / "schema.json"]
    assert validate.external_inputs(build_config(validate.Config, {}, "validate"), tmp_path) == []
