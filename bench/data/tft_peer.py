"""The peer: tensorflow-transform 1.21 on TFXIO, as TFX's Transform component runs it.

Runs inside its own virtualenv (`.venv-tft`, which pins its own versions) as a subprocess of
`run_bench.py`; prints one JSON line. The fast path its docs and examples use
(tensorflow_transform/examples/census_example_v2.py): a TFXIO source of Arrow RecordBatches
(`tfxio.CsvTFXIO` on the benchmark's CSV file, or `tfxio.TFExampleRecord` on the TFRecord
tf.Examples Baton's ingest wrote from that file) ->
`tft_beam.AnalyzeAndTransformDataset(preprocessing_fn, output_record_batches=True)` ->
`tft_beam.WriteTransformFn` (the SavedModel) and the transformed rows encoded by tfx_bsl's
C++ `RecordBatchToExamplesEncoder` and written with `beam.io.WriteToTFRecord`: like Baton's
transform stage, which writes its transform graph and the transformed rows. On FnApiRunner
(in-process, named explicitly, as Beam's default runner needs a download), batch size left to
TFXIO (Beam's BatchElements, tuned at run time up to 1000 rows) unless `--batch-size`;
`--processes 2` runs the same pipeline on 2 worker processes (`--direct_num_workers=2
--direct_running_mode=multi_processing`), Beam's documented way to use more than one core with
the local runner. Measured here: 2 processes 22.9 s against 29.5 s in-process on the current
table (a batch size of 10,000 or 100,000 rows: 28.2 s, 28.9 s), so run_bench.py runs both and
counts the faster.

Tables: `current` (z-score on x0..x3, a vocabulary on c0, the label passed through),
`census` (tests/graphs/tft_parity_fn.py's preprocessing_fn, the label passed through) and
`text` (bench/data/text_fn.py: a vocabulary over ragged tokens, the label passed through).

    .venv-tft/bin/python bench/data/tft_peer.py --table census --csv rows.csv --out DIR
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "graphs"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--table", choices=("current", "census", "text"), required=True)
    ap.add_argument("--csv", required=True, help="the benchmark's CSV file (with a header)")
    ap.add_argument("--tfrecords", default="", help="read these tf.Examples instead of the CSV")
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch-size", type=int, default=0, help="TFXIO batch size (0: tuned)")
    ap.add_argument("--processes", type=int, default=1, help="Beam worker processes (1: in-process)")
    args = ap.parse_args()

    import apache_beam as beam
    import tensorflow as tf
    import tensorflow_transform as tft
    import tensorflow_transform.beam as tft_beam
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from tensorflow_transform.tf_metadata import schema_utils
    from tfx_bsl.coders.example_coder import RecordBatchToExamplesEncoder
    from tfx_bsl.public import tfxio

    with open(args.csv, encoding="utf-8") as f:
        header = [h.strip().strip('"') for h in f.readline().strip().split(",")]
    numeric = {"x0", "x1", "x2", "x3", "row", "a", "b", "c", "d"}
    spec = {h: tf.io.FixedLenFeature([], tf.float32 if h in numeric else tf.string)
            for h in header}
    schema = schema_utils.schema_from_feature_spec(spec)

    if args.table == "current":
        def preprocessing_fn(inputs):  # noqa: ANN001, ANN202
            out = {f"x{i}": tft.scale_to_z_score(inputs[f"x{i}"]) for i in range(4)}
            out["c0"] = tft.compute_and_apply_vocabulary(inputs["c0"])
            out["label"] = inputs["label"]
            return out
    elif args.table == "text":
        sys.path.insert(0, os.path.join(ROOT, "bench", "data"))
        import text_fn

        text = text_fn.make(tft, tf)

        def preprocessing_fn(inputs):  # noqa: ANN001, ANN202
            return {**text(inputs), "label": inputs["label"]}
    else:
        import tft_parity_fn

        census = tft_parity_fn.make(tft, tf)

        def preprocessing_fn(inputs):  # noqa: ANN001, ANN202
            return {**census(inputs), "label": inputs["label"]}

    if args.tfrecords:
        source = tfxio.TFExampleRecord(file_pattern=args.tfrecords, schema=schema,
                                       telemetry_descriptors=["bench"])
    else:
        source = tfxio.CsvTFXIO(file_pattern=args.csv, column_names=header, schema=schema,
                                skip_header_lines=1, telemetry_descriptors=["bench"])
    os.makedirs(args.out, exist_ok=True)
    start = time.perf_counter()
    from apache_beam.options.pipeline_options import PipelineOptions

    options = PipelineOptions([f"--direct_num_workers={args.processes}",
                               "--direct_running_mode=multi_processing"]
                              if args.processes > 1 else [])
    with beam.Pipeline(runner=FnApiRunner(), options=options) as p, tft_beam.Context(
            temp_dir=tempfile.mkdtemp(prefix="tft-peer-", dir=args.out)):
        raw = p | "Read" >> source.BeamSource(batch_size=args.batch_size or None)
        (transformed, _), transform_fn = (
            (raw, source.TensorAdapterConfig())
            | tft_beam.AnalyzeAndTransformDataset(preprocessing_fn, output_record_batches=True))
        _ = transform_fn | "WriteTransformFn" >> tft_beam.WriteTransformFn(
            os.path.join(args.out, "transform_fn"))
        coder = RecordBatchToExamplesEncoder()
        _ = (transformed
             | "Encode" >> beam.FlatMapTuple(lambda batch, _: coder.encode(batch))
             | "Write" >> beam.io.WriteToTFRecord(os.path.join(args.out, "transformed", "part")))
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(json.dumps({
        "table": args.table, "source": "TFExampleRecord" if args.tfrecords else "CsvTFXIO",
        "seconds": seconds, "peak_rss_mb": max(peak, kids), "tft": tft.__version__,
        "batch_size": args.batch_size or "tuned (BatchElements, <= 1000)",
        "processes": args.processes,
        "transformed": sorted(glob.glob(os.path.join(args.out, "transformed", "part*")))}))


if __name__ == "__main__":
    main()
