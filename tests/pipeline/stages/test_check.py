"""check: a SavedModel is validated statically and in a fresh process before any push."""

from __future__ import annotations

import json
import shutil

import pytest

from baton.errors import StageError
from baton.pipeline.context import RunOptions
from baton.pipeline.plan import plan
from baton.pipeline.runner import run_pipeline
from baton.pipeline.spec import load_spec
from baton.pipeline.testing import run_stage
from tests.pipeline.release.helpers import damage, exported


def _copy(tmp_path, how="none"):
    dst = tmp_path / "saved_model"
    shutil.copytree(exported(), dst)
    damage(dst, how)
    return dst


@pytest.mark.slow
def test_good_model_passes_in_a_fresh_process(tmp_path):
    outs, metrics = run_stage("check", {}, {"saved_model": exported()}, tmp_path)
    report = json.loads((outs["check"] / "check.json").read_text())
    assert report["ok"] and report["compared"] and report["warmup_requests"] == 4
    assert metrics["max_abs_diff"] <= 1e-4


@pytest.mark.parametrize(
    ("how", "fragment"),
    [
        ("truncate", "saved_model.pb is truncated or corrupt"),
        ("drop_variables", "variables.data-00000-of-00001 is missing"),
        ("rename_input", "signature 'serving_default': missing input 'island' (DT_STRING)"),
    ],
)
def test_broken_models_are_refused_with_the_problem_named(tmp_path, how, fragment):
    with pytest.raises(StageError) as err:
        run_stage("check", {}, {"saved_model": _copy(tmp_path, how)}, tmp_path)
    assert fragment in str(err.value)
    if how == "rename_input":
        assert "unexpected inputs ['islnd']" in str(err.value)


def test_wrong_classify_method_name_is_refused(tmp_path):
    from baton.graphs.signatures import set_method_names

    sm = _copy(tmp_path)
    set_method_names(sm / "1", {"classify": "tensorflow/serving/predict"})
    with pytest.raises(StageError, match="method_name is 'tensorflow/serving/predict', TF "
                                         "Serving requires 'tensorflow/serving/classify'"):
        run_stage("check", {}, {"saved_model": sm}, tmp_path)


def test_outputs_differing_from_the_in_process_model_are_named():
    from baton.pipeline.release.infra import compare

    want = [{"probabilities": [[0.9, 0.1]], "class_ids": [0], "classes": ["a"]}]
    same = [{"probabilities": [[0.9, 0.1 + 1e-6]], "class_ids": [0], "classes": ["a"]}]
    assert compare(same, want, atol=1e-4) == (pytest.approx(1e-6), [])
    worst, problems = compare([{"probabilities": [[0.8, 0.2]], "class_ids": [1],
                                "classes": ["a"]}], want, atol=1e-4)
    assert worst == pytest.approx(0.1)
    assert problems == [
        "warmup request 0: output 'probabilities' differs from the in-process model by 0.1 "
        "(> atol 0.0001)",
        "warmup request 0: output 'class_ids' is [1], the in-process model gives [0]"]
    assert compare([], want, 1e-4)[1] == ["0 warmup answers, expected 1"]


SPEC = """\
pipeline: bad-model
stages:
  - name: upstream
    type: tests.pipeline.release.helpers:fixture_export
    config: {damage: drop_variables}
  - name: check
    type: check
    inputs: {saved_model: upstream.saved_model}
  - name: push
    type: push
    inputs: {saved_model: upstream.saved_model, blessing: upstream.blessing, check: check.check}
    config: {serving_base: serving}
"""


def test_refused_model_leaves_the_serving_directory_untouched(tmp_path):
    serving = tmp_path / "serving"
    (serving / "3" / "variables").mkdir(parents=True)
    (serving / "3" / "saved_model.pb").write_bytes(b"v3")
    before = sorted(str(p.relative_to(serving)) for p in serving.rglob("*"))
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    result = run_pipeline(plan(load_spec(spec)), RunOptions(quiet=True),
                          runs_dir=tmp_path / "runs")
    statuses = {s.name: s.status for s in result.stages}
    assert not result.ok and statuses["check"] == "failed"
    assert statuses.get("push") != "succeeded"
    assert "variables.data-00000-of-00001 is missing" in result.error
    assert sorted(str(p.relative_to(serving)) for p in serving.rglob("*")) == before
