"""Where ingest's rows come from, as columnar batches for records.examples_writer.

`ingest_csv` (files by glob, bad rows quarantined) over `csv_values` (fields to typed columns)
and `csv_source` (the CSV framing and parsing), `tfds_source` (a TFDS catalog dataset or a
Baton builder) and `ingest_synthetic` (generated rows or images).
"""
