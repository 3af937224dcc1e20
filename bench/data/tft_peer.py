"""The peer: tensorflow-transform 1.21 `AnalyzeAndTransformDataset` on the same synthetic rows.

Runs inside its own virtualenv (`.venv-tft`, which pins its own versions) as a subprocess of
`run_bench.py`; prints one JSON line. Same preprocessing as Baton's benchmark: z-score on the
4 numeric columns, a vocabulary on the categorical one, on FnApiRunner (named explicitly, as
Beam's default runner needs a download). Rows come from `pipeline.datasets.synthetic` (numpy
only), so both sides transform identical data.

    .venv-tft/bin/python bench/data/tft_peer.py --rows 100000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    args = ap.parse_args()

    import apache_beam as beam
    import tensorflow as tf
    import tensorflow_transform as tft
    import tensorflow_transform.beam as tft_beam
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from tensorflow_transform.tf_metadata import dataset_metadata, schema_utils

    from baton.pipeline.datasets import synthetic

    rows = []
    for chunk in synthetic.generate(args.rows, seed=1, numeric=4, categorical=1, vocab_size=100):
        n = len(chunk["label"])
        cols = {k: v.tolist() for k, v in chunk.items()}
        rows.extend({k: cols[k][i] for k in cols} for i in range(n))
    spec = {f"x{i}": tf.io.FixedLenFeature([], tf.float32) for i in range(4)}
    spec["c0"] = tf.io.FixedLenFeature([], tf.string)
    spec["label"] = tf.io.FixedLenFeature([], tf.string)
    metadata = dataset_metadata.DatasetMetadata(schema_utils.schema_from_feature_spec(spec))

    def preprocessing_fn(inputs):  # noqa: ANN001, ANN202
        out = {f"x{i}": tft.scale_to_z_score(inputs[f"x{i}"]) for i in range(4)}
        out["c0"] = tft.compute_and_apply_vocabulary(inputs["c0"])
        out["label"] = inputs["label"]
        return out

    start = time.perf_counter()
    with beam.Pipeline(runner=FnApiRunner()) as p, tft_beam.Context(
            temp_dir=tempfile.mkdtemp(prefix="tft-peer-")):
        data = p | beam.Create(rows, reshuffle=False)
        (transformed, _), _ = (data, metadata) | tft_beam.AnalyzeAndTransformDataset(
            preprocessing_fn)
        _ = transformed | beam.combiners.Count.Globally() | beam.Map(
            lambda n: print(json.dumps({"transformed_rows": n}), file=sys.stderr))
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"rows": args.rows, "seconds": seconds, "rows_per_s": args.rows / seconds,
                      "peak_rss_mb": peak, "tft": tft.__version__}))


if __name__ == "__main__":
    main()
