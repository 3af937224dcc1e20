"""TFX's penguin example moved into Baton with exactly the changes docs/own-model.md lists.

`tfx_penguin/penguin_utils_base.py` and `penguin_utils_keras.py` are TFX's own files
(tensorflow/tfx, tfx/examples/penguin, Apache 2.0) with each documented change marked `# Baton:`.
Its preprocessing_fn runs as written (the label passed through as `species_xf`), its model as
written (its own `keras.Input`s, a softmax at the end, `compile()` inside) on TFX's hyperparameters
(`hparams.get(...)` reads `spec.hyperparameters`), trained by `steps`/`eval_steps` as TFX's
TrainArgs/EvalArgs, gated on the Keras metric it was compiled with, pushed, and served: the
served probabilities are the in-process model's, for a client sending only the columns the
function reads, one sending whole rows, and a TFX client's serialized tf.Examples sent where the
error for `examples` points.

The data is TFX's penguin example data as TFX prepares it (`penguins_processed.csv`: rows with a
missing measurement dropped, the four measurements scaled to [0, 1] under TFX's culmen_* names,
species as 0/1/2), made here from Baton's embedded penguins, which keeps island, sex and year:
columns the function never reads.
"""

from __future__ import annotations

import base64
import csv
import json
import shutil
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import yaml

from baton.pipeline.context import RunOptions
from baton.pipeline.plan import plan
from baton.pipeline.runner import run_pipeline
from baton.pipeline.spec import load_spec

HERE = Path(__file__).resolve().parent / "tfx_penguin"
MEASURES = {"bill_length_mm": "culmen_length_mm", "bill_depth_mm": "culmen_depth_mm",
            "flipper_length_mm": "flipper_length_mm", "body_mass_g": "body_mass_g"}
READ = list(MEASURES.values())
UNREAD = ["island", "sex", "year"]


def processed_csv(path: Path) -> Path:
    """TFX's penguins_processed.csv preparation, from Baton's embedded penguins."""
    from baton.pipeline.datasets import PENGUINS_CSV

    with PENGUINS_CSV.open() as f:
        rows = [r for r in csv.DictReader(f) if all(r[k] not in ("", "NA") for k in MEASURES)]
    lo = {k: min(float(r[k]) for r in rows) for k in MEASURES}
    hi = {k: max(float(r[k]) for r in rows) for k in MEASURES}
    species = sorted({r["species"] for r in rows})
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["species", *READ, *UNREAD])
        for r in rows:
            scaled = [round((float(r[k]) - lo[k]) / (hi[k] - lo[k]), 6) for k in MEASURES]
            w.writerow([species.index(r["species"]), *scaled, r["island"], r["sex"], r["year"]])
    return path


def spec_file(d: Path, serving: Path) -> Path:
    inputs = {"model": "train.model", "transform_graph": "transform.transform_graph",
              "examples": "ingest.examples"}
    spec = {"pipeline": "tfx-penguin", "stages": [
        {"name": "ingest", "type": "ingest",
         "config": {"source": "csv", "path": "penguins_processed.csv", "label": "species",
                    "task": "classification", "splits": {"train": 0.8, "eval": 0.2}}},
        {"name": "transform", "type": "transform", "inputs": {"examples": "ingest.examples"},
         "config": {"preprocessing_fn": "penguin_utils_keras:preprocessing_fn"}},
        {"name": "train", "type": "train",
         "inputs": {"transformed": "transform.transformed",
                    "transform_graph": "transform.transform_graph"},
         # TFX's penguin pipeline: TrainArgs(num_steps=100), EvalArgs(num_steps=5), the
         # tuner's defaults (learning_rate 1e-2, num_layers 2), its batch sizes
         "config": {"model": "penguin_utils_keras:build", "steps": 100, "eval_steps": 5,
                    "learning_rate": 0.01, "model_params": {"num_layers": 2},
                    "batch_size": 20, "eval_batch_size": 10}},
        {"name": "evaluate", "type": "evaluate", "inputs": inputs,
         "config": {"gate": {"thresholds": {"sparse_categorical_accuracy": 0.6}}}},
        {"name": "export", "type": "export", "inputs": inputs},
        {"name": "check", "type": "check", "inputs": {"saved_model": "export.saved_model"}},
        {"name": "push", "type": "push",
         "inputs": {"saved_model": "export.saved_model", "blessing": "evaluate.blessing",
                    "check": "check.check"},
         "config": {"serving_base": str(serving)}},
    ]}
    path = d / "pipeline.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _post(port: int, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/models/penguins:predict",
                                 data=json.dumps(body).encode(), method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.mark.slow
