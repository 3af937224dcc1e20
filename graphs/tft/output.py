"""`tft.TFTransformOutput`: the reading side of a transform graph, as tf.Transform's.

It reads a Baton `transform_graph` directory: the SavedModel at its root, its `assets/`
vocabulary files and `tft_metadata.json` or, for the built-in column transform,
`feature_spec.json`. It also reads tf.Transform's layout, with `transform_fn/` holding the
SavedModel. The methods are tf.Transform's: `transform_raw_features`,
`transform_features_layer`, `transformed_feature_spec`, `vocabulary_file_by_name`,
`vocabulary_size_by_name`, `vocabulary_by_name` and `num_buckets_for_transformed_feature`.
As in tf.Transform's TF2 path, `transform_raw_features` passes only the raw features the graph
takes, so a label or an extra column in the dict is dropped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from baton.graphs.feature_spec import FILENAME as FEATURE_SPEC_FILE
from baton.graphs.tft.trace import sanitized_vocab_filename

METADATA_FILE = "tft_metadata.json"  # graphs.tft.module writes it
TRANSFORM_FN_DIR = "transform_fn"


def feature_spec_entry(name: str, info: dict[str, Any]) -> Any:
    """One output's tf.io feature spec, from its tft_metadata.json entry (tf.Transform's
    schema_inference rules: `_feature_spec_from_batched_tensors`)."""
    import tensorflow as tf

    dtype = tf.as_dtype(info["dtype"])
    shape = list(info.get("shape", []))
    encoding = info.get("encoding", "dense")
    if encoding == "dense":
        return tf.io.FixedLenFeature(shape, dtype)
    if encoding == "sparse":
        if len(shape) <= 1:
            return tf.io.VarLenFeature(dtype)
        return tf.io.SparseFeature(
            index_key=[f"{name}$sparse_indices_{i}" for i in range(len(shape))],
            value_key=f"{name}$sparse_values", dtype=dtype, size=shape, already_sorted=True)
    partitions = []
    ragged = 0
    for d in shape[1:]:
        if d is None:
            ragged += 1
            partitions.append(tf.io.RaggedFeature.RowLengths(f"{name}$row_lengths_{ragged}"))
        else:
            partitions.append(tf.io.RaggedFeature.UniformRowLength(d))
    return tf.io.RaggedFeature(dtype=dtype, value_key=f"{name}$ragged_values",
                               partitions=partitions, row_splits_dtype=tf.int64)


class TFTransformOutput:
    """A transform graph directory (Baton's `transform_graph`, or tf.Transform's output)."""

    TRANSFORM_FN_DIR = TRANSFORM_FN_DIR

    def __init__(self, transform_output_dir: str | Path) -> None:
        root = Path(transform_output_dir)
        saved = root if (root / "saved_model.pb").is_file() else root / TRANSFORM_FN_DIR
        if not (saved / "saved_model.pb").is_file():
            raise FileNotFoundError(f"TFTransformOutput: no transform SavedModel in {root} "
                                    f"(nor in {root / TRANSFORM_FN_DIR})")
        self._root, self._saved = root, saved
        self._module: Any = None
        self._layer: Any = None

    @property
    def transform_savedmodel_dir(self) -> str:
        return str(self._saved)

    def _metadata(self) -> dict[str, dict[str, Any]]:
        path = self._root / METADATA_FILE
        if path.is_file():
            return json.loads(path.read_text())
        spec = json.loads((self._root / FEATURE_SPEC_FILE).read_text())  # the built-in transform
        out = {}
        for f in spec["features"]:
            kind = f["kind"]
            entry: dict[str, Any] = {
                "dtype": {"numeric": "float32", "string": "string"}.get(kind, "int64"),
                "shape": list(f.get("shape", [])), "encoding": f.get("encoding", "dense")}
            if kind == "categorical":
                lo = int(f.get("min_id", 0))
                entry.update(min=lo, max=lo + int(f["vocab_size"]) - 1)
            out[f["name"]] = entry
        return out

    def transformed_feature_spec(self) -> dict[str, Any]:
        """The transformed features as tf.Transform's schema inference describes them: a dense
        output `tf.io.FixedLenFeature(shape, dtype)`, a ragged one `tf.io.RaggedFeature` (its
        values `<name>$ragged_values`, a ragged inner dimension `<name>$row_lengths_<i>`, a
        uniform one `UniformRowLength`), a sparse one `tf.io.VarLenFeature` (2-D) or
        `tf.io.SparseFeature` (`<name>$sparse_indices_<i>`, `<name>$sparse_values`)."""
        return {name: feature_spec_entry(name, info) for name, info in self._metadata().items()}

    def num_buckets_for_transformed_feature(self, name: str) -> int:
        info = self._metadata().get(name)
        if info is None or "max" not in info:
            raise ValueError(f"feature {name!r} has no integer domain; features with one: "
                             f"{sorted(n for n, i in self._metadata().items() if 'max' in i)}")
        if info["min"] != 0:
            raise ValueError(f"feature {name!r}: its domain starts at {info['min']}, not 0")
        return int(info["max"]) + 1

    def vocabulary_file_by_name(self, vocab_filename: str) -> str | None:
        """The vocabulary file's path (a GZIP TFRecord file is `<name>.tfrecord.gz`), or None."""
        base = self._saved / "assets" / sanitized_vocab_filename(vocab_filename)
        for path in (base, base.with_name(base.name + ".tfrecord.gz")):
            if path.is_file():
                return str(path)
        return None

    def vocabulary_by_name(self, vocab_filename: str) -> list[bytes]:
        """The vocabulary's entries: a text file's lines, a TFRecord file's records."""
        path = self.vocabulary_file_by_name(vocab_filename)
        if path is None:
            raise ValueError(f"no vocabulary {vocab_filename!r} in {self._saved / 'assets'}")
        if path.endswith(".tfrecord.gz"):
            import tensorflow as tf

            return [bytes(r.numpy()) for r in
                    tf.data.TFRecordDataset(path, compression_type="GZIP")]
        return Path(path).read_bytes().splitlines()

    def vocabulary_size_by_name(self, vocab_filename: str) -> int:
        return len(self.vocabulary_by_name(vocab_filename))

    def load_transform_graph(self) -> Any:
        """The loaded SavedModel (its `transform_features`, `transform_label`)."""
        import tensorflow as tf

        if self._module is None:
            self._module = tf.saved_model.load(str(self._saved))
        return self._module

    def transform_raw_features(self, raw_features: dict[str, Any],
                               drop_unused_features: bool = True) -> dict[str, Any]:
        """Transformed features of a dict of raw `[B]` / `[B, ...]` tensors; keys the graph
        does not take (the label, extra columns) are ignored."""
        fn = self.load_transform_graph().transform_features
        wanted = fn.concrete_functions[0].structured_input_signature[0][0]
        missing = sorted(set(wanted) - set(raw_features))
        if missing:
            raise KeyError(f"transform_raw_features: missing raw features {missing}")
        return dict(fn({k: raw_features[k] for k in wanted}))

    def transform_features_layer(self) -> Any:
        """A Keras layer applying the transform (cached), for a serving model."""
        import keras

        if self._layer is None:
            owner = self

            class TransformFeaturesLayer(keras.layers.Layer):
                def call(self, inputs: dict[str, Any]) -> dict[str, Any]:
                    return owner.transform_raw_features(inputs)

            self._layer = TransformFeaturesLayer(name="transform_features_layer")
        return self._layer
