"""What a transform computes, as settings: the column kinds or the user's preprocessing_fn.

The transform stage's Config and the federated stage's `transform:` are both one
`TransformSettings`. They describe the tf.Transform graph (graphs.column_kinds builds it from
the plan pipeline.dataplane.column_plan resolves them to), and they live here, in graphs, so
that the federated stage's settings (strategies.federated_settings), which k8s reads too, can
hold them: neither strategies nor k8s may import pipeline. Plain dataclasses: no TensorFlow.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

Kind = Literal["zscore", "minmax", "identity", "bucketize", "vocabulary", "hash", "drop"]


@dataclasses.dataclass(frozen=True)
class ColumnTransform:
    kind: Kind
    buckets: int = 10  # bucketize: quantile buckets; hash: hash buckets
    top_k: int | None = None  # vocabulary: keep the k most frequent values
    min_frequency: int = 1
    oov_buckets: int = 1

    def __post_init__(self) -> None:
        if self.buckets < 1 or self.oov_buckets < 1 or self.min_frequency < 1:
            raise ValueError(f"buckets, oov_buckets and min_frequency must be >= 1. Received: "
                             f"{self.buckets}, {self.oov_buckets}, {self.min_frequency}")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top_k must be >= 1 or null. Received: {self.top_k}")


@dataclasses.dataclass(frozen=True)
class TransformSettings:
    """What a transform computes: the column kinds (defaults, `columns:` overrides) or the
    user's preprocessing_fn. The transform stage's Config and the federated stage's
    `transform:` both are one."""

    numeric: Literal["zscore", "minmax", "identity", "bucketize"] = "zscore"
    images: Literal["identity", "zscore", "minmax"] = "identity"  # tensor features (images)
    categorical: Literal["vocabulary", "hash"] = "vocabulary"
    top_k: int | None = None
    oov_buckets: int = 1
    buckets: int = 10
    columns: dict[str, ColumnTransform] = dataclasses.field(default_factory=dict)
    # "module:function": the user's tf.Transform-style preprocessing_fn (import baton.tft as
    # tft); the column settings above are then unused
    preprocessing_fn: str | None = None

    def __post_init__(self) -> None:
        if self.preprocessing_fn is not None:
            from baton.graphs.user_refs import is_ref

            if not is_ref(self.preprocessing_fn):
                raise ValueError("preprocessing_fn must be 'module:function'. Received: "
                                 f"{self.preprocessing_fn!r}")