@pytest.mark.e2e
def test_tfx_penguin_moves_over_and_serves_the_models_probabilities(tmp_path):
    d = tmp_path / "spec"
    d.mkdir()
    for f in ("penguin_utils_base.py", "penguin_utils_keras.py"):
        shutil.copy(HERE / f, d / f)
    processed_csv(d / "penguins_processed.csv")
    serving = tmp_path / "models" / "penguins"
    result = run_pipeline(plan(load_spec(spec_file(d, serving))), RunOptions(quiet=True),
                          runs_dir=tmp_path / "runs")
    assert result.ok, result.error
    run = result.run_dir

    # what training decided about TFX's model
    info = json.loads((run / "train" / "model" / "train_info.json").read_text())
    assert info["outputs"]["kind"] == "probabilities"
    assert info["compile"]["used"] == ["loss", "optimizer", "metrics"]
    assert info["steps"] == 100
    blessing = json.loads((run / "evaluate" / "blessing" / "blessing.json").read_text())
    assert blessing["blessed"] and blessing["checks"][0]["metric"] == "sparse_categorical_accuracy"
    metrics = json.loads((run / "evaluate" / "evaluation" / "metrics.json").read_text())
    assert metrics["overall"]["calibration_error"] < 0.15  # 0.414 when trained as logits
    export = json.loads((run / "export" / "saved_model" / "export.json").read_text())
    assert {f["name"]: f["required"] for f in export["raw_inputs"]} == {
        **dict.fromkeys(READ, True), **dict.fromkeys(UNREAD, False)}

    # the in-process model: model.keras behind the transform graph, on the raw eval rows
    from baton.graphs.feature_spec import FeatureSpec
    from baton.pipeline.release import data

    tg = run / "transform" / "transform_graph"
    spec = FeatureSpec.load(tg)
    assert [f.name for f in spec.features] == [k + "_xf" for k in READ]
    split = data.read_split(run / "ingest" / "examples", spec, "eval").take(24)
    model = data.load_model(run / "train" / "model")
    want = np.asarray(model(data.transform_split(data.load_transform(tg), split, spec),
                            training=False))
    assert np.allclose(want.sum(axis=1), 1.0, atol=1e-5)

    from baton.serving.config import ModelConfig
    from baton.serving.server import ModelServer, ServerOptions

    server = ModelServer(ServerOptions(bind_free_ports=True, file_system_poll_wait_seconds=0),
                         [ModelConfig("penguins", str(serving))]).start()
    try:
        port = server.rest_port
        n = len(split)
        read_only = [{k: float(split.columns[k][i]) for k in READ} for i in range(n)]
        status, body = _post(port, {"instances": read_only})
        assert status == 200, body
        served = np.asarray([p["probabilities"] for p in body["predictions"]])
        np.testing.assert_allclose(served, want, atol=1e-5)

        whole = [{**row, "island": split.raw_strings("island")[i],
                  "sex": split.raw_strings("sex")[i], "year": float(split.columns["year"][i])}
                 for i, row in enumerate(read_only)]
        status, body = _post(port, {"instances": whole})
        assert status == 200, body
        np.testing.assert_allclose([p["probabilities"] for p in body["predictions"]], want,
                                   atol=1e-5)

        # a TFX client: serialized tf.Examples under `examples` -> pointed to `classify`
        b64 = [{"b64": base64.b64encode(s).decode()} for s in split.serialized]
        status, body = _post(port, {"instances": [{"examples": e} for e in b64]})
        assert status == 400 and "'classify'" in body["error"], body
        status, body = _post(port, {"signature_name": "classify",
                                    "instances": [{"inputs": e} for e in b64]})
        assert status == 200, body
        np.testing.assert_allclose([p["scores"] for p in body["predictions"]], want, atol=1e-5)
    finally:
        server.stop(grace=2)
