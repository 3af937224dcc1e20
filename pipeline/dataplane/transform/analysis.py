"""`analysis.json` and the transform_graph directory, written one way for every transform.

The label's part of `analysis.json` is its class vocabulary, or its mean and variance.

Baton encodes the label itself, whatever computes the features: the first analyzer pass also
accumulates the label column (pipeline.dataplane.statistics.accumulators), and this turns the merged
accumulator into the class vocabulary the transform SavedModel's `transform_label` looks up.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from baton.errors import StageError
from baton.pipeline.dataplane.statistics.accumulators import NumericAcc, StringAcc

VERSION = 1


def label_analysis(accs: Mapping[str, Any], raw: Sequence[tuple[Any, ...]],
                   label: Mapping[str, str]) -> dict[str, Any]:
    """The analysis dict without features.

    Args:
        accs: the label's name -> its merged accumulator (train split).
        raw: (name, dtype, shape) of every raw feature, in order (a shape: a tensor feature).
        label: {"name", "dtype", "task"}.
    """
    lab = accs.get(label["name"])
    if lab is None or (isinstance(lab, StringAcc) and not lab.counts) or (
            isinstance(lab, NumericAcc) and not lab.count):
        raise StageError(f"transform: the train split has no rows with label {label['name']!r}")
    if isinstance(lab, StringAcc):
        vocab = sorted(v.decode("utf-8", "replace") for v in lab.counts)
        label_out = {**label, "vocabulary": vocab,
                     "counts": [lab.counts[v.encode("utf-8")] for v in vocab]}
    else:
        label_out = {**label, "vocabulary": [], "mean": lab.mean, "var": lab.var}
    return {"version": VERSION, "raw_features": raw_entries(raw), "features": [],
            "label": label_out}


def raw_entries(raw: Sequence[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """analysis.json's raw_features: name, dtype, and shape for a tensor feature."""
    return [{"name": r[0], "dtype": r[1],
             **({"shape": [int(d) for d in r[2]]} if len(r) > 2 and r[2] else {})}
            for r in raw]


def save_transform_graph(directory: Path, built: Any, spec: Any, analysis: Mapping[str, Any],
                         source: Any, resolved: Mapping[int, list[Any]],
                         raw: Sequence[tuple[str, str, Any]], model_saved: bool = False) -> None:
    """The transform SavedModel (graphs.tft.module, unless `model_saved`: written already,
    dataplane.beam.early_export), analysis.json and feature_spec.json.

    The column kinds (`source` a graphs.column_kinds.ColumnsFn) record each column's constants,
    for a device applying them beside the TFLite model; a user's function records its ref."""
    from baton.graphs.tft import module as tft_module

    if not model_saved:
        tft_module.save(built, directory)
    out = dict(analysis)
    ops = getattr(source, "analysis_ops", None)
    if ops is not None:
        out["features"] = ops(resolved, {name: shape for name, _, shape in raw})
    else:
        out["preprocessing_fn"] = source.ref
    (Path(directory) / "analysis.json").write_text(json.dumps(out, indent=1) + "\n")
    spec.save(directory)
