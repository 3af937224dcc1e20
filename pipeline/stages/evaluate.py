"""Evaluate: metrics on the eval split, sliced, and the release gate's decision (the blessing).

The model is run behind the transform graph on the RAW eval examples, as it will be served,
so a transform bug shows up here rather than in production. The baseline for the change
threshold is the last blessed model of the same pipeline, found through lineage; when its
model and transform still exist it is re-evaluated on the current eval split (as TFX does), so
the comparison is on the same rows, otherwise its recorded metrics are used.

A model that fails the gate is not an error here: the blessing (blessed: false, with every
failed check) is the artifact, and `push` refuses it. That keeps the report and the decision
inspectable for exactly the runs that need inspecting.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Literal

from baton.errors import StageError
from baton.pipeline.configs import did_you_mean
from baton.pipeline.context import StageContext
from baton.pipeline.release.gate import Gate, slice_feature
from baton.strategies.job import HISTORY_FILE

INPUTS = {"model": True, "transform_graph": True, "examples": True}
OUTPUTS = ("evaluation", "blessing")
CODE_DEPS = ("baton.pipeline.release.data", "baton.pipeline.release.metrics", "baton.pipeline.release.gate",
             "baton.pipeline.release.report", "baton.pipeline.release.baseline")
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

    return spec_problems(config.gate, config.slices)


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
                           base["metrics"] if base else None)
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
    """Overall and sliced metrics, confusion matrix and calibration of one model on `split`."""
    from baton.pipeline.release import data
    from baton.pipeline.release import metrics as M

    transform = data.load_transform(transform_dir)
    model = data.load_model(model_dir)
    feats = data.transform_split(transform, split, spec)
    outputs = data.predict(model, feats, config.batch_size)
    task, classes = spec.label.task, spec.label.vocabulary
    if task == "regression":
        outputs = outputs.reshape(-1)
    else:
        if outputs.shape[1] != len(classes):
            raise StageError(f"model: returns {outputs.shape[1]} logits per row but the label "
                             f"vocabulary has {len(classes)} classes {list(classes)}")
        outputs = data.softmax(outputs)
    overall = M.compute(outputs, split.labels, task, classes, config.calibration_bins)
    slices = {name: split.raw_strings(name) for name in config.slices}
    by_slice = M.sliced(outputs, split.labels, task, classes, slices, config.calibration_bins)
    result: dict[str, Any] = {"overall": overall, "by_slice": by_slice, "confusion": [],
                              "calibration": None}
    if task != "regression":
        result["confusion"] = M.confusion(outputs, split.labels, len(classes))
        result["calibration"] = M.calibration(outputs, split.labels, config.calibration_bins)
    return result


def _spec_problems(config: Config, spec: Any) -> list[str]:
    """What only the feature spec can tell: slices must be raw categorical columns, gate
    metrics must exist for this task and its classes."""
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
    names = [*config.gate.thresholds, *config.gate.change]
    names += [m for ths in config.gate.slices.values() for m in ths]
    for name in dict.fromkeys(names):
        if not M.is_known(name, spec.label.task, spec.label.vocabulary):
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
