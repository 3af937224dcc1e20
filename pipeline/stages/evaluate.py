"""Evaluate: metrics on the eval split, sliced, and the release gate's decision (the blessing).

The model is run behind the transform graph on the RAW eval examples, as it will be served,
so a transform bug shows up here rather than in production. The baseline for the change
threshold is the last blessed model of the same pipeline, found through lineage; when its
model and transform still exist it is re-evaluated on the current eval split (as TFX does), so
the comparison is on the same rows, otherwise its recorded metrics are used.

A model that fails the gate is not an error here: the blessing (blessed: false, with every
failed check) is the artifact, and `push` refuses it. That keeps the report and the decision
inspectable for exactly the runs that need inspecting. A model whose outputs or metrics are not
finite (NaN for rows with missing values) is never blessed, whatever the gate says.

Besides Baton's own metrics (pipeline.release.metrics), the gate takes the Keras metrics the
model was trained with (its `metrics:` and its compile()'s, by their Keras names, e.g.
`sparse_categorical_accuracy`) and any Keras metric identifier, computed here on the raw eval
rows through the transform; on a shared name (accuracy, auc, precision, recall, loss) Baton's
own is the one gated.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Literal

from baton.configs import did_you_mean
from baton.errors import StageError
from baton.pipeline.context import StageContext
from baton.pipeline.release.gate import Gate, slice_feature
from baton.strategies.job import HISTORY_FILE

INPUTS = {"model": True, "transform_graph": True, "examples": True}
OUTPUTS = ("evaluation", "blessing")
CODE_DEPS = ("baton.pipeline.release.data", "baton.pipeline.release.metrics", "baton.pipeline.release.gate",
             "baton.pipeline.release.report", "baton.pipeline.release.baseline",
             "baton.graphs.model_outputs", "baton.graphs.metric_records")
CACHEABLE = True


@dataclasses.dataclass(frozen=True)
class Config:
    """slices: raw categorical features to slice metrics by. gate: see pipeline.release.gate."""

    slices: tuple[str, ...] = ()
    gate: Gate = dataclasses.field(default_factory=Gate)
    split: str = "eval"
    calibration_bins: int = 10
    baseline: Literal["lineage", "none"] = "lineage"
    batch_size: int = 256

    def __post_init__(self) -> None:
        if self.calibration_bins < 1:
            raise ValueError(f"calibration_bins must be >= 1. Received: {self.calibration_bins}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1. Received: {self.batch_size}")


def check_spec(config: Config, stage: Any, spec: Any) -> list[str]:
    """Refuse gates that name unknown metrics or slices before anything (training) runs."""
    from baton.pipeline.release.gate import spec_problems

    reported, any_name = _declared_metrics(spec)
    return spec_problems(config.gate, config.slices, reported=reported, any_name=any_name)


def _declared_metrics(spec: Any) -> tuple[set[str], bool]:
    """(metric names the spec's train stages declare in `metrics:`, whether a name may be any:
    an own model's compile() may add metrics of any name, and a `module:Class` metric (or a
    function returning a Metric) reports the name its object carries, known once it exists)."""
    names: set[str] = set()
    any_name = False
    for st in getattr(spec, "stages", ()):
        if st.type != "train":
            continue
        config = st.config or {}
        any_name = any_name or ":" in str(config.get("model", ""))
        for m in config.get("metrics") or ():
            names.add(str(m).split(":")[-1].split(".")[-1])
            any_name = any_name or ":" in str(m)
    return names, any_name


# Checked as soon as the transform graph exists, before train runs (see check_inputs).
EARLY_INPUTS = ("transform_graph",)


def check_inputs(config: Config, inputs: dict[str, Path]) -> list[str]:
    """Gate and slice names that only the data can settle (a slice column the data lacks, a
    metric that does not fit the task or its classes), refused before training starts."""
    from baton.graphs.feature_spec import FeatureSpec

    if "transform_graph" not in inputs:
        return []
    return _spec_problems(config, FeatureSpec.load(inputs["transform_graph"]))


def run(ctx: StageContext, config: Config) -> None:
    from baton.graphs.feature_spec import FeatureSpec
    from baton.pipeline.release import baseline as B
    from baton.pipeline.release import data, gate, report

    spec = FeatureSpec.load(ctx.inputs["transform_graph"])
    problems = _spec_problems(config, spec)
    if problems:
        raise StageError("; ".join(problems))
    split = data.read_split(ctx.inputs["examples"], spec, config.split)
    ctx.log(f"evaluating on {len(split)} {config.split} rows")
    result = evaluate_model(ctx.inputs["model"], ctx.inputs["transform_graph"], split, spec,
                            config)

    base = None
    if config.baseline == "lineage":
        base = B.find(ctx, lambda m, t: evaluate_model(m, t, split, spec, config)["overall"])
        if base:
            ctx.log(f"baseline: run {base['run_id']} ({base['source']})")
    decision = gate.decide(config.gate, result["overall"], result["by_slice"],
                           base["metrics"] if base else None,
                           nonfinite_rows=result["nonfinite_rows"],
                           directions=result["directions"])
    blessing = {
        "blessed": decision["blessed"],
        "checks": decision["checks"],
        "failed": decision["failed"],
        "metrics": result["overall"],
        "table": _table(result["overall"], decision["checks"], base),
        "baseline": base,
        "model": str(ctx.inputs["model"]),
        "transform_graph": str(ctx.inputs["transform_graph"]),
        "run_id": ctx.run_id,
    }
    history = _history(ctx.inputs["model"])
    evaluation, bless_dir = ctx.output("evaluation"), ctx.output("blessing")
    _write_json(evaluation / "metrics.json", {
        "task": spec.label.task, "split": config.split, "example_count": len(split),
        "nonfinite_rows": result["nonfinite_rows"],
        "overall": result["overall"], "slices": result["by_slice"],
        "confusion_matrix": result["confusion"], "classes": list(spec.label.vocabulary),
        "calibration": result["calibration"],
    })
    _write_json(bless_dir / "blessing.json", blessing)
    page = report.render(
        title=f"{ctx.pipeline} / {ctx.run_id} / {ctx.stage}", blessing=blessing,
        overall=result["overall"], by_slice=result["by_slice"], confusion=result["confusion"],
        classes=spec.label.vocabulary, history=history, calibration=result["calibration"],
        baseline=base)
    (evaluation / "report.html").write_text(page)
    numbers = {k: v for k, v in result["overall"].items() if "/" not in k}
    ctx.record(blessed=decision["blessed"], **numbers)  # `baton inspect` links report.html
    verdict = "blessed" if decision["blessed"] else "NOT blessed: " + "; ".join(decision["failed"])
    ctx.log(verdict)


def evaluate_model(model_dir: Path, transform_dir: Path, split: Any, spec: Any,
                   config: Config) -> dict[str, Any]:
    """Overall and sliced metrics, confusion matrix and calibration of one model on `split`,
    and the rows whose outputs are not finite (`nonfinite_rows`)."""
    import numpy as np

    from baton.pipeline.release import data
    from baton.pipeline.release import metrics as M

    transform = data.load_transform(transform_dir)
    model = data.load_model(model_dir)
    feats = data.transform_split(transform, split, spec)
    raw = data.predict(model, feats, config.batch_size)
    nonfinite = int((~np.isfinite(raw.reshape(len(raw), -1))).any(axis=1).sum())
    task, classes = spec.label.task, spec.label.vocabulary
    kind = data.output_kind(model_dir)
    if task == "regression":
        outputs = raw.reshape(-1)
    else:
        if raw.shape[1] != len(classes):
            raise StageError(f"model: returns {raw.shape[1]} values per row but the label "
                             f"vocabulary has {len(classes)} classes {list(classes)}")
        outputs = data.probabilities(raw, kind)
    keras_metrics = _keras_metrics(model_dir, spec, kind, config)
    overall = M.compute(outputs, split.labels, task, classes, config.calibration_bins)
    overall.update(_keras_values(keras_metrics, split.labels, raw, overall))
    slices = {name: split.raw_strings(name) for name in config.slices}
    by_slice = M.sliced(outputs, split.labels, task, classes, slices, config.calibration_bins)
    for feature, values in by_slice.items():
        col = np.asarray(["<missing>" if v == "" else v for v in slices[feature]], dtype=object)
        for value, metrics in values.items():
            mask = col == value
            metrics.update(_keras_values(keras_metrics, split.labels[mask], raw[mask], metrics))
    result: dict[str, Any] = {"overall": overall, "by_slice": by_slice, "confusion": [],
                              "calibration": None, "nonfinite_rows": nonfinite,
                              "directions": _directions(keras_metrics)}
    if task != "regression":
        result["confusion"] = M.confusion(outputs, split.labels, len(classes))
        result["calibration"] = M.calibration(outputs, split.labels, config.calibration_bins)
    return result


def _gate_names(config: Config) -> list[str]:
    """Every metric the gate names (thresholds, changes, slice thresholds), once each."""
    names = [*config.gate.thresholds, *config.gate.change]
    names += [m for ths in config.gate.slices.values() for m in ths]
    return list(dict.fromkeys(names))


def _keras_metrics(model_dir: Path, spec: Any, kind: str,
                   config: Config) -> tuple[list[Any], dict[str, str]]:
    """(the model's own Keras metrics (train_info.json) and the Keras metric identifiers the
    gate names that neither Baton nor the model computes, built for the model's outputs;
    {metric name: the identifier the gate wrote} for the latter)."""
    from baton.graphs.keras_names import metric_names
    from baton.graphs.objectives import make_metrics
    from baton.pipeline.release import data
    from baton.pipeline.release import metrics as M

    made = data.model_metrics(model_dir, spec)
    have = {m.name for m in made}
    known = set(metric_names())
    wanted = [n for n in _gate_names(config) if n in known and n not in have
              and not M.is_known(n, spec.label.task, spec.label.vocabulary)]
    aliases: dict[str, str] = {}
    for name in wanted:
        for m in make_metrics([name], spec.label.task, spec.label.num_classes,
                              from_logits=kind != "probabilities"):
            if m.name not in have:
                made.append(m)
                have.add(m.name)
            aliases[m.name] = name
    return made, aliases


def _keras_values(keras_metrics: tuple[list[Any], dict[str, str]], labels: Any, outputs: Any,
                  baton: dict[str, float]) -> dict[str, float]:
    """The Keras metrics' values on these rows, by name (a gate identifier also under the name
    it was written with); Baton's own metric wins a shared name."""
    from baton.graphs.metric_records import compute

    metrics, aliases = keras_metrics
    if not metrics or not len(labels):
        return {}
    values = compute(metrics, labels, outputs)
    values.update({alias: values[name] for name, alias in aliases.items()})
    return {k: v for k, v in values.items() if k not in baton}


