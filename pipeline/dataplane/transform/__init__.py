"""The transform stage's own pieces, shared by its local and Beam paths and the federated stage.

`column_plan` (the built-in column kinds as settings, resolved against a schema), `fn_source`
(where a worker gets the preprocessing_fn: the user's code staged, or the column plan),
`user_errors` (the function's errors naming its step and line) and `analysis` (analysis.json
and the transform_graph directory). The tf.Transform graph itself is graphs.tft.
"""
