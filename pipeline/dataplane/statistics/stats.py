"""Per-feature statistics from accumulators, and the schema inferred from them.

`statistics.json` holds, per split and column: count, missing, mean, std, min, max, quantiles,
a histogram (numeric), top values and the number of distinct values (strings). The inferred
`schema.json` records what the data should look like (type, presence, domain) plus a compact
reference distribution (quantiles or value frequencies) that `validate` measures drift against.

A tensor column (an image) is summarised as one feature: `shape`, `count` and `missing` in
rows, `values` (how many numbers the present rows hold), and mean, std, min, max, quantiles,
histogram, NaN/inf/zero counts over all of those numbers (one distribution for the whole
tensor, not one per element: thousands of per-pixel cards would be unreadable, and the
element-wide range and distribution are what a broken decoder or scale changes).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from baton.pipeline.dataplane.statistics.accumulators import NumericAcc, StringAcc, TensorAcc

STATS_FILE = "statistics.json"
SCHEMA_FILE = "schema.json"
QUANTILES = np.linspace(0, 1, 21)  # every 5 %
HIST_BINS = 20
TOP = 20
MAX_VALUES = 1000  # string columns with at most this many distinct values keep every count


def _f(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def feature_stats(acc: Any, rows: int) -> dict[str, Any]:
    """One column's statistics dict."""
    if isinstance(acc, NumericAcc):
        assert acc.sketch is not None, "statistics keep a quantile sketch for every column"
        qs = acc.sketch.quantiles(QUANTILES)
        edges, counts = acc.sketch.histogram(HIST_BINS, acc.min, acc.max)
        if isinstance(acc, TensorAcc):  # counts of rows; the rest over the values they hold
            scale = acc.count / max(float(sum(counts)), 1.0)
            counts = [c * scale for c in counts]  # the sketch holds a sample of the values
            tensor = {"shape": list(acc.shape), "count": acc.present, "values": acc.count}
        else:
            tensor = {"count": acc.count}
        return {
            "type": "float32", "rows": rows, **tensor, "missing": acc.missing,
            "nan": acc.nan, "inf": acc.inf, "zeros": acc.zeros,
            "mean": _f(acc.mean) if acc.count else None,
            "std": _f(acc.var**0.5) if acc.count else None,
            "min": _f(acc.min), "max": _f(acc.max),
            "quantiles": {f"{q:.2f}": _f(v) for q, v in zip(QUANTILES, qs, strict=True)},
            "histogram": {"edges": edges, "counts": [round(c, 1) for c in counts]},
        }
    assert isinstance(acc, StringAcc)
    top = acc.top(TOP)
    every = acc.top() if len(acc.counts) <= MAX_VALUES else []
    return {
        "type": "string", "rows": rows, "count": acc.count, "missing": acc.missing,
        "distinct": len(acc.counts),
        "top": [[v.decode("utf-8", "backslashreplace"), c] for v, c in top],
        "avg_length": (sum(len(v) * c for v, c in acc.counts.items()) / acc.count
                       if acc.count else 0.0),
        "values": {v.decode("utf-8", "backslashreplace"): c for v, c in every},
    }


def split_stats(accs: Mapping[str, Any]) -> dict[str, Any]:
    rows = 0
    for acc in accs.values():
        if isinstance(acc, TensorAcc):
            rows = max(rows, acc.present + acc.missing)
            continue
        rows = max(rows, acc.count + acc.missing + getattr(acc, "nan", 0) + getattr(acc, "inf", 0))
    return {"rows": rows, "features": {n: feature_stats(a, rows) for n, a in accs.items()}}


def infer_schema(stats: Mapping[str, Any], label: str, task: str, *,
                 reference_split: str = "train", max_domain: int = 1000,
                 missing_slack: float = 0.05) -> dict[str, Any]:
    """The schema implied by one split's statistics (the training data by default)."""
    ref = stats["splits"][reference_split]
    features: dict[str, Any] = {}
    for name, fs in ref["features"].items():
        rows = max(fs["rows"], 1)
        observed_missing = fs["missing"] / rows
        entry: dict[str, Any] = {
            "type": fs["type"],
            "presence": {"max_missing_fraction": round(min(1.0, observed_missing + missing_slack), 4)},
        }
        if fs.get("shape"):
            entry["shape"] = list(fs["shape"])
        if fs["type"] == "float32":
            entry["domain"] = {"min": fs["min"], "max": fs["max"]}
            entry["reference"] = {"quantiles": fs["quantiles"]}
        else:
            values = fs.get("values") or dict(fs["top"])
            if fs["distinct"] <= max_domain and len(values) >= fs["distinct"]:
                entry["domain"] = {"values": sorted(values)}
            entry["reference"] = {
                "frequencies": {v: c / max(fs["count"], 1) for v, c in values.items()}}
        features[name] = entry
    return {"label": label, "task": task, "reference_split": reference_split,
            "features": features}


def save_json(value: Any, path: Path) -> None:
    path.write_text(json.dumps(value, indent=1) + "\n")


def load_statistics(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    return json.loads((p / STATS_FILE if p.is_dir() else p).read_text())
