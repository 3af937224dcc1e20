"""Statistics of the examples, and what is checked and shown from them.

`accumulators` are the mergeable per-column summaries (also the transform's label pass);
`stats` finalises them into statistics.json and infers a schema; `validation` compares
statistics against a schema; `render` is the table (`baton inspect`) and the HTML page.
"""
