"""Apply the analysis to record batches with numpy: the Beam side of the transform.

Must match `graphs.transform` exactly (same float32 arithmetic, same ids; see its docstring for
the semantics). String columns arrive dictionary-encoded, so vocabulary lookups and hashes run
once per distinct value per batch and rows are mapped with one numpy gather. A tensor column
(`fixed_size_list<float32>[K]`) is transformed elementwise as `[rows, K]`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from baton.graphs.transform import NUMERIC_KINDS, scale_params
from baton.pipeline.dataplane.reader import (
    dictionary_parts,
    is_tensor,
    numeric_values,
    tensor_values,
)


def _hash_buckets(values: list[bytes], buckets: int) -> np.ndarray:
    """TensorFlow's `to_hash_bucket_fast` on a few distinct values (identical to the graph)."""
    if buckets == 1 or not values:
        return np.zeros(len(values), np.int64)
    import tensorflow as tf

    return tf.strings.to_hash_bucket_fast(tf.constant(values, tf.string), buckets).numpy()


class Applier:
    """The analysis compiled into numpy-friendly constants; `apply(batch)` per record batch."""

    def __init__(self, analysis: Mapping[str, Any]) -> None:
        self.analysis = analysis
        self.ops = list(analysis["features"])
        self._lookups: dict[str, dict[bytes, int]] = {}
        for op in self.ops:
            if op["kind"] == "vocabulary":
                self._lookups[op["name"]] = {
                    v.encode("utf-8"): i for i, v in enumerate(op["vocabulary"])}
        label = analysis["label"]
        self.label_name = label["name"]
        self.classification = label["task"] == "classification"
        self._label_ids = {v.encode("utf-8"): i for i, v in enumerate(label.get("vocabulary", []))}

    def features(self, batch: Any) -> dict[str, np.ndarray]:
        """Transformed features of a pyarrow RecordBatch (float32 numeric, int64 categorical)."""
        return {op["name"]: self._apply_op(op, batch.column(op["source"])) for op in self.ops}

    def label(self, batch: Any) -> tuple[np.ndarray, np.ndarray]:
        """(label values, keep mask): class ids int64 or float32 targets; unknown/missing dropped."""
        col = batch.column(self.label_name)
        if self.classification:
            values, idx = dictionary_parts(col)
            ids = np.array([self._label_ids.get(v, -1) for v in values], np.int64)
            out = ids[idx] if len(values) else np.zeros(len(idx), np.int64)
            return out, out >= 0
        y = numeric_values(col)
        return y, ~np.isnan(y)

    def _apply_op(self, op: Mapping[str, Any], col: Any) -> np.ndarray:
        kind = op["kind"]
        if kind in NUMERIC_KINDS:  # a tensor column: [rows, K], elementwise
            x = tensor_values(col) if is_tensor(col) else numeric_values(col)
            if kind == "identity":
                y = x
            else:
                offset, scale = scale_params(op)
                y = (x - np.float32(offset)) * np.float32(scale)
            return np.where(np.isnan(x), np.float32(0), y).astype(np.float32, copy=False)
        if kind == "bucketize":
            x = numeric_values(col)
            bounds = np.asarray(op["boundaries"], np.float32)
            ids = np.searchsorted(bounds, x, side="right").astype(np.int64)
            ids[np.isnan(x)] = len(bounds) + 1
            return ids
        values, idx = dictionary_parts(col)
        if kind == "hash":
            buckets = int(op["buckets"])
            per_value = _hash_buckets(values, buckets)
        else:
            lookup, v = self._lookups[op["name"]], len(op["vocabulary"])
            per_value = np.array([lookup.get(s, -1) for s in values], np.int64)
            unknown = np.nonzero(per_value < 0)[0]
            if len(unknown):
                hashed = _hash_buckets([values[i] for i in unknown], int(op["oov_buckets"]))
                per_value[unknown] = v + 1 + hashed
            buckets = v
        per_value = np.asarray(per_value, np.int64)
        per_value[[i for i, s in enumerate(values) if s == b""]] = buckets
        return per_value[idx] if len(values) else np.zeros(len(idx), np.int64)
