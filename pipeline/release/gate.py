"""The release gate: absolute thresholds, per-slice thresholds, and a change threshold against
the last blessed model. Its decision, with every check, is the `blessing` artifact.

Spec form (the `gate:` mapping of an evaluate stage)::

    gate:
      thresholds: {accuracy: 0.9, loss: {max: 0.4}}   # a bare number is the worst acceptable
                                                       # value in the metric's good direction
      slices:                                          # per slice: "feature" = every value,
        island: {accuracy: 0.8}                        # "feature=value" = one value
        "sex=<missing>": {accuracy: 0.5}
      change: {accuracy: 0.02, loss: 0.1}              # the largest allowed worsening against
                                                       # the baseline (absolute units)

A bare number avoids the classic mistake of writing `loss: 0.4` and meaning "at least 0.4".

A metric is Baton's own (pipeline.release.metrics), a Keras metric the model was trained with
(its `metrics:` or its compile()'s, by Keras name: `sparse_categorical_accuracy`), or any Keras
metric identifier. Whatever the gate says, a model whose outputs or metrics are not finite is
not blessed: NaN passes no threshold, and a NaN answer is no answer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from baton.pipeline.release import metrics as M


@dataclasses.dataclass(frozen=True)
class Bound:
    """An explicit range for a metric; either end may be omitted."""

    min: float | None = None
    max: float | None = None

    def __post_init__(self) -> None:
        if self.min is None and self.max is None:
            raise ValueError("a bound needs min or max (or give a bare number). Received: {}")


Threshold = float | Bound


@dataclasses.dataclass(frozen=True)
class Gate:
    thresholds: dict[str, Threshold] = dataclasses.field(default_factory=dict)
    slices: dict[str, dict[str, Threshold]] = dataclasses.field(default_factory=dict)
    change: dict[str, float] = dataclasses.field(default_factory=dict)


def bounds(metric: str, threshold: Threshold, higher: bool | None = None
           ) -> tuple[float | None, float | None]:
    """(min, max) of a threshold; a bare number bounds the metric's bad direction (`higher`:
    whether higher is better; None: Baton's direction for its name)."""
    if isinstance(threshold, Bound):
        return threshold.min, threshold.max
    if higher is None:
        higher = M.higher_is_better(metric)
    return (threshold, None) if higher else (None, threshold)


def _higher(name: str, directions: Mapping[str, bool | None] | None) -> bool | None:
    """Whether higher is better for `name`: Baton's own metrics by their name, a Keras metric
    as Keras records it (`directions`, its `_direction`); None when nobody knows."""
    if M.is_known(name) or directions is None or name not in directions:
        return M.higher_is_better(name)
    return directions[name]


_NO_DIRECTION = ("no direction is known for this metric (a user metric): give its threshold as "
                 "{min: ...} or {max: ...}")


def slice_feature(key: str) -> tuple[str, str | None]:
    """"island" -> ("island", None); "island=Dream" -> ("island", "Dream")."""
    feature, sep, value = key.partition("=")
    return feature.strip(), (value.strip() if sep else None)


def spec_problems(gate: Gate, slices: Iterable[str], where: str = "gate",
                  reported: Iterable[str] = (), any_name: bool = False) -> list[str]:
    """Problems visible before anything runs: unknown metric names, slices not computed.

    `reported`: metric names the spec's train stages declare; `any_name`: a train stage's own
    model may compile() metrics of any name, so names are checked once it has trained."""
    problems = []
    slices = list(slices)
    known = sorted(set(M.CLASSIFICATION + M.REGRESSION))
    fine = _known_names(gate, set(reported), any_name)
    for section, names in (("thresholds", gate.thresholds), ("change", gate.change)):
        for name in names:
            if name not in fine:
                problems.append(_unknown_metric(f"{where}.{section}.{name}", name, known))
    for key, thresholds in gate.slices.items():
        feature, _ = slice_feature(key)
        if feature not in slices:
            from baton.configs import did_you_mean

            problems.append(
                f"{where}.slices.{key}: unknown slice {feature!r}{did_you_mean(feature, slices)}; "
                f"the stage slices by {slices or 'nothing'} (add it to `slices:`)"
            )
        for name in thresholds:
            if name not in fine:
                problems.append(_unknown_metric(f"{where}.slices.{key}.{name}", name, known))
    return problems


def _known_names(gate: Gate, reported: set[str], any_name: bool) -> set[str]:
    """The gate's metric names that may be gated: Baton's, the declared ones, Keras'."""
    names = {*gate.thresholds, *gate.change, *(m for ths in gate.slices.values() for m in ths)}
    fine = {n for n in names if M.is_known(n) or n in reported or any_name}
    if names - fine:  # only then: Keras' names cost an import
        from baton.graphs.keras_names import metric_names

        fine |= names & set(metric_names())
    return fine


