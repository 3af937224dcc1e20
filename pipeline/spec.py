"""The declarative pipeline spec: a YAML file and the same thing as Python objects.

A spec names its stages, each with a registered stage type, a config and the earlier outputs it
consumes (`inputs: {examples: ingest.examples}`). `load_spec` reads YAML keeping line numbers, so
every problem found by `plan` (pipeline.plan) can point at the file and line that caused it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml

from baton._version import __version__
from baton.energy import EnergyConfig
from baton.errors import SpecError
from baton.k8s.options import (  # one definition: the same quantities become pod resources
    ReplicaResources,
    Resources,
)
from baton.pipeline.configs import ConfigError, build_config, config_to_dict, did_you_mean
from baton.strategies.factory import ONE_DEVICE, PARAMETER_SERVER, Strategy

DEFAULT_SPEC = Path(__file__).parent / "specs" / "penguins.yaml"
NAME_RE = re.compile(r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")
STAGE_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
TOP_KEYS = ("pipeline", "description", "runs_dir", "cluster", "energy", "stages")
STAGE_KEYS = ("name", "type", "config", "inputs")


@dataclasses.dataclass(frozen=True)
class ClusterConfig:
    """The training topology; `baton run --workers/--ps/--strategy/--min-workers` override it.

    `min_workers` (multi-worker mirrored only) makes the job elastic: it continues from its last
    backup with the workers left while at least this many remain (strategies/elastic.py).

    `workers: auto` makes the train stage probe one process and multi-worker mirrored with
    2..`max_workers` workers (default: the node's usable cores) for a few steps and train with
    the fastest, or with `objective: energy` the fewest joules per example (strategies/probe.py).
    """

    strategy: Strategy = ONE_DEVICE
    workers: int | Literal["auto"] = 1
    ps: int = 0
    min_workers: int | None = None
    max_workers: int | None = None  # workers: auto only
    objective: Literal["speed", "energy"] = "speed"  # workers: auto only
    image: str = f"baton:{__version__}"  # pinned: the release's image (k8s refuses latest)
    namespace: str = "default"
    resources: Resources = dataclasses.field(default_factory=Resources)
    # per TFJob replica type (chief, worker, ps, evaluator), over `resources`
    replica_resources: ReplicaResources = dataclasses.field(default_factory=ReplicaResources)

    def __post_init__(self) -> None:
        if self.workers == "auto":
            self._check_auto()
            return
        if self.max_workers is not None:
            raise ValueError(f"max_workers needs workers: auto. Received: max_workers="
                             f"{self.max_workers}, workers={self.workers}")
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1. Received: workers={self.workers}")
        if self.ps < 0:
            raise ValueError(f"ps must be >= 0. Received: ps={self.ps}")
        if self.strategy == PARAMETER_SERVER and self.ps < 1:
            raise ValueError("strategy parameter_server needs ps >= 1. Received: ps=0")
        if self.min_workers is not None and not 1 <= self.min_workers <= self.workers:
            raise ValueError(
                f"min_workers must be between 1 and workers={self.workers}. "
                f"Received: min_workers={self.min_workers}"
            )
        if self.min_workers is not None and self.strategy == PARAMETER_SERVER:
            raise ValueError(
                "min_workers needs strategy multi_worker_mirrored (parameter-server workers "
                f"are restarted alone). Received: min_workers={self.min_workers}, "
                f"strategy={self.strategy}"
            )


    def _check_auto(self) -> None:
        if self.max_workers is not None and self.max_workers < 1:
            raise ValueError(f"max_workers must be >= 1. Received: max_workers={self.max_workers}")
        if self.strategy == PARAMETER_SERVER or self.ps:
            raise ValueError(
                "workers: auto probes one process and multi-worker mirrored clusters, not "
                f"parameter_server. Received: workers='auto', strategy={self.strategy}, "
                f"ps={self.ps}")
        if self.min_workers is not None:
            raise ValueError(
                "workers: auto picks the number of workers, min_workers (elastic) needs a fixed "
                f"one: give workers: N with it. Received: workers='auto', "
                f"min_workers={self.min_workers}")


@dataclasses.dataclass(frozen=True)
class StageSpec:
    """One stage: a name, a registered type (or `module:function`), its config and inputs.

    `inputs` maps this stage's input names to `"<stage>.<output>"` references.
    """

    name: str
    type: str
    config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    inputs: Mapping[str, str] = dataclasses.field(default_factory=dict)
    lines: Mapping[str, int] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": self.type}
        if self.inputs:
            out["inputs"] = dict(self.inputs)
        if self.config:
            out["config"] = config_to_dict(self.config)
        return out


@dataclasses.dataclass(frozen=True)
class PipelineSpec:
    name: str
    stages: tuple[StageSpec, ...]
    cluster: ClusterConfig = dataclasses.field(default_factory=ClusterConfig)
    energy: EnergyConfig = dataclasses.field(default_factory=EnergyConfig)
    description: str = ""
    runs_dir: str = "runs"
    path: Path | None = None
    lines: Mapping[str, int] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    @property
    def spec_dir(self) -> Path:
        """Where relative paths in configs resolve: the spec's directory; for the embedded
        default spec (which lives inside the package) the working directory."""
        if self.path is None or self.path == DEFAULT_SPEC.resolve():
            return Path.cwd()
        return self.path.parent

    def stage(self, name: str) -> StageSpec:
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(f"no stage named {name!r}{did_you_mean(name, [s.name for s in self.stages])}")

    def where(self, key: str = "", stage: StageSpec | None = None) -> str:
        """`file:line` for a key, for error messages (just the file when no line is known)."""
        lines = stage.lines if stage else self.lines
        line = lines.get(key) or lines.get(key.split(".")[0]) or lines.get("")
        src = str(self.path) if self.path else "<spec>"
        return f"{src}:{line}" if line else src

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pipeline": self.name}
        if self.description:
            out["description"] = self.description
        if self.runs_dir != "runs":
            out["runs_dir"] = self.runs_dir
        out["cluster"] = config_to_dict(self.cluster)
        if self.energy != EnergyConfig():
            out["energy"] = config_to_dict(self.energy)
        out["stages"] = [s.to_dict() for s in self.stages]
        return out

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


# --------------------------------------------------------------------------- loading
class _LineLoader(yaml.SafeLoader):
    """A SafeLoader whose mappings remember the line of every key."""


class _LineDict(dict):
    lines: dict[Any, int]
    line: int


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> _LineDict:
    out = _LineDict()
    out.lines, out.line = {}, node.start_mark.line + 1
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if key in out:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first at line {out.lines[key]})",
                key_node.start_mark,
            )
        out[key] = loader.construct_object(value_node, deep=True)
        out.lines[key] = line
    return out


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def default_spec_path() -> Path:
    return DEFAULT_SPEC


def load_spec(path: str | Path | None = None) -> PipelineSpec:
    """Read and shape-check a spec file (None: the embedded penguins pipeline).

    Only the shape is checked here; `pipeline.plan.plan` checks types, configs and the DAG.
    """
    p = Path(path) if path is not None else DEFAULT_SPEC
    if not p.is_file():
        raise SpecError(f"{p}: no such spec file")
    text = p.read_text(encoding="utf-8", errors="replace")
    try:
        data = yaml.load(text, Loader=_LineLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{p}:{mark.line + 1}" if mark else str(p)
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(f"{where}: not valid YAML: {problem}") from None
    return spec_from_dict(data, path=p.resolve())


def spec_from_dict(data: Any, path: Path | None = None) -> PipelineSpec:
    """A PipelineSpec from plain data (YAML-loaded or hand-built), collecting every problem."""
    src = str(path) if path else "<spec>"
    lines = getattr(data, "lines", {})

    def at(key: str, container: Any = None) -> str:
        ls = getattr(container, "lines", lines) if container is not None else lines
        line = ls.get(key) or getattr(container if container is not None else data, "line", None)
        return f"{src}:{line}" if line else src

    if not isinstance(data, Mapping):
        raise SpecError(f"{src}: a spec must be a mapping with 'pipeline' and 'stages'. "
                        f"Received: {type(data).__name__}")
    problems: list[str] = []
    for key in data:
        if key not in TOP_KEYS:
            problems.append(f"{at(key)}: unknown top-level key {key!r}{did_you_mean(str(key), TOP_KEYS)}; "
                            f"known keys: {', '.join(TOP_KEYS)}")
    name = data.get("pipeline")
    if not isinstance(name, str) or not NAME_RE.match(name):
        problems.append(f"{at('pipeline')}: 'pipeline' must be a name of lower-case letters, digits "
                        f"and '-', starting with a letter (at most 40). Received: {name!r}")
    def section(cls: Any, name: str) -> Any:
        """A top-level settings mapping as its typed config; its errors join `problems`."""
        try:
            return build_config(cls, data.get(name), name)
        except ConfigError as exc:
            for err in getattr(exc, "errors", [exc]):
                key = err.path.split(".")[1] if "." in err.path else name
                problems.append(f"{at(key, data.get(name))}: {err}")
            return cls()

    cluster = section(ClusterConfig, "cluster")
    energy = section(EnergyConfig, "energy")
    stages_raw = data.get("stages")
    stages: list[StageSpec] = []
    if not isinstance(stages_raw, list) or not stages_raw:
        problems.append(f"{at('stages')}: 'stages' must be a non-empty list of stages. "
                        f"Received: {stages_raw!r}"[:300])
        stages_raw = []
    for i, raw in enumerate(stages_raw):
        stage, errs = _stage_from_dict(raw, i, src)
        problems.extend(errs)
        if stage is not None:
            stages.append(stage)
    if problems:
        raise SpecError(problems)
    assert isinstance(name, str)
    return PipelineSpec(
        name=name, stages=tuple(stages), cluster=cluster, energy=energy,
        description=str(data.get("description", "")), runs_dir=str(data.get("runs_dir", "runs")),
        path=path, lines=dict(lines),
    )


def _stage_from_dict(raw: Any, i: int, src: str) -> tuple[StageSpec | None, list[str]]:
    line = getattr(raw, "line", None)
    where = f"{src}:{line}" if line else src
    if not isinstance(raw, Mapping):
        return None, [f"{where}: stages[{i}] must be a mapping with 'name' and 'type'. Received: {raw!r}"]
    lines = getattr(raw, "lines", {})

    def at(key: str) -> str:
        return f"{src}:{lines[key]}" if key in lines else where

    label = f"stages[{i}]" + (f" {raw.get('name')!r}" if isinstance(raw.get("name"), str) else "")
    problems = [
        f"{at(k)}: {label}: unknown key {k!r}{did_you_mean(str(k), STAGE_KEYS)}; "
        f"known keys: {', '.join(STAGE_KEYS)}"
        for k in raw if k not in STAGE_KEYS
    ]
    name, kind = raw.get("name"), raw.get("type")
    if not isinstance(name, str) or not STAGE_NAME_RE.match(name):
        problems.append(f"{at('name')}: {label}: 'name' must be lower_snake_case. Received: {name!r}")
    if not isinstance(kind, str) or not kind:
        problems.append(f"{at('type')}: {label}: 'type' must name a stage type. Received: {kind!r}")
    config = raw.get("config") or {}
    if not isinstance(config, Mapping):
        problems.append(f"{at('config')}: {label}: 'config' must be a mapping. Received: {config!r}")
        config = {}
    inputs = raw.get("inputs") or {}
    if not isinstance(inputs, Mapping):
        problems.append(f"{at('inputs')}: {label}: 'inputs' must map input names to "
                        f"'stage.output'. Received: {inputs!r}")
        inputs = {}
    for k, ref in inputs.items():
        if not isinstance(ref, str) or ref.count(".") != 1:
            line_k = getattr(inputs, "lines", {}).get(k)
            problems.append(f"{src}:{line_k or line}: {label}: input {k!r} must be "
                            f"'<stage>.<output>'. Received: {ref!r}")
    all_lines = {"": line or 0, **{str(k): v for k, v in lines.items()}}
    for sub in ("config", "inputs"):
        for k, v in getattr(raw.get(sub), "lines", {}).items():
            all_lines[f"{sub}.{k}"] = v
    if problems:
        return None, problems
    assert isinstance(name, str) and isinstance(kind, str)
    return StageSpec(name=name, type=kind, config=dict(config),
                     inputs={str(k): str(v) for k, v in inputs.items()}, lines=all_lines), []