def _directions(keras_metrics: tuple[list[Any], dict[str, str]]) -> dict[str, bool | None]:
    """{name: whether higher is better} of the Keras metrics, under every name they are
    reported by (the gate reads a bare threshold in that direction)."""
    from baton.graphs.metric_records import higher_is_better

    metrics, aliases = keras_metrics
    out = {m.name: higher_is_better(m) for m in metrics}
    out.update({alias: out[name] for name, alias in aliases.items()})
    return out


def _spec_problems(config: Config, spec: Any) -> list[str]:
    """What only the feature spec can tell: slices must be raw categorical columns, gate
    metrics must exist for this task and its classes."""
    from baton.graphs.keras_names import fits_task
    from baton.pipeline.release import metrics as M

    problems = []
    raw = {f.name: f.dtype for f in spec.raw_features}
    categorical = sorted(k for k, v in raw.items() if v == "string")
    slice_names = [*config.slices, *(slice_feature(k)[0] for k in config.gate.slices)]
    for name in dict.fromkeys(slice_names):
        if raw.get(name) != "string":
            kind = f"a {raw[name]} column" if name in raw else "not a column of the data"
            problems.append(f"evaluate.slices: {name!r} is {kind}{did_you_mean(name, categorical)}; "
                            f"slices must be raw categorical (string) features: {categorical}")
    for name in _gate_names(config):
        baton = M.is_known(name)
        if (baton and not M.is_known(name, spec.label.task, spec.label.vocabulary)) or (
                not baton and not fits_task(name, spec.label.task)):
            problems.append(f"evaluate.gate: metric {name!r} does not exist for a "
                            f"{spec.label.task} model with classes {list(spec.label.vocabulary)}")
    return problems


