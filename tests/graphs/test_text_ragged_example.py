"""examples/text_ragged as a user runs it: a ragged token output trains an own model, exports
and serves, and a raw REST request reaches the model exactly as training fed it.

`baton run` takes the tickets from CSV to a pushed model (transform: a vocabulary over
`tf.strings.split` tokens, a RaggedTensor output; train: the user's model with a ragged
keras.Input). Then the served model, in Baton's TF Serving-compatible server, answers a raw
JSON request (the ticket's text, one with a word no ticket has); the same text through the
training side (the transform graph's `transform_raw_features`, the trained `model.keras`) must
give the same probabilities: one graph, in training and in serving.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "text_ragged"
TEXTS = ["my parcel is late again", "refund the card payment please",
         "the app crash zzzunseenword at login"]


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("text_ragged")
    d = tmp / "text_ragged"
    shutil.copytree(EXAMPLE, d, ignore=shutil.ignore_patterns("__pycache__", "models"))
    proc = subprocess.run([sys.executable, "-m", "baton", "run", str(d / "pipeline.yaml"),
                           "--runs-dir", str(tmp / "runs"), "-q"],
                          capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = next((tmp / "runs" / "text-ragged").glob("2*"))
    return d, run


@pytest.mark.slow
@pytest.mark.e2e
def test_the_ragged_text_example_trains_exports_and_serves_as_trained(ran):
    import keras
    import tensorflow as tf

    import baton.tft as tft
    from baton.serving.config import ModelConfig
    from baton.serving.server import ModelServer, ServerOptions

    d, run = ran
    stages = {s["name"]: s for s in json.loads((run / "run.json").read_text())["stages"]}
    assert {s["status"] for s in stages.values()} == {"succeeded"}, stages
    blessing = json.loads((run / "evaluate" / "blessing" / "blessing.json").read_text())
    assert blessing["blessed"], blessing
    spec = json.loads((run / "transform" / "transform_graph" / "feature_spec.json").read_text())
    tokens = next(f for f in spec["features"] if f["name"] == "tokens")
    assert tokens["encoding"] == "ragged" and tokens["kind"] == "categorical", tokens

    # the training side: the transform graph and the trained Keras model
    tfo = tft.TFTransformOutput(str(run / "transform" / "transform_graph"))
    feats = tfo.transform_raw_features({"text": tf.constant(TEXTS)})
    assert isinstance(feats["tokens"], tf.RaggedTensor)
    assert feats["tokens"].row_lengths().numpy().tolist() == [len(t.split()) for t in TEXTS]
    oov = tokens["vocab_size"] - 1  # the one OOV bucket: the last id
    assert feats["tokens"][2].numpy().tolist()[3] == oov  # "zzzunseenword"
    model = keras.models.load_model(run / "train" / "model" / "model.keras", compile=False)
    trained = tf.nn.softmax(model(dict(feats), training=False)).numpy()

    # the serving side: a raw JSON request to the pushed model
    server = ModelServer(ServerOptions(bind_free_ports=True, file_system_poll_wait_seconds=0),
                         [ModelConfig("text-ragged", str(d / "models" / "text-ragged"))]).start()
    try:
        req = urllib.request.Request(
            f"http://127.0.0.1:{server.rest_port}/v1/models/text-ragged:predict",
            data=json.dumps({"instances": [{"text": t} for t in TEXTS]}).encode(),
            method="POST")
        with urllib.request.urlopen(req, timeout=60) as r:
            served = json.loads(r.read())["predictions"]
    finally:
        server.stop(grace=2)
    probs = np.array([p["probabilities"] for p in served], np.float32)
    np.testing.assert_allclose(probs, trained, rtol=1e-5, atol=1e-6)
    classes = [p["classes"] for p in served]
    assert classes[:2] == ["shipping", "billing"], classes

    # TFX's serving input, serialized tf.Examples of the raw features (the classify signature):
    # parsed, transformed to ragged tokens and scored by the same graph
    pushed = d / "models" / "text-ragged"
    loaded = tf.saved_model.load(str(max((p for p in pushed.iterdir() if p.name.isdigit()),
                                         key=lambda p: int(p.name))))
    examples = [tf.train.Example(features=tf.train.Features(feature={"text": tf.train.Feature(
        bytes_list=tf.train.BytesList(value=[t.encode()]))})).SerializeToString() for t in TEXTS]
    scores = loaded.signatures["classify"](inputs=tf.constant(examples))["scores"].numpy()
    np.testing.assert_allclose(scores, trained, rtol=1e-5, atol=1e-6)
