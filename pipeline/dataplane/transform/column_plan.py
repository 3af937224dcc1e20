"""The plan the built-in column kinds resolve to for one examples schema.

The transform stage's config and the federated stage's `transform:` mapping share the settings
(`TransformSettings`, graphs.transform_settings: the federated stage's settings live below
pipeline, where k8s reads them too); `plan_columns` resolves them against the examples' columns
to the plan that graphs.column_kinds turns into a preprocessing_fn (column -> {"kind",
"buckets", "top_k", "min_frequency", "oov_buckets"}). Light on purpose: stage modules import it
at their top.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from baton.errors import StageError
from baton.graphs.transform_settings import ColumnTransform as ColumnTransform
from baton.graphs.transform_settings import Kind as Kind
from baton.graphs.transform_settings import TransformSettings as TransformSettings


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