def _table(overall: dict[str, float], checks: list[dict], base: dict | None) -> dict[str, dict]:
    """Every overall metric with its value, the baseline's value and the thresholds on it."""
    table = {}
    for name, value in sorted(overall.items()):
        table[name] = {
            "value": value,
            "baseline": (base or {}).get("metrics", {}).get(name),
            "thresholds": [c["threshold"] for c in checks
                           if c["metric"] == name and c["kind"] == "threshold" and not c["slice"]],
            "max_worsening": next((c["threshold"] for c in checks
                                   if c["metric"] == name and c["kind"] == "change"), None),
        }
    return table


def _history(model_dir: Path) -> dict | None:
    """Per-epoch curves from history.json: a Keras-style {name: [values]} mapping, or a list of
    per-epoch records ({"epoch": 1, "train_loss": ...}) as the train stage writes it."""
    try:
        hist = json.loads((model_dir / HISTORY_FILE).read_text())
    except (OSError, ValueError):
        return None
    if isinstance(hist, dict) and isinstance(hist.get("history"), dict | list):
        hist = hist["history"]
    if isinstance(hist, list):
        rows = [r for r in hist if isinstance(r, dict)]
        names = sorted({k for r in rows for k in r} - {"epoch", "step"})
        hist = {k: [r[k] for r in rows if isinstance(r.get(k), int | float)] for k in names}
    return {k: v for k, v in hist.items() if isinstance(v, list)} if isinstance(hist, dict) else None


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")
