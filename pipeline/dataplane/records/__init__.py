"""The artifacts made of TFRecords: the examples (tf.Example per row) and `transformed` (columnar
chunks), their encoding and their reading.

`example_codec` encodes columnar batches as serialized tf.Examples and TFRecord frames without a
message per row (`crc32c` checksums many records at once); `examples_writer` splits and shards
the examples artifact; `schema_file` is its schema.json; `reader` reads a shard back as Arrow
record batches; `transformed_io` is the transformed artifact's format.
"""
