"""Turn merged accumulators into `analysis.json`: the transform's constants, and its feature spec.

The plan (which transform each column gets) is resolved by the stage from its config and the
examples schema; this module only does arithmetic on the accumulated summaries, so the same
function serves the Beam combiner and the tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from baton.errors import StageError
from baton.graphs.transform import CATEGORICAL_KINDS, vocab_size
from baton.pipeline.dataplane.accumulators import NumericAcc, StringAcc

VERSION = 1


def finalize(
    accs: Mapping[str, Any],
    plan: Mapping[str, Mapping[str, Any]],
    raw: Sequence[tuple[Any, ...]],
    label: Mapping[str, str],
) -> dict[str, Any]:
    """The analysis dict.

    Args:
        accs: column name -> merged accumulator (features and label, train split).
        plan: column name -> {"kind", "buckets", "top_k", "oov_buckets", "min_frequency"}.
        raw: (name, dtype) or (name, dtype, shape) of every raw feature, in order; a shape
            (a tensor feature) goes into its raw_features entry and its op.
        label: {"name", "dtype", "task"}.
    """
    lab = accs.get(label["name"])
    if lab is None or (isinstance(lab, StringAcc) and not lab.counts) or (
            isinstance(lab, NumericAcc) and not lab.count):
        raise StageError(f"transform: the train split has no rows with label {label['name']!r}")
    shapes = {r[0]: [int(d) for d in r[2]] for r in raw if len(r) > 2 and r[2]}
    ops = []
    for name, step in plan.items():
        acc, kind = accs[name], step["kind"]
        op: dict[str, Any] = {"name": name, "source": name, "kind": kind}
        if name in shapes:
            op["shape"] = shapes[name]
        if isinstance(acc, NumericAcc):
            op.update(count=acc.count, missing=acc.missing)
            if kind in ("zscore", "minmax"):
                if not acc.count:
                    raise StageError(f"transform: column {name!r} has no finite values in train; "
                                     f"cannot compute {kind} (exclude it or use identity)")
                op.update(mean=acc.mean, var=acc.var, min=acc.min, max=acc.max)
            elif kind == "bucketize":
                assert acc.sketch is not None  # bucketized columns always keep one
                qs = np.linspace(0, 1, int(step["buckets"]) + 1)[1:-1]
                bounds = np.unique(np.float32(acc.sketch.quantiles(qs)))
                op["boundaries"] = [float(b) for b in bounds if np.isfinite(b)]
        else:
            op.update(count=acc.count, missing=acc.missing)
            if kind == "vocabulary":
                top = acc.top(step.get("top_k"), int(step.get("min_frequency", 1)))
                op["vocabulary"] = [v.decode("utf-8", "replace") for v, _ in top]
                op["frequencies"] = [c for _, c in top]
                op["oov_buckets"] = int(step.get("oov_buckets", 1))
                op["distinct"] = len(acc.counts)
            elif kind == "hash":
                op["buckets"] = int(step["buckets"])
        ops.append(op)
    if isinstance(lab, StringAcc):
        vocab = sorted(v.decode("utf-8", "replace") for v in lab.counts)
        label_out = {**label, "vocabulary": vocab,
                     "counts": [lab.counts[v.encode("utf-8")] for v in vocab]}
    else:
        label_out = {**label, "vocabulary": [], "mean": lab.mean, "var": lab.var}
    return {
        "version": VERSION,
        "raw_features": [{"name": r[0], "dtype": r[1],
                          **({"shape": shapes[r[0]]} if r[0] in shapes else {})} for r in raw],
        "features": ops,
        "label": label_out,
    }


def feature_spec(analysis: Mapping[str, Any]) -> Any:
    """The `graphs.feature_spec.FeatureSpec` the transform produces."""
    from baton.graphs.feature_spec import Feature, FeatureSpec, Label, RawFeature

    feats = tuple(
        Feature(op["name"], "categorical", vocab_size(op)) if op["kind"] in CATEGORICAL_KINDS
        else Feature(op["name"], "numeric", shape=tuple(int(d) for d in op.get("shape", ())))
        for op in analysis["features"]
    )
    lab = analysis["label"]
    return FeatureSpec(
        raw_features=tuple(RawFeature(r["name"], r["dtype"], tuple(int(d) for d in r.get("shape", ())))
                           for r in analysis["raw_features"]),
        features=feats,
        label=Label(lab["name"], lab["task"], tuple(lab.get("vocabulary", ()))),
    )
