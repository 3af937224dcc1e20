"""The label's part of `analysis.json`: its class vocabulary, or its mean and variance.

Baton encodes the label itself, whatever computes the features: the first analyzer pass also
accumulates the label column (pipeline.dataplane.accumulators), and this turns the merged
accumulator into the class vocabulary the transform SavedModel's `transform_label` looks up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from baton.errors import StageError
from baton.pipeline.dataplane.accumulators import NumericAcc, StringAcc

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
    return {
        "version": VERSION,
        "raw_features": [{"name": r[0], "dtype": r[1],
                          **({"shape": [int(d) for d in r[2]]} if len(r) > 2 and r[2] else {})}
                         for r in raw],
        "features": [],
        "label": label_out,
    }