def _unknown_metric(path: str, name: str, known: list[str]) -> str:
    from baton.configs import did_you_mean
    from baton.graphs.keras_names import metric_names

    return (f"{path}: unknown metric {name!r}{did_you_mean(name, [*known, *metric_names()])}; "
            f"known metrics: {', '.join(known)}, precision/<class>, recall/<class>, a Keras "
            "metric identifier (sparse_categorical_accuracy, AUC, ...) or a metric the model "
            "is trained with (the train stage's metrics:)")


def decide(
    gate: Gate,
    overall: Mapping[str, float],
    by_slice: Mapping[str, Mapping[str, Mapping[str, float]]],
    baseline: Mapping[str, float] | None,
    nonfinite_rows: int = 0,
    directions: Mapping[str, bool | None] | None = None,
) -> dict[str, Any]:
    """The blessing: every check with its value, threshold and baseline, and the verdict.

    A metric the gate names but the evaluation did not produce (e.g. AUC when the eval split
    has one class) fails its check: a gate that silently passes on missing data is worse than
    a loud one. So do outputs that are not finite (`nonfinite_rows` of the eval rows) and any
    overall metric that is not finite, gate or no gate. `directions`: whether higher is better
    for the Keras metrics the evaluation computed (None: unknown, so a bare threshold or a
    change on it fails, naming the fix); Baton's own metrics have theirs.
    """
    import math

    checks: list[dict[str, Any]] = []
    if nonfinite_rows:
        checks.append({"kind": "finite", "metric": "outputs", "slice": None,
                       "value": nonfinite_rows, "threshold": 0, "passed": False,
                       "note": f"the model's outputs are NaN or infinite for {nonfinite_rows} "
                               f"of {int(overall.get('example_count', 0))} eval rows"})
    checks += [{"kind": "finite", "metric": name, "slice": None, "value": value,
                "threshold": None, "passed": False, "note": f"{name} is {value}: not finite"}
               for name, value in sorted(overall.items())
               if isinstance(value, float) and not math.isfinite(value)]
    for name, th in gate.thresholds.items():
        checks.append(_absolute(name, th, overall.get(name), None, _higher(name, directions)))
    for key, ths in gate.slices.items():
        feature, only = slice_feature(key)
        values = by_slice.get(feature, {})
        targets = [only] if only is not None else sorted(values)
        for v in targets:
            for name, th in ths.items():
                checks.append(_absolute(name, th, values.get(v, {}).get(name), f"{feature}={v}",
                                        _higher(name, directions)))
    for name, allowed in gate.change.items():
        value = overall.get(name)
        base = None if baseline is None else baseline.get(name)
        check: dict[str, Any] = {"kind": "change", "metric": name, "slice": None, "value": value,
                 "baseline": base, "threshold": allowed}
        if base is None:
            check.update(passed=True, note="no blessed baseline yet")
        elif value is None:
            check.update(passed=False, note="metric not computed")
        elif (higher := _higher(name, directions)) is None:
            check.update(passed=False, note=_NO_DIRECTION)
        else:
            worse = (base - value) if higher else (value - base)
            check.update(change=value - base, passed=worse <= allowed)
        checks.append(check)
    failed = [c for c in checks if not c["passed"]]
    return {"blessed": not failed, "checks": checks, "failed": [describe(c) for c in failed]}


def _absolute(name: str, th: Threshold, value: float | None, where: str | None,
              higher: bool | None) -> dict:
    if higher is None and not isinstance(th, Bound):
        return {"kind": "threshold", "metric": name, "slice": where, "value": value,
                "threshold": {"min": None, "max": None}, "passed": False, "note": _NO_DIRECTION}
    lo, hi = bounds(name, th, higher)
    check: dict[str, Any] = {"kind": "threshold", "metric": name, "slice": where,
                             "value": value, "threshold": {"min": lo, "max": hi}}
    if value is None:
        check.update(passed=False, note="metric not computed")
    else:
        check["passed"] = (lo is None or value >= lo) and (hi is None or value <= hi)
    return check


def describe(check: Mapping[str, Any]) -> str:
    """One line a person reads in the failure message: what, where, value vs threshold."""
    where = f" on slice {check['slice']}" if check.get("slice") else ""
    value = check.get("value")
    if check["kind"] == "finite":
        return str(check["note"])
    if check.get("note") in ("metric not computed", _NO_DIRECTION):
        what = "not computed" if check["note"] == "metric not computed" else _NO_DIRECTION
        return f"{check['metric']}{where}: {what}"
    if check["kind"] == "change":
        return (f"{check['metric']}{where} = {value:.4f} vs baseline {check['baseline']:.4f}: "
                f"worse by more than the allowed {check['threshold']}")
    th = check["threshold"]
    parts = [f">= {th['min']}" if th["min"] is not None else "",
             f"<= {th['max']}" if th["max"] is not None else ""]
    return f"{check['metric']}{where} = {value:.4f}, required {' and '.join(p for p in parts if p)}"
