"""The data stages' Beam pipelines and what their workers need.

`statistics` (per-shard accumulators merged per split) and `tft` (a preprocessing_fn's analyze
passes, the last one with `apply`) are the pipelines; `merge` their shared combiners; `runner`
the runner and options from `beam_pipeline_args`. A DoFn runs wherever the runner puts it:
`shard_source` and `shard_sink` say where it reads and writes one shard (a local path or a
bucket), `local_objects` lends it the driver's objects when it runs in the driver's process, and
`ordered_threads` works on a shard's batches on several threads.
"""
