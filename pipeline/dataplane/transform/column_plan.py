"""The built-in column kinds as settings, and the plan they resolve to for one examples schema.

The transform stage's config and the federated stage's `transform:` mapping share these
settings; `plan_columns` resolves them against the examples' columns to the plan that
graphs.column_kinds turns into a preprocessing_fn (column -> {"kind", "buckets", "top_k",
"min_frequency", "oov_buckets"}). Light on purpose: stage modules import it at their top.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from baton.errors import StageError

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


def plan_columns(config: TransformSettings, schema: Any) -> dict[str, dict]:
    """Column -> transform settings, from the defaults and `columns:` overrides."""
    from baton.configs import did_you_mean

    names = [c.name for c in schema.features]
    for name in config.columns:
        if name not in names:
            raise StageError(f"transform.columns: no feature column {name!r}"
                             f"{did_you_mean(name, names)}; feature columns are {names}")
    plan = {}
    pixels = schema.image_pixels
    for col in schema.features:
        kind = config.numeric if col.is_numeric else config.categorical
        default = ColumnTransform(
            config.images if col.name in pixels or col.shape else kind, buckets=config.buckets,
            top_k=config.top_k, oov_buckets=config.oov_buckets)
        step = config.columns.get(col.name, default)
        if step.kind == "drop":
            continue
        if col.shape and step.kind not in ("zscore", "minmax", "identity"):
            raise StageError(f"transform.columns.{col.name}: kind {step.kind!r} does not fit a "
                             f"tensor column of shape {list(col.shape)}; tensors take "
                             "identity, zscore or minmax (over all of their values) or drop")
        numeric_kind = step.kind in ("zscore", "minmax", "identity", "bucketize")
        if numeric_kind != col.is_numeric:
            raise StageError(f"transform.columns.{col.name}: kind {step.kind!r} does not fit a "
                             f"{col.dtype} column")
        plan[col.name] = dataclasses.asdict(step)
    if not plan:
        raise StageError("transform: every feature column is dropped; nothing to train on")
    return plan
