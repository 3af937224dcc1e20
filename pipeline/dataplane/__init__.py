"""The data plane's support code, in rooms by what it does (docs/architecture.md draws them):

- `records`: the examples and transformed artifacts on disk: tf.Example/TFRecord encoding
  (vectorised, with its CRC-32C), the sharded writer, the Arrow/TFRecord reader, schema.json;
- `sources`: where ingest's rows come from (CSV files, TFDS, synthetic), as columnar batches;
- `statistics`: mergeable per-column accumulators, statistics.json and the inferred schema,
  validation against a schema, and the table and HTML page people read;
- `transform`: the transform stage's own pieces: the built-in column plan, where a worker gets
  the preprocessing_fn, its errors, analysis.json and the transform_graph directory;
- `beam`: the Beam pipelines (statistics; a preprocessing_fn's analyze and apply passes), their
  runner, and where their workers read and write shards;
- `partition` (per-client examples for a federated rehearsal), `frozen_heap` (the garbage
  collector off the libraries' objects during a data stage) and `heap_reuse` (malloc keeps the
  stage's freed blocks for its next batch instead of unmapping them) stand alone.

Stage modules (`pipeline/stages/{ingest,statistics,validate,transform}.py`) stay thin and
call into these modules. Nothing here imports TensorFlow or Beam at module top, so importing the
package is cheap; the heavy imports happen inside the functions that need them.
"""
