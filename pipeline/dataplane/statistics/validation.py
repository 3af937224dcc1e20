"""Compare statistics against a schema and list the anomalies.

Kinds (each can be allowed by name in the validate stage's `allow:`):
- missing_column / extra_column / type_mismatch (a tensor column of another shape, too)
- out_of_domain: string values outside the domain (beyond `max_unseen_fraction` of rows), or
  numeric min/max beyond the domain widened by `range_tolerance` of its width. A numeric
  domain inferred from one split is a warning, not an error (`severity`): TFDV infers no
  numeric domains at all, because a split's min and max are where its sample happened to end;
  the same check against a curated schema (`curated=True`) is an error.
- non_finite: explicit NaN or +-inf values in a numeric column
- too_many_missing: missing fraction above the schema's `max_missing_fraction`
- drift: distance to the reference above `drift_threshold`; L-infinity between value
  frequencies for strings, Jensen-Shannon divergence over the reference's 5 % quantile bins
  for numbers (the measures TFDV uses).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

KINDS = ("missing_column", "extra_column", "type_mismatch", "out_of_domain", "non_finite",
         "too_many_missing", "drift")


@dataclasses.dataclass(frozen=True)
class Anomaly:
    split: str
    column: str
    kind: str
    message: str
    value: float | None = None
    severity: str = "error"  # "warning": recorded and shown, never blocks

    def __str__(self) -> str:
        warn = "warning: " if self.severity == "warning" else ""
        return f"{warn}[{self.split}] {self.column}: {self.kind}: {self.message}"


def js_divergence(p: np.ndarray, q: np.ndarray) -> float:
    p = p / p.sum() if p.sum() else p
    q = q / q.sum() if q.sum() else q
    m = 0.5 * (p + q)

    def kl(a: np.ndarray, b: np.ndarray) -> float:
        mask = a > 0
        return float((a[mask] * np.log2(a[mask] / b[mask])).sum())

    return 0.5 * kl(p, m) + 0.5 * kl(q, m)


def numeric_drift(reference_q: Mapping[str, float | None], current_q: Mapping[str, float | None]
                  ) -> float:
    """JS divergence between the current data and the reference over the reference's bins."""
    qs = np.array([float(k) for k in reference_q])
    ref = np.array([np.nan if v is None else v for v in reference_q.values()], float)
    cur_levels = np.array([float(k) for k in current_q])
    cur = np.array([np.nan if v is None else v for v in current_q.values()], float)
    if np.isnan(ref).any() or np.isnan(cur).any():
        return 0.0
    edges = np.unique(ref)
    if len(edges) < 2:
        return 0.0
    ref_cdf = np.interp(edges, ref, qs)  # reference mass per bin via its quantiles
    cur_cdf = np.interp(edges, cur, cur_levels, left=0.0, right=1.0)
    ref_p = np.diff(np.concatenate([[0.0], ref_cdf, [1.0]]))
    cur_p = np.diff(np.concatenate([[0.0], cur_cdf, [1.0]]))
    return js_divergence(np.clip(ref_p, 0, None), np.clip(cur_p, 0, None))


def string_drift(reference: Mapping[str, float], current: Mapping[str, int], count: int) -> float:
    """L-infinity distance between value frequencies."""
    keys = set(reference) | set(current)
    if not count:
        return 0.0
    return max((abs(reference.get(k, 0.0) - current.get(k, 0) / count) for k in keys), default=0.0)


def check(statistics: Mapping[str, Any], schema: Mapping[str, Any], *, drift_threshold: float,
          max_unseen_fraction: float, range_tolerance: float, curated: bool = False
          ) -> list[Anomaly]:
    """Every anomaly of every split in `statistics` against `schema`.

    `curated`: the schema is a fixed contract (validate's `schema_path`), so its numeric
    domains are errors; an inferred schema's numeric domains give warnings.
    """
    out: list[Anomaly] = []
    want = schema["features"]
    for split, s in statistics["splits"].items():
        have = s["features"]
        for name in want:
            if name not in have:
                out.append(Anomaly(split, name, "missing_column", "column in the schema is absent"))
        for name, f in have.items():
            if name not in want:
                out.append(Anomaly(split, name, "extra_column", "column not in the schema"))
                continue
            w = want[name]
            if f["type"] != w["type"] or f.get("shape", []) != w.get("shape", []):
                out.append(Anomaly(split, name, "type_mismatch",
                                   f"expected {_type(w)}, found {_type(f)}"))
                continue
            out.extend(_check_column(split, name, f, w, drift_threshold, max_unseen_fraction,
                                     range_tolerance, curated))
    return out


def _type(entry: Mapping[str, Any]) -> str:
    """`float32`, or a tensor's `float32[64, 64, 3]`."""
    shape = entry.get("shape")
    return f"{entry['type']}{list(shape)}" if shape else str(entry["type"])


def _check_column(split: str, name: str, f: Mapping[str, Any], w: Mapping[str, Any],
                  drift_threshold: float, max_unseen: float, tol: float, curated: bool
                  ) -> list[Anomaly]:
    out = []
    rows = max(f["rows"], 1)
    limit = w.get("presence", {}).get("max_missing_fraction", 1.0)
    if f["missing"] / rows > limit:
        out.append(Anomaly(split, name, "too_many_missing",
                           f"{f['missing'] / rows:.1%} missing, at most {limit:.1%} allowed",
                           f["missing"] / rows))
    dom = w.get("domain", {})
    ref = w.get("reference", {})
    if f["type"] == "float32":
        bad = f.get("nan", 0) + f.get("inf", 0)
        if bad:
            out.append(Anomaly(split, name, "non_finite",
                               f"{f.get('nan', 0)} NaN and {f.get('inf', 0)} infinite values", bad))
        lo, hi = dom.get("min"), dom.get("max")
        if lo is not None and hi is not None and f["count"]:
            slack = tol * max(hi - lo, abs(hi), abs(lo), 1e-12)
            if f["min"] < lo - slack or f["max"] > hi + slack:
                out.append(Anomaly(split, name, "out_of_domain",
                                   f"values in [{f['min']:.4g}, {f['max']:.4g}], domain "
                                   f"[{lo:.4g}, {hi:.4g}] (+-{tol:.0%})"
                                   + ("" if curated else ", inferred from one split"),
                                   severity="error" if curated else "warning"))
        if "quantiles" in ref and f["count"]:
            d = numeric_drift(ref["quantiles"], f["quantiles"])
            if d > drift_threshold:
                out.append(Anomaly(split, name, "drift",
                                   f"Jensen-Shannon divergence {d:.3f} > {drift_threshold}", d))
        return out
    values = f.get("values") or dict(f["top"])
    if "values" in dom and f["count"]:
        allowed = set(dom["values"])
        unseen = {v: c for v, c in values.items() if v not in allowed}
        frac = sum(unseen.values()) / f["count"]
        if f["distinct"] > len(values):  # counts beyond what the statistics kept: be strict
            frac = max(frac, (f["distinct"] - len(allowed)) / max(f["distinct"], 1))
        if unseen and frac > max_unseen:
            shown = ", ".join(sorted(unseen)[:5])
            out.append(Anomaly(split, name, "out_of_domain",
                               f"{frac:.1%} of values outside the domain ({shown})", frac))
    if "frequencies" in ref and f["count"]:
        d = string_drift(ref["frequencies"], values, f["count"])
        if d > drift_threshold:
            out.append(Anomaly(split, name, "drift", f"L-infinity distance {d:.3f} > "
                                                     f"{drift_threshold}", d))
    return out
