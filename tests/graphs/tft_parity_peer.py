"""Run tests/graphs/tft_parity_fn.py's preprocessing_fn with tensorflow-transform 1.21 (inside
.venv-tft) on the same rows, the peer's own path (AnalyzeAndTransformDataset); writes an npz.

    .venv-tft/bin/python tests/graphs/tft_parity_peer.py OUT.npz
"""

import sys
import tempfile
from pathlib import Path

import numpy as np
import tensorflow as tf
import tensorflow_transform as tft
import tensorflow_transform.beam as tft_beam
from tensorflow_transform.tf_metadata import dataset_metadata, schema_utils

sys.path.insert(0, str(Path(__file__).parent))
import tft_parity_fn as fn  # noqa: E402


def main() -> None:
    data = fn.rows()
    n = len(data["a"])
    spec = {k: tf.io.FixedLenFeature([], tf.string if v.dtype == object else tf.float32)
            for k, v in data.items()}
    meta = dataset_metadata.DatasetMetadata(schema_utils.schema_from_feature_spec(spec))
    instances = [{k: (v[i] if v.dtype == object else float(v[i])) for k, v in data.items()}
                 for i in range(n)]
    with tempfile.TemporaryDirectory() as tmp, tft_beam.Context(temp_dir=tmp):
        (out, _), _ = (instances, meta) | tft_beam.AnalyzeAndTransformDataset(
            fn.make(tft, tf))
    out = sorted(out, key=lambda r: float(r["row_out"]))
    keys = sorted(out[0])
    np.savez(sys.argv[1], **{k: np.stack([np.asarray(r[k]) for r in out]) for k in keys})


if __name__ == "__main__":
    main()
