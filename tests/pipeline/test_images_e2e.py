"""A 64x64x3 image pipeline end to end: examples/images_64.yaml from ingest to push, then one
prediction through `baton serve` REST with the image as one nested-list instance."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from baton.pipeline.context import RunOptions
from baton.pipeline.plan import plan
from baton.pipeline.runner import run_pipeline
from baton.pipeline.spec import load_spec

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "images_64.yaml"
SHAPE = [64, 64, 3]


def _post(port: int, path: str, body: dict) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                 method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


@pytest.mark.slow
@pytest.mark.e2e
def test_64x64x3_images_run_from_ingest_to_a_rest_prediction(tmp_path):
    started = time.monotonic()
    spec_file = tmp_path / "images_64.yaml"
    spec_file.write_text(EXAMPLE.read_text())  # models/ lands beside the spec, in tmp_path
    result = run_pipeline(plan(load_spec(spec_file)), RunOptions(quiet=True),
                          runs_dir=tmp_path / "runs", stream=io.StringIO())
    assert result.ok, result.error
    run_s = time.monotonic() - started
    assert {s.name: s.status for s in result.stages} == dict.fromkeys(
        ["ingest", "statistics", "validate", "transform", "train", "evaluate", "export", "check",
         "edge", "push"], "succeeded")
    run_dir = next((tmp_path / "runs" / "images-64").glob("*/ingest")).parent

    schema = json.loads((run_dir / "ingest" / "examples" / "schema.json").read_text())
    assert schema["images"] == {"image": SHAPE}
    assert {"name": "image", "dtype": "float32", "shape": SHAPE} in schema["columns"]
    stats = json.loads((run_dir / "statistics" / "statistics" / "statistics.json").read_text())
    image_stats = stats["splits"]["train"]["features"]["image"]
    assert image_stats["shape"] == SHAPE and image_stats["values"] == image_stats["count"] * 12288
    spec = json.loads((run_dir / "transform" / "transform_graph" / "feature_spec.json").read_text())
    assert [f["shape"] for f in spec["features"]] == [SHAPE]
    metrics = json.loads((run_dir / "evaluate" / "evaluation" / "metrics.json").read_text())
    accuracy = metrics["overall"]["accuracy"]
    assert accuracy >= 0.7, metrics["overall"]  # chance is 1/3
    export = json.loads((run_dir / "export" / "saved_model" / "export.json").read_text())
    assert export["raw_inputs"] == [{"name": "image", "dtype": "float32", "shape": SHAPE,
                                    "required": True}]
    edge = json.loads((run_dir / "edge" / "edge_model" / "edge.json").read_text())
    assert all("error" not in v for v in edge["variants"].values()), edge["variants"]

    # the pushed model behind `baton serve`, asked over REST with eval images
    from baton.graphs.feature_spec import FeatureSpec
    from baton.pipeline.release.data import read_split

    fspec = FeatureSpec.load(run_dir / "transform" / "transform_graph")
    split = read_split(run_dir / "ingest" / "examples", fspec, "eval", limit=4)
    base = tmp_path / "models" / "images-64"
    ports = tmp_path / "ports.json"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    server = subprocess.Popen(
        [sys.executable, "-m", "baton", "serve", "--model_name=images-64",
         f"--model_base_path={base}", "--bind_free_ports", f"--ports_file={ports}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not ports.is_file() and time.monotonic() < deadline and server.poll() is None:
            time.sleep(0.2)
        assert ports.is_file(), server.stderr.read() if server.poll() is not None else "timeout"
        rest = json.loads(ports.read_text())["rest"]
        images = split.columns["image"]
        assert images.shape == (len(split), *SHAPE)
        rows = _post(rest, "/v1/models/images-64:predict",
                     {"instances": [{"image": img.tolist()} for img in images]})
        cols = _post(rest, "/v1/models/images-64:predict", {"inputs": {"image": images.tolist()}})
    finally:
        server.terminate()
        server.wait(timeout=30)
    classes = [p["classes"] for p in rows["predictions"]]
    assert classes == cols["outputs"]["classes"]
    np.testing.assert_allclose([p["probabilities"] for p in rows["predictions"]],
                               cols["outputs"]["probabilities"], rtol=1e-5, atol=1e-6)
    truth = [fspec.label.vocabulary[i] for i in split.labels]
    print(f"64x64x3: {result.stages[0].metrics.get('rows')} rows, eval accuracy {accuracy:.3f}, "
          f"pipeline {run_s:.1f}s, REST classes {classes} (truth {truth}), "
          f"total {time.monotonic() - started:.1f}s")
