"""The pipeline parameters of a compiled spec: what a user changes from one KFP run to the next.

KFP shows pipeline parameters in its run form and Vertex AI in `PipelineJob(parameter_values=)`;
everything else about a run is fixed by the spec the pipeline was compiled from. The parameters
are few and named after what they change:

- `run_id`: Baton's run id ("" = a new time-sortable one; give one to finish a failed run);
- `runs_dir`: the runs directory (a bucket URL; a local path for `kfp.local`);
- `models_dir`: where push stages with a relative `serving_base` publish ("" = `models/<pipeline>`
  beside the runs directory, as `baton k8s --runs-dir` does);
- `data_path` for a CSV ingest stage (`config.path`), `data_dir` for a TFDS one;
- `epochs` and `batch_size` for a train stage;
- `config`: any other setting, `{"<stage>": {"<field>": value}}`, merged into the spec.

With several stages of one kind the stage-specific names get the stage's name in front
(`train_fast_epochs`). The first step of the pipeline applies the values to the spec (`apply`),
and `baton run --check` judges the result, so a bad value fails the run at once with Baton's
message instead of in the stage that reads it.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from baton.errors import UsageError

RUN_ID = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclasses.dataclass(frozen=True)
class RunParam:
    """One pipeline parameter.

    Attributes:
        name: the KFP parameter name (a Python identifier).
        type: str, int or dict (KFP's STRING, NUMBER_INTEGER, STRUCT).
        default: the value compiled in: the spec's own.
        stage: the stage whose config it sets; None for a run-level parameter.
        field: the config field it sets.
        help: one line for the pipeline's docs.
    """

    name: str
    type: type
    default: Any
    stage: str | None = None
    field: str | None = None
    help: str = ""


def run_params(spec: Any, configs: Mapping[str, Any], runs_dir: str) -> list[RunParam]:
    """The parameters of `spec` (a PipelineSpec) whose stage configs are `configs` (the plan's
    typed configs), with `runs_dir` as the runs directory compiled in."""
    params = [
        RunParam("run_id", str, "", help="Baton run id; empty: a new time-sortable id"),
        RunParam("runs_dir", str, runs_dir, help="runs directory (bucket URL; local for kfp.local)"),
        RunParam("models_dir", str, "", help="where push publishes (empty: models/<pipeline> "
                 "beside the runs directory)"),
    ]
    per_kind = {"ingest": [], "train": []}  # type: dict[str, list[Any]]
    for stage in spec.stages:
        if stage.type in per_kind:
            per_kind[stage.type].append(stage)
    for kind, stages in per_kind.items():
        for stage in stages:
            prefix = "" if len(stages) == 1 else f"{stage.name}_"
            config = configs[stage.name]
            for field, name, ptype, value, help_ in _fields(kind, config, spec.spec_dir):
                params.append(RunParam(prefix + name, ptype, value, stage.name, field,
                                       f"{stage.name}.config.{field}: {help_}"))
    params.append(RunParam("config", dict, {}, help='any other setting: {"<stage>": '
                           '{"<field>": value}}, merged into the spec'))
    return params


def _fields(kind: str, config: Any, spec_dir: Any) -> list[tuple[str, str, type, Any, str]]:
    """(config field, parameter name, type, default, help) of one stage's parameters."""
    if kind == "train":
        out: list[tuple[str, str, type, Any, str]] = [
            ("epochs", "epochs", int, int(config.epochs), "training epochs")]
        if isinstance(config.batch_size, int):
            out.append(("batch_size", "batch_size", int, config.batch_size, "global batch"))
        return out
    if config.source == "csv":  # relative globs resolve against the spec's directory: made absolute
        path = str(config.path)
        absolute = path if path.startswith(("/", "s3://", "gs://")) else str(spec_dir / path)
        return [("path", "data_path", str, absolute, "glob of the CSV files to ingest")]
    if config.source == "tfds" and config.data_dir is not None:
        d = config.data_dir if config.data_dir.is_absolute() else spec_dir / config.data_dir
        return [("data_dir", "data_dir", str, str(d), "TFDS data_dir holding the prepared dataset")]
    return []


def check_run_id(value: str) -> str:
    """A run id names Kubernetes objects a step may create: a DNS-1123 label."""
    if not RUN_ID.match(value):
        raise UsageError(f"run_id: must be lower-case letters, digits and '-' (at most 63), "
                         f"starting and ending with a letter or digit. Received: {value!r}")
    return value


def apply(data: Mapping[str, Any], params: list[RunParam], values: Mapping[str, Any],
          models_dir: str) -> dict[str, Any]:
    """The spec mapping `data` with this run's parameter `values` applied (a new mapping).

    Stage parameters set their field; `config` is merged last (a setting named there wins);
    push stages whose `serving_base` is relative (or unset) publish to `models_dir`, since a
    step runs the spec from a scratch directory that is gone when the step ends.
    """
    out = copy.deepcopy(dict(data))
    stages = {s.get("name"): s for s in out.get("stages") or []}
    for param in params:
        if param.stage is None or param.name not in values:
            continue
        stages[param.stage].setdefault("config", {})
        stages[param.stage]["config"] = dict(stages[param.stage]["config"] or {})
        stages[param.stage]["config"][param.field] = values[param.name]
    extra = values.get("config") or {}
    if not isinstance(extra, Mapping):
        raise UsageError(f"config: must map stage names to settings. Received: {extra!r}")
    for name, settings in extra.items():
        if name not in stages:
            raise UsageError(f"config: no stage named {name!r}; stages: {', '.join(stages)}")
        if not isinstance(settings, Mapping):
            raise UsageError(f"config.{name}: must map settings to values. Received: {settings!r}")
        stages[name]["config"] = _merge(dict(stages[name].get("config") or {}), settings)
    for stage in stages.values():
        if stage.get("type") == "push":
            config = dict(stage.get("config") or {})
            base = str(config.get("serving_base") or "")
            if not base.startswith(("/", "s3://", "gs://")):
                config["serving_base"] = models_dir
            stage["config"] = config
    return out


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), Mapping):
            base[key] = _merge(dict(base[key]), value)
        else:
            base[key] = value
    return base
