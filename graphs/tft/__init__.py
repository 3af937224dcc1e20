"""The tf.Transform graph: `baton.tft`'s analyzers and mappers, traced and run in phases.

A `preprocessing_fn` written on `baton.tft` (the user's, or the built-in column kinds of
graphs.column_kinds) is traced into a TensorFlow graph (`trace`), its analyzers reduce each
batch inside that graph (`reduce`) and merge on the data side (`analyzers`, `vocab_order`), the
phases run until every analyzer is a constant (`engine`, with `feed` handing string columns in
encoded), and the result is exported as the transform SavedModel (`module`) that
`TFTransformOutput` reads back (`output`). `api`, `buckets` and `vocab` are the public names
`baton.tft` exports. Its own subpackage because it is one concept of eleven modules that import
each other and almost nothing else of graphs (feature_spec, label_outputs, transform,
quantile_sketch below it; column_kinds above it). Nothing is imported here: the modules load
TensorFlow only inside the functions that need it.
"""
