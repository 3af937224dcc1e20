"""`make demo`: run the embedded penguins pipeline, then predict one raw penguin two ways.

First in-process from the pushed SavedModel (what a batch job would do), then over REST from
`baton serve` started on free ports (what a client of TF Serving would do). The record is raw:
the transform graph inside the SavedModel turns it into model features.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from baton.errors import EXIT_FAILED, EXIT_OK

RECORD = {
    "island": "Biscoe", "bill_length_mm": 48.6, "bill_depth_mm": 16.0,
    "flipper_length_mm": 230.0, "body_mass_g": 5800.0, "sex": "male", "year": 2009.0,
}


def main() -> int:
    from baton.pipeline import lineage
    from baton.pipeline.context import RunOptions
    from baton.pipeline.plan import plan
    from baton.pipeline.runner import run_pipeline
    from baton.pipeline.spec import load_spec

    result = run_pipeline(plan(load_spec(None)), RunOptions())
    if not result.ok:
        print(f"demo: {result.error}", file=sys.stderr)
        return EXIT_FAILED
    metrics = json.loads((result.run_dir / "evaluate" / "evaluation" / "metrics.json").read_text())
    pushed = json.loads((result.run_dir / "push" / "pushed" / "push.json").read_text())
    if not pushed.get("pushed"):
        print(f"demo: the model was not pushed: {pushed}", file=sys.stderr)
        return EXIT_FAILED
    accuracy = metrics["overall"]["accuracy"]
    base, version = Path(pushed["serving_base"]), pushed["version"]
    cached = (lineage.read(result.run_dir / "train") or {}).get("cache", {}).get("hit")
    print(f"\nrun {result.run_id}: eval accuracy {accuracy:.3f} on {metrics['example_count']} "
          f"held-out penguins{' (cached)' if cached else ''}; model version {version} at {base}")

    print("\nin-process prediction from the pushed SavedModel:")
    print(f"  input  {json.dumps(RECORD)}")
    import numpy as np
    import tensorflow as tf

    model = tf.saved_model.load(str(base / str(version)))
    fn = model.signatures[tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY]
    feeds = {k: tf.constant([v], dtype=tf.string if isinstance(v, str) else tf.float32)
             for k, v in RECORD.items()}
    out = {k: v.numpy() for k, v in fn(**feeds).items()}
    classes = [c.decode() for c in out["classes"][0]] if out["classes"].ndim == 2 else None
    probs = out["probabilities"][0]
    best = int(np.argmax(probs))
    label = classes[best] if classes else str(out["classes"][0].decode())
    print(f"  output {label} (p={probs[best]:.3f}; probabilities {np.round(probs, 3).tolist()})")

    print("\nREST prediction from `baton serve` (TF Serving API) on the same model directory:")
    from baton.serving.client_demo import ServerProcess

    with ServerProcess(result.run_dir.parent.name, str(base)) as server:
        response = server.predict([RECORD])
        print(f"  POST {server.url}:predict")
        print(f"  {json.dumps(response['predictions'][0])}")
    return EXIT_OK


if __name__ == "__main__":
    from baton import logs

    logs.configure(*logs.settings_from_env(os.environ))  # this is an edge: the run's lines
    sys.exit(main())
