"""evaluate: metrics on the eval split, slices, the gate, the baseline through lineage."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from baton.configs import build_config
from baton.errors import StageError
from baton.pipeline.release.testing import weak_model
from baton.pipeline.stages import evaluate
from baton.pipeline.testing import run_stage
from tests.pipeline.release.helpers import record, upstream_inputs

GATE = {"thresholds": {"accuracy": 0.9, "loss": {"max": 0.5}},
        "slices": {"island": {"accuracy": 0.8}}, "change": {"accuracy": 0.02}}


def _blessing(outs):
    return json.loads((outs["blessing"] / "blessing.json").read_text())


def test_good_model_is_blessed_with_every_metric_recorded(tmp_path):
    outs, metrics = run_stage("evaluate", {"slices": ["island", "sex"], "gate": GATE},
                              upstream_inputs(), tmp_path)
    assert metrics["blessed"] is True
    assert metrics["accuracy"] >= 0.9 and 0 <= metrics["loss"] < 0.5
    for name in ("auc", "precision", "recall", "calibration_error", "example_count"):
        assert name in metrics
    blessing = _blessing(outs)
    assert blessing["blessed"] and blessing["baseline"] is None
    kinds = {(c["kind"], c["metric"], c["slice"]) for c in blessing["checks"]}
    assert ("threshold", "accuracy", "island=Biscoe") in kinds
    assert blessing["table"]["accuracy"]["thresholds"] == [{"min": 0.9, "max": None}]
    assert blessing["table"]["accuracy"]["max_worsening"] == 0.02
    assert blessing["table"]["loss"]["thresholds"] == [{"min": None, "max": 0.5}]
    assert set(blessing["table"]) == set(blessing["metrics"])
    change = next(c for c in blessing["checks"] if c["kind"] == "change")
    assert change["passed"] and change["note"] == "no blessed baseline yet"
    report = json.loads((outs["evaluation"] / "metrics.json").read_text())
    assert set(report["slices"]["island"]) == {"Biscoe", "Dream", "Torgersen"}
    assert "<missing>" in report["slices"]["sex"]
    assert sum(map(sum, report["confusion_matrix"])) == report["example_count"]
    assert "precision/Gentoo" in report["overall"]
    html = (outs["evaluation"] / "report.html").read_text()
    for part in ("BLESSED", "Confusion matrix", "accuracy by island", "Training curves"):
        assert part in html


@pytest.mark.slow
def test_model_below_threshold_is_not_blessed(tmp_path):
    outs, metrics = run_stage("evaluate", {"gate": {"thresholds": {"accuracy": 0.9}}},
                              upstream_inputs(weak_model()), tmp_path)
    blessing = _blessing(outs)
    assert metrics["blessed"] is False and blessing["blessed"] is False
    assert blessing["failed"] and blessing["failed"][0].startswith("accuracy = ")
    assert "required >= 0.9" in blessing["failed"][0]
    assert "NOT BLESSED" in (outs["evaluation"] / "report.html").read_text()


def test_regression_against_baseline_beyond_change_threshold_is_not_blessed(tmp_path):
    gate = {"change": {"accuracy": 0.01}}
    first, m1 = run_stage("evaluate", {"gate": gate}, upstream_inputs(), tmp_path, run_id="r1")
    record(first, m1, "evaluate")
    # The baseline's recorded metrics are used when its model is gone; make it look better
    # than the current model so the change threshold is exceeded.
    bless = _blessing(first)
    bless["metrics"]["accuracy"] = m1["accuracy"] + 0.05
    bless["model"] = str(tmp_path / "deleted-model")
    (first["blessing"] / "blessing.json").write_text(json.dumps(bless))
    second, m2 = run_stage("evaluate", {"gate": gate}, upstream_inputs(), tmp_path, run_id="r2")
    blessing = _blessing(second)
    assert m2["blessed"] is False
    check = blessing["checks"][0]
    assert check["baseline"] == pytest.approx(m1["accuracy"] + 0.05)
    assert check["change"] == pytest.approx(-0.05) and not check["passed"]
    assert blessing["baseline"]["run_id"] == "r1"
    assert blessing["baseline"]["source"] == "recorded"
    assert "vs baseline" in blessing["failed"][0]


def test_baseline_is_reevaluated_and_unblessed_runs_are_skipped(tmp_path):
    gate = {"change": {"accuracy": 0.0, "loss": 0.0}}
    first, m1 = run_stage("evaluate", {"gate": gate}, upstream_inputs(), tmp_path, run_id="r1")
    record(first, m1, "evaluate")
    unblessed, mu = run_stage("evaluate", {"gate": {"thresholds": {"accuracy": 1.01}}},
                              upstream_inputs(), tmp_path, run_id="r2")
    assert mu["blessed"] is False
    record(unblessed, mu, "evaluate")
    third, m3 = run_stage("evaluate", {"gate": gate}, upstream_inputs(), tmp_path, run_id="r3")
    blessing = _blessing(third)
    assert blessing["baseline"]["run_id"] == "r1"  # r2 was not blessed
    assert blessing["baseline"]["source"].startswith("re-evaluated")
    assert m3["blessed"] is True  # same model, same rows: no change at all
    assert all(c["change"] == pytest.approx(0.0) for c in blessing["checks"])


@pytest.mark.parametrize(
    ("gate", "slices", "fragment"),
    [
        ({"thresholds": {"acuracy": 0.9}}, [], "unknown metric 'acuracy' (did you mean 'accuracy'?)"),
        ({"change": {"f1": 0.1}}, [], "gate.change.f1: unknown metric 'f1'"),
        ({"slices": {"islnd": {"accuracy": 0.8}}}, ["island"],
         "unknown slice 'islnd' (did you mean 'island'?)"),
        ({"slices": {"sex=male": {"accuracy": 0.8}}}, ["island"], "unknown slice 'sex'"),
        ({"slices": {"island": {"precison/Adelie": 0.8}}}, ["island"], "unknown metric"),
    ],
)
def test_check_spec_refuses_unknown_metrics_and_slices(gate, slices, fragment):
    config = build_config(evaluate.Config, {"gate": gate, "slices": slices})
    problems = evaluate.check_spec(config, SimpleNamespace(name="evaluate"), None)
    assert len(problems) == 1 and fragment in problems[0]


def test_a_gate_naming_an_unknown_metric_is_a_spec_error_before_anything_runs(tmp_path):
    from baton.errors import SpecError
    from baton.pipeline.plan import plan
    from baton.pipeline.spec import load_spec

    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "pipeline: p\nstages:\n"
        "  - name: up\n    type: tests.pipeline.release.helpers:fixture_export\n"
        "  - name: evaluate\n    type: evaluate\n"
        "    inputs: {model: up.saved_model, transform_graph: up.saved_model, "
        "examples: up.saved_model}\n"
        "    config: {slices: [island], gate: {thresholds: {acuracy: 0.9}, "
        "slices: {sex: {accuracy: 0.5}}}}\n")
    with pytest.raises(SpecError) as err:
        plan(load_spec(spec))
    assert err.value.exit_code == 2 and len(err.value.problems) == 2
    assert "unknown metric 'acuracy'" in str(err.value) and "unknown slice 'sex'" in str(err.value)


def test_check_spec_accepts_known_names():
    config = build_config(evaluate.Config, {"slices": ["island"], "gate": {
        "thresholds": {"accuracy": 0.9, "precision/Adelie": 0.5, "mae": 3.0},
        "slices": {"island=Dream": {"recall": 0.5}}, "change": {"auc": 0.01}}})
    assert evaluate.check_spec(config, SimpleNamespace(name="evaluate"), None) == []


def test_slice_on_a_numeric_column_is_refused_at_run_time(tmp_path):
    with pytest.raises(StageError, match="'body_mass_g' is a float32 column"):
        run_stage("evaluate", {"slices": ["body_mass_g"]}, upstream_inputs(), tmp_path)


def test_unknown_class_in_per_class_metric_is_refused_at_run_time(tmp_path):
    with pytest.raises(StageError, match="'recall/Emperor' does not exist"):
        run_stage("evaluate", {"gate": {"thresholds": {"recall/Emperor": 0.5}}},
                  upstream_inputs(), tmp_path)


def test_names_only_the_data_settles_are_all_refused_as_soon_as_the_transform_graph_exists():
    """The runner calls check_inputs with the transform graph before train (see test_runner):
    a slice column the data lacks, a numeric slice, a metric unfit for the task, an unknown class."""
    config = build_config(evaluate.Config, {"slices": ["islnd", "body_mass_g"], "gate": {
        "thresholds": {"mse": 0.5, "recall/Emperor": 0.5, "accuracy": 0.9},
        "slices": {"island=Dream": {"accuracy": 0.5}}}})
    assert evaluate.EARLY_INPUTS == ("transform_graph",)
    problems = evaluate.check_inputs(config, {"transform_graph": upstream_inputs()["transform_graph"]})
    assert len(problems) == 4, problems
    assert "'islnd' is not a column of the data (did you mean 'island'?)" in problems[0]
    assert "'body_mass_g' is a float32 column" in problems[1]
    assert "metric 'mse' does not exist for a classification model" in problems[2]
    assert "metric 'recall/Emperor' does not exist" in problems[3]
    good = build_config(evaluate.Config, {"slices": ["island"], "gate": GATE})
    assert evaluate.check_inputs(good, {"transform_graph": upstream_inputs()["transform_graph"]}) == []


def test_training_curves_read_both_history_formats(tmp_path):
    keras_style = {"loss": [1.0, 0.5], "accuracy": [0.5, 0.9]}
    (tmp_path / "history.json").write_text(json.dumps(keras_style))
    assert evaluate._history(tmp_path) == keras_style
    records = [{"epoch": 1, "step": 8, "train_loss": 0.6, "eval_accuracy": 0.9},
               {"epoch": 2, "step": 16, "train_loss": 0.1, "eval_accuracy": 0.97}]
    (tmp_path / "history.json").write_text(json.dumps(records))
    assert evaluate._history(tmp_path) == {"eval_accuracy": [0.9, 0.97], "train_loss": [0.6, 0.1]}
