"""examples/own_model/ (the user's Keras model, loss, optimizer and callbacks) end to end with
the runs directory and the push on a real S3 server (SeaweedFS)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from baton.pipeline.release import versions as V
from baton.storage import location as L
from baton.storage import objects
from tests.pipeline.test_bucket_e2e import baton

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_own_model_example_on_a_bucket(s3, tmp_path):
    example = tmp_path / "own_model"
    shutil.copytree(ROOT / "examples" / "own_model", example)
    spec = yaml.safe_load((example / "pipeline.yaml").read_text())
    models = L.join(s3, "models", "own-model")
    for stage in spec["stages"]:
        if stage["type"] == "push":
            stage["config"] = {"serving_base": models}
    (example / "pipeline.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    res = baton(tmp_path, "run", str(example / "pipeline.yaml"), "--runs-dir",
                L.join(s3, "runs"))
    assert res.returncode == 0, res.stderr[-3000:]
    url = res.stdout.strip().splitlines()[-1]
    run = objects.read_json(L.join(url, "run.json"))
    assert [s["status"] for s in run["stages"]] == ["succeeded"] * len(spec["stages"])
    assert V.versions(models) == [1]
    tree = objects.list_tree(L.join(models, "1"))
    assert "saved_model.pb" in tree and "assets.extra/baton_push.json" in tree
    assert not (tmp_path / "runs").exists() and not (example / "models").exists()
