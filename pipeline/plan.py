"""Lint a spec into an executable plan before anything runs (Metaflow-style DAG checks).

Resolves every stage type (lazily imported modules, no TensorFlow at import), builds every typed
config, checks every input reference, orders the DAG and refuses cycles, and runs the stages'
own `check_spec` hooks. All problems are collected and reported together, each with its
`file:line`, so a user fixes a spec in one pass; any problem is exit code 2.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from baton.configs import ConfigError, build_config, did_you_mean
from baton.errors import SpecError
from baton.pipeline import registry
from baton.pipeline.spec import PipelineSpec, StageSpec


@dataclasses.dataclass(frozen=True)
class Plan:
    spec: PipelineSpec
    order: tuple[str, ...]  # stage names in a topological order (spec order where free)
    types: dict[str, registry.StageType]
    configs: dict[str, Any]

    def upstream(self, name: str) -> dict[str, tuple[str, str]]:
        """Input name -> (producing stage, output name) for stage `name`."""
        out = {}
        for key, ref in self.spec.stage(name).inputs.items():
            stage, _, output = ref.partition(".")
            out[key] = (stage, output)
        return out

    def upstream_closure(self, names: Iterable[str]) -> set[str]:
        """Every stage whose outputs `names` (transitively) consume, excluding `names`."""
        wanted: set[str] = set(names)
        result: set[str] = set()
        for name in reversed(self.order):
            if name in wanted or name in result:
                result.update(src for src, _ in self.upstream(name).values())
        return result - wanted

    def downstream_closure(self, names: Iterable[str]) -> set[str]:
        """`names` and every stage that (transitively) consumes their outputs."""
        result = set(names)
        for name in self.order:
            if any(src in result for src, _ in self.upstream(name).values()):
                result.add(name)
        return result


def plan(spec: PipelineSpec) -> Plan:
    problems: list[str] = []
    types: dict[str, registry.StageType] = {}
    configs: dict[str, Any] = {}
    seen: dict[str, StageSpec] = {}
    for stage in spec.stages:
        if stage.name in seen:
            problems.append(f"{spec.where('', stage)}: duplicate stage name {stage.name!r} "
                            f"(first defined at {spec.where('', seen[stage.name])})")
            continue
        seen[stage.name] = stage
        try:
            st = registry.resolve(stage.type, spec.spec_dir)
        except registry.UnknownStageType as exc:
            problems.append(f"{spec.where('type', stage)}: stage {stage.name!r}: {exc}")
            continue
        types[stage.name] = st
        if st.config_cls is not None:
            try:
                configs[stage.name] = build_config(st.config_cls, stage.config)
            except ConfigError as exc:
                for err in getattr(exc, "errors", [exc]):
                    key = f"config.{err.path.split('.')[0].split('[')[0]}" if err.path else "config"
                    problems.append(f"{spec.where(key, stage)}: stage {stage.name!r} config.{err}")
        else:
            configs[stage.name] = dict(stage.config)

    for stage in spec.stages:
        resolved = types.get(stage.name)
        if resolved is None:
            continue
        st = resolved
        for key, ref in stage.inputs.items():
            where = spec.where(f"inputs.{key}", stage)
            if st.inputs and key not in st.inputs:
                problems.append(f"{where}: stage {stage.name!r} ({stage.type}) has no input {key!r}"
                                f"{did_you_mean(key, st.inputs)}; its inputs: {', '.join(st.inputs)}")
            src, _, output = ref.partition(".")
            if src == stage.name:
                problems.append(f"{where}: stage {stage.name!r} consumes its own output {ref!r} "
                                "(a cycle)")
            elif src not in seen:
                problems.append(f"{where}: stage {stage.name!r} input {key!r} refers to unknown "
                                f"stage {src!r}{did_you_mean(src, seen)} (a dangling input)")
            elif src in types and output not in types[src].outputs:
                problems.append(f"{where}: stage {stage.name!r} input {key!r}: stage {src!r} "
                                f"({types[src].name}) has no output {output!r}"
                                f"{did_you_mean(output, types[src].outputs)}; its outputs: "
                                f"{', '.join(types[src].outputs)}")
        for key, required in st.inputs.items():
            if required and key not in stage.inputs:
                problems.append(f"{spec.where('inputs', stage)}: stage {stage.name!r} "
                                f"({stage.type}) needs input {key!r} (e.g. {key}: <stage>.{key})")

    order, cycle = _toposort(spec, set(seen))
    if cycle:
        problems.append(f"{spec.where('', spec.stage(cycle[0]))}: the stages form a cycle: "
                        + " -> ".join(cycle + [cycle[0]]))

    if not problems:
        for stage in spec.stages:
            hook = types[stage.name].hook("check_spec")
            if hook is not None:
                for msg in hook(configs[stage.name], stage, spec) or ():
                    problems.append(f"{spec.where('config', stage)}: stage {stage.name!r}: {msg}")
    if problems:
        raise SpecError(problems)
    return Plan(spec=spec, order=tuple(order), types=types, configs=configs)


def _toposort(spec: PipelineSpec, names: set[str]) -> tuple[list[str], list[str]]:
    """Kahn's algorithm keeping spec order among ready stages; returns (order, a cycle or [])."""
    deps = {
        s.name: {ref.partition(".")[0] for ref in s.inputs.values()} & names
        for s in spec.stages if s.name in names
    }
    order: list[str] = []
    pending = [s.name for s in spec.stages if s.name in deps]
    while pending:
        ready = [n for n in pending if deps[n] <= set(order)]
        if not ready:
            return order, _find_cycle(deps, pending)
        order.append(ready[0])
        pending.remove(ready[0])
    return order, []


def _find_cycle(deps: dict[str, set[str]], pending: list[str]) -> list[str]:
    path: list[str] = []
    node = pending[0]
    while node not in path:
        path.append(node)
        node = next(d for d in sorted(deps[node]) if d in pending)
    return path[path.index(node):][::-1]
