"""The release stages inside the real runner: lineage baselines, caching, the gate blocking push."""

from __future__ import annotations

import io
import json

import pytest

from baton.pipeline.context import RunOptions
from baton.pipeline.plan import plan
from baton.pipeline.release import versions as V
from baton.pipeline.runner import run_pipeline
from baton.pipeline.spec import load_spec

SPEC = """\
pipeline: release
stages:
  - name: up
    type: tests.pipeline.release.helpers:fixture_upstream
    config: {weak: WEAK}
  - name: evaluate
    type: evaluate
    inputs: {model: up.model, transform_graph: up.transform_graph, examples: up.examples}
    config: {slices: [island], gate: {change: {accuracy: 0.02}}}
  - name: export
    type: export
    inputs: {model: up.model, transform_graph: up.transform_graph, examples: up.examples}
    config: {warmup_rows: 2}
  - name: check
    type: check
    inputs: {saved_model: export.saved_model}
  - name: push
    type: push
    inputs: {saved_model: export.saved_model, blessing: evaluate.blessing, check: check.check}
    config: {serving_base: serving}
"""


def _run(tmp_path, weak):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.replace("WEAK", "true" if weak else "false"))
    return run_pipeline(plan(load_spec(spec)), RunOptions(quiet=True),
                        runs_dir=tmp_path / "runs", stream=io.StringIO())


@pytest.mark.slow
def test_rerun_reuses_the_push_and_a_regression_against_the_baseline_is_not_pushed(tmp_path):
    serving = tmp_path / "serving"
    first = _run(tmp_path, weak=False)
    assert first.ok, first.error
    assert V.versions(serving) == [1]

    again = _run(tmp_path, weak=False)
    assert again.ok and {s.status for s in again.stages} == {"cached"}
    assert V.versions(serving) == [1]  # no duplicate version

    worse = _run(tmp_path, weak=True)
    status = {s.name: s.status for s in worse.stages}
    assert status["evaluate"] == "succeeded" and status["push"] == "failed"
    assert "not blessed" in worse.error and "vs baseline" in worse.error
    blessing = json.loads((worse.run_dir / "evaluate" / "blessing" / "blessing.json").read_text())
    assert blessing["baseline"]["run_id"] == again.run_id  # newest blessed (a cached reuse)
    assert blessing["baseline"]["source"].startswith("re-evaluated")
    assert V.versions(serving) == [1]  # the serving directory only ever saw the good model
