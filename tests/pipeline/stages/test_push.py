"""push: only blessed models, atomically, idempotently, keeping the last N versions."""

from __future__ import annotations

import json
import shutil

import pytest

from baton.errors import StageError
from baton.pipeline.release import versions as V
from baton.pipeline.testing import run_stage
from tests.pipeline.release.helpers import upstream_inputs


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory):
    outs, _ = run_stage("export", {"warmup_rows": 1}, upstream_inputs(),
                        tmp_path_factory.mktemp("exp"))
    return outs["saved_model"]


def _blessing(tmp_path, blessed, failed=()):
    d = tmp_path / f"blessing-{blessed}"
    d.mkdir(exist_ok=True)
    (d / "blessing.json").write_text(json.dumps({"blessed": blessed, "failed": list(failed)}))
    return d


def _push(tmp_path, export_dir, blessing, run_id="r1", **config):
    config.setdefault("serving_base", str(tmp_path / "serving"))
    return run_stage("push", config, {"saved_model": export_dir, "blessing": blessing},
                     tmp_path, run_id=run_id)


def test_blessed_model_is_pushed_to_an_integer_version(tmp_path, export_dir):
    outs, metrics = _push(tmp_path, export_dir, _blessing(tmp_path, True))
    base = tmp_path / "serving"
    assert metrics == {"pushed": True, "version": 1, "edge_released": False}
    assert V.versions(base) == [1]
    assert (base / "1" / "saved_model.pb").is_file()
    assert not [p for p in base.iterdir() if p.name.startswith(".tmp-")]
    pushed = json.loads((outs["pushed"] / "push.json").read_text())
    assert pushed["path"] == str(base / "1") and pushed["serving_base"] == str(base)


def test_unblessed_model_is_never_pushed(tmp_path, export_dir):
    blessing = _blessing(tmp_path, False, ["accuracy = 0.4000, required >= 0.9"])
    with pytest.raises(StageError, match="not blessed.*accuracy = 0.4000, required >= 0.9"):
        _push(tmp_path, export_dir, blessing)
    assert not (tmp_path / "serving").exists()
    outs, metrics = _push(tmp_path, export_dir, blessing, run_id="r2", on_not_blessed="skip")
    assert metrics == {"pushed": False} and not (tmp_path / "serving").exists()


def test_rerun_with_the_same_model_does_not_push_a_duplicate(tmp_path, export_dir):
    blessing = _blessing(tmp_path, True)
    _push(tmp_path, export_dir, blessing, run_id="r1")
    outs, metrics = _push(tmp_path, export_dir, blessing, run_id="r2")
    assert metrics["pushed"] is False and metrics["version"] == 1
    assert V.versions(tmp_path / "serving") == [1]


def test_cached_push_stands_only_while_its_version_is_accounted_for(tmp_path, export_dir):
    """The runner reuses a cached push only if `cache_valid` finds its version still accounted
    for; otherwise `baton run` would report "pushed" while nothing is served."""
    from baton.pipeline.stages.push import cache_valid

    outs, _ = _push(tmp_path, export_dir, _blessing(tmp_path, True))
    base = tmp_path / "serving"
    assert cache_valid(outs) is None  # version 1 is served
    (base / "0").mkdir()
    V.rollback(base, to=0)  # a deliberate rollback: the next unchanged run must not undo it
    assert V.versions(base) == [0] and cache_valid(outs) is None
    shutil.rmtree(base / ".rolledback-1")  # deleted by hand, nothing newer: push again
    assert cache_valid(outs) == f"version 1 is no longer in {base}"
    (base / "2").mkdir()  # superseded by a newer version (which may have pruned it)
    assert cache_valid(outs) is None
    shutil.rmtree(base)
    assert cache_valid(outs) == f"serving base {base} is gone"


def test_failed_check_blocks_the_push(tmp_path, export_dir):
    check = tmp_path / "check"
    check.mkdir()
    (check / "check.json").write_text(json.dumps({"ok": False, "problems": ["bad"]}))
    with pytest.raises(StageError, match="check stage did not pass"):
        run_stage("push", {"serving_base": str(tmp_path / "serving")},
                  {"saved_model": export_dir, "blessing": _blessing(tmp_path, True),
                   "check": check}, tmp_path)
    assert not (tmp_path / "serving").exists()


def _edge_dir(tmp_path, released):
    d = tmp_path / f"edge-{released}"
    d.mkdir()
    files = []
    if released:
        (d / "model.tflite").write_bytes(b"TFL3")
        files = ["model.tflite"]
    (d / "edge.json").write_text(json.dumps({"released": released, "release_files": files,
                                             "reason": "int8: within" if released else "worse"}))
    return d


@pytest.mark.parametrize("released", [True, False])
def test_edge_model_travels_with_the_cloud_model_only_when_released(tmp_path, export_dir,
                                                                    released):
    outs, metrics = run_stage(
        "push", {"serving_base": str(tmp_path / "serving")},
        {"saved_model": export_dir, "blessing": _blessing(tmp_path, True),
         "edge_model": _edge_dir(tmp_path, released)}, tmp_path)
    version = tmp_path / "serving" / "1"
    assert (version / "saved_model.pb").is_file()  # the cloud model is released either way
    assert (version / "assets.extra" / "edge" / "model.tflite").is_file() is released
    assert metrics["edge_released"] is released
    pushed = json.loads((outs["pushed"] / "push.json").read_text())
    assert pushed["edge_reason"] == ("int8: within" if released else "worse")


def test_a_push_without_a_check_stage_is_a_spec_error_unless_allowed(tmp_path):
    from baton.errors import SpecError
    from baton.pipeline.plan import plan
    from baton.pipeline.spec import load_spec

    spec = tmp_path / "spec.yaml"
    text = ("pipeline: p\nstages:\n"
            "  - name: up\n    type: tests.pipeline.release.helpers:fixture_export\n"
            "  - name: push\n    type: push\n"
            "    inputs: {saved_model: up.saved_model, blessing: up.saved_model}\n")
    spec.write_text(text)
    with pytest.raises(SpecError, match="push has no `check` input") as err:
        plan(load_spec(spec))
    assert err.value.exit_code == 2 and f"{spec}:" in str(err.value)
    spec.write_text(text + "    config: {allow_unchecked: true}\n")
    assert plan(load_spec(spec)).order == ("up", "push")
