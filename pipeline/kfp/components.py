"""The components of a compiled pipeline: one lightweight Python component per step.

Why lightweight Python components, generated: a stage's inputs and outputs are KFP artifacts
named after the stage's own (`examples: Input[Dataset]`, `model: Output[Model]`), so each stage
needs its own function signature, and KFP builds a lightweight component from a function's
source. The source is written here, a few lines that call `baton.pipeline.kfp.step` (the step's
logic lives in Baton, in the image, and is tested as Baton), and imported from a file so the
SDK can read it back. A lightweight component is also what `kfp.local`'s SubprocessRunner runs,
so the very component a cluster runs in the Baton image runs here in a subprocess. The image
has kfp installed (`baton[kfp]`), so nothing is pip-installed when a step starts.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import keyword
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from baton.pipeline.kfp import artifacts

PLAN, FINISH = "plan_run", "finish_run"
# the parameters every stage component takes (an input or output may not reuse them)
STAGE_PARAMS = ("run_id", "runs_dir", "job", "launch", "stage_metrics")
_IMPORTS = "from kfp.dsl import Artifact, Dataset, Input, Markdown, Metrics, Model, Output\n\n\n"


@dataclasses.dataclass(frozen=True)
class StageShape:
    """What a stage's component looks like: its name, and its inputs and outputs with the
    Python names the component gives them (Baton's names where they are identifiers)."""

    stage: str
    function: str
    inputs: tuple[tuple[str, str, str], ...]  # (input name, Python name, artifact class)
    outputs: tuple[tuple[str, str, str], ...]  # (output name, Python name, artifact class)


def identifier(name: str, taken: set[str]) -> str:
    """A Python identifier for `name`, not in `taken` (which it joins)."""
    out = re.sub(r"\W", "_", name)
    if not out or out[0].isdigit() or keyword.iskeyword(out) or out in taken:
        out = f"x_{out}"
    while out in taken:
        out += "_"
    taken.add(out)
    return out


def shape(stage: str, inputs: Mapping[str, str], outputs: tuple[str, ...],
          functions: set[str]) -> StageShape:
    """The shape of stage `stage` whose inputs map names to `<stage>.<output>` references."""
    function = identifier(stage, functions)
    taken = set(STAGE_PARAMS)
    ins = tuple((name, identifier(name, taken), artifacts.kind(ref.partition(".")[2]))
                for name, ref in inputs.items())
    outs = tuple((name, identifier(name, taken), artifacts.kind(name)) for name in outputs)
    return StageShape(stage, function, ins, outs)


def stage_source(pipeline: str, s: StageShape) -> str:
    """The source of the component function of stage shape `s`."""
    params = ["run_id: str", "runs_dir: str", "job: str", "launch: str"]
    params += [f"{py}: Input[{cls}]" for _, py, cls in s.inputs]
    params += [f"{py}: Output[{cls}]" for _, py, cls in s.outputs]
    params.append("stage_metrics: Output[Metrics]")
    ins = ", ".join(f"{name!r}: {py}" for name, py, _ in s.inputs)
    outs = ", ".join(f"{name!r}: {py}" for name, py, _ in s.outputs)
    return (
        f"def {s.function}({', '.join(params)}):\n"
        f'    """Baton stage {s.stage!r}: `baton run SPEC --run-id RUN_ID --only {s.stage} '
        f'--runs-dir RUNS_DIR` (or its distributed training, started and waited on)."""\n'
        "    from baton.pipeline.kfp.step import stage_step\n\n"
        f"    stage_step({pipeline!r}, {s.stage!r}, run_id, runs_dir, job, {{{ins}}}, {{{outs}}},\n"
        "               stage_metrics, launch)\n"
    )


def plan_source(pipeline: str, params: list[Any]) -> str:
    """The source of the first step's function: the run's parameters in, the run id out."""
    names = [p.name for p in params]
    typed = ", ".join(f"{p.name}: {p.type.__name__}" for p in params)
    values = ", ".join(f"{n!r}: {n}" for n in names)
    return (
        f"def {PLAN}(bundle: str, param_defs: str, buckets_only: bool, job: str, {typed}) -> str:\n"
        '    """Baton: the run id, this run\'s parameters applied to the spec, judged by '
        '`baton run SPEC --check`, written into the run directory."""\n'
        "    from baton.pipeline.kfp.step import plan_step\n\n"
        f"    return plan_step({pipeline!r}, bundle, param_defs, {{{values}}}, job, buckets_only)\n"
    )


def finish_source(pipeline: str, stages: list[tuple[str, str]]) -> str:
    rows = repr([list(s) for s in stages])
    return (
        f"def {FINISH}(run_id: str, runs_dir: str, job: str, summary: Output[Markdown]):\n"
        '    """Baton: the run\'s record (run.json) from every stage\'s commit; its summary."""\n'
        "    from baton.pipeline.kfp.step import finish_step\n\n"
        f"    finish_step({pipeline!r}, {rows}, run_id, runs_dir, job, summary)\n"
    )


def build(sources: dict[str, str], image: str) -> dict[str, Any]:
    """KFP components from function `sources` (name -> source), running `image`."""
    from kfp import dsl

    with tempfile.TemporaryDirectory(prefix="baton-kfp-components-") as tmp:
        path = Path(tmp) / "baton_kfp_components.py"
        path.write_text(_IMPORTS + "\n\n".join(sources.values()))
        spec = importlib.util.spec_from_file_location("baton_kfp_components", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        # the SDK reads each function's source now, while the file exists
        return {name: dsl.component(getattr(module, name), base_image=image,
                                    install_kfp_package=False)
                for name in sources}
