"""The spec and the user's modules as a pipeline ships them, and what a pipeline cannot ship.

A compiled pipeline carries the spec's text and the source of every module of the user's that
the spec names (a user stage's `type: module:function`, the train stage's model, loss, metrics,
optimizer and callbacks, the transform's `preprocessing_fn`) with the modules they import from
the spec's directory: the files `baton k8s` puts in the pods' ConfigMap, byte for byte
(pipeline.user_code finds them). The pipeline's first step writes them, with the run's
parameters applied to the spec, into the run directory (`<run>/.kfp/spec/`), where every later
step and every training replica reads them.

Refused here, exit 2 with the field named and nothing written:

- a `federated` stage: its SuperLink and SuperNodes are long-running servers talking to each
  other over gRPC while the run job submits rounds (`baton k8s` deploys them as Deployments and
  Services); a KFP step is one container that runs to completion, so the federation cannot be
  one, and a step that deployed it would leave servers behind the pipeline's back;
- user code that lives neither beside the spec nor in an installed package: the pods get the
  spec's directory and the image, nothing from the compiling machine's other directories.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import sysconfig
from pathlib import Path
from typing import Any

from baton.errors import UsageError

FEDERATED = "federated"


@dataclasses.dataclass(frozen=True)
class Bundle:
    """A spec and its modules: `files` maps paths relative to the spec's directory to text;
    `spec` is the spec's own entry among them."""

    spec: str
    files: tuple[tuple[str, str], ...]

    def to_json(self) -> str:
        return json.dumps({"spec": self.spec, "files": dict(self.files)}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Bundle:
        data = json.loads(text)
        return cls(data["spec"], tuple(sorted(data["files"].items())))

    @property
    def spec_text(self) -> str:
        return dict(self.files)[self.spec]

    def code_files(self) -> tuple[tuple[str, str], ...]:
        return tuple(item for item in self.files if item[0] != self.spec)

    def write(self, directory: Path) -> Path:
        """Write every file under `directory`; returns the spec's path."""
        for rel, text in self.files:
            path = directory / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        return directory / self.spec


def check_expressible(spec: Any, the_plan: Any) -> None:
    """UsageError (exit 2) naming the field when `spec` has a stage a pipeline cannot express."""
    for i, stage in enumerate(spec.stages):
        if stage.type == FEDERATED:
            raise UsageError(
                f"{spec.where('type', stage)}: stages[{i}].type: {FEDERATED!r} (stage "
                f"{stage.name!r}): a federated stage runs a Flower federation (a SuperLink and "
                "SuperNodes serving each other for the whole training), which a KFP step, one "
                "container run to completion, cannot be; deploy it with `baton k8s` "
                "(docs/federated.md). Received: type: federated")
    root = spec.spec_dir.resolve()
    for i, stage in enumerate(spec.stages):
        for field, ref in _refs(stage, the_plan.configs.get(stage.name)):
            where = f"stages[{i}].type" if field == "type" else f"stages[{i}].config.{field}"
            path = _module_path(ref, spec.spec_dir)
            if (path is not None and not _under(path, root) and not _installed(path)
                    and not ref.startswith("baton.")):
                raise UsageError(
                    f"{spec.where(field if field == 'type' else 'config', stage)}: {where}: "
                    f"{ref!r} (stage {stage.name!r}) is code in {path}, outside the spec's "
                    f"directory {root}; a pipeline's pods get the spec's directory and the "
                    "image only: move the module beside the spec or install it in the image. "
                    f"Received: {field}: {ref}")


def from_spec(spec: Any, the_plan: Any) -> Bundle:
    """The bundle of `spec` (checked by `check_expressible` first)."""
    from baton.graphs.user_refs import RefError
    from baton.pipeline.spec import DEFAULT_SPEC
    from baton.pipeline.user_code import user_code_files

    path = spec.path or DEFAULT_SPEC
    name = "pipeline.yaml" if spec.path is None or path == DEFAULT_SPEC.resolve() else path.name
    files = {name: path.read_text()}
    refs = [ref for stage in spec.stages for _, ref in _refs(stage, the_plan.configs.get(stage.name))]
    if refs and spec.path is not None and path != DEFAULT_SPEC.resolve():
        root = spec.spec_dir.resolve()
        try:
            found = user_code_files(refs, root)
        except RefError as exc:
            raise UsageError(f"{spec.path}: {exc}") from None
        for f in found:
            files[f.relative_to(root).as_posix()] = f.read_text()
    return Bundle(name, tuple(sorted(files.items())))


def _refs(stage: Any, config: Any) -> list[tuple[str, str]]:
    """(field, "module:function") of the user code a stage names."""
    out = [("type", stage.type)] if ":" in stage.type else []
    if stage.type == "train" and config is not None:
        out += [("model" if r == config.model else "loss" if r == config.loss else
                 "optimizer" if r == config.optimizer else
                 "metrics" if r in config.metrics else "callbacks", r)
                for r in config.user_refs()]
    if stage.type == "transform" and getattr(config, "preprocessing_fn", None):
        out.append(("preprocessing_fn", config.preprocessing_fn))
    return out


def _module_path(ref: str, spec_dir: Path) -> Path | None:
    """The file of the module `ref` names: beside the spec if it is there (by path: a module
    of that name imported earlier from elsewhere does not hide it), else where it imports
    from; None for a built-in or compiled module, or one that does not import (the stage's
    own check reports that)."""
    from baton.graphs.user_refs import RefError, import_module
    from baton.pipeline.user_code import user_code_files

    try:
        beside = user_code_files([ref], spec_dir.resolve())
    except RefError:
        return None
    name = ref.partition(":")[0]
    mine = [f for f in beside if f.with_suffix("").as_posix().endswith(name.replace(".", "/"))
            or f.parent.as_posix().endswith(name.replace(".", "/"))]
    if mine:
        return mine[0]
    try:
        module = import_module(name, spec_dir)
    except RefError:
        return None
    file = getattr(module, "__file__", None)
    return Path(file).resolve() if file else None


def _under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _installed(path: Path) -> bool:
    """Whether `path` belongs to the interpreter's installed packages or standard library
    (Baton's own modules, which every Baton image has, are told by their name)."""
    dirs = {sysconfig.get_paths()[k] for k in ("purelib", "platlib", "stdlib", "platstdlib")}
    dirs.update(p for p in sys.path if p.endswith(("site-packages", "dist-packages")))
    return any(_under(path, Path(d).resolve()) for d in dirs if d)
