"""Check: infra-validate the exported SavedModel before anything is pushed.

Static checks (layout, variables, signatures, method names) run first and name the problem;
then a fresh process loads the model, replays the warmup requests and its answers are compared
with the in-process model's (`expected_outputs.json` written by export). Any problem is a
StageError, so push never sees the model and the serving directory stays untouched.
"""

from __future__ import annotations

import dataclasses
import json

from baton.errors import StageError
from baton.pipeline.context import StageContext

INPUTS = {"saved_model": True}
OUTPUTS = ("check",)
CODE_DEPS = ("baton.pipeline.release.infra", "baton.pipeline.release.infra_worker", "baton.graphs.signatures")
CACHEABLE = True


@dataclasses.dataclass(frozen=True)
class Config:
    """timeout_seconds: limit for loading + warming up in the fresh process.
    atol: largest allowed difference between fresh-process and in-process outputs."""

    timeout_seconds: float = 180.0
    atol: float = 1e-4

    def __post_init__(self) -> None:
        if self.timeout_seconds <= 0:
            raise ValueError(f"timeout_seconds must be > 0. Received: {self.timeout_seconds}")
        if self.atol < 0:
            raise ValueError(f"atol must be >= 0. Received: {self.atol}")


def run(ctx: StageContext, config: Config) -> None:
    from baton.pipeline.release import infra
    from baton.pipeline.stages.export import EXPECTED, EXPORT_INFO, version_dir

    root = ctx.inputs["saved_model"]
    vdir = root if (root / "saved_model.pb").exists() else version_dir(root)
    info = _load(root / EXPORT_INFO)
    problems = infra.static_problems(vdir, info)
    if problems:
        _fail(vdir, problems)
    report = infra.run_fresh(vdir, config.timeout_seconds)
    if "error" in report:
        _fail(vdir, [report["error"]])
    expected = _load(root / EXPECTED)
    worst = 0.0
    if expected is not None:
        worst, problems = infra.compare(report["outputs"], expected, config.atol)
        if problems:
            _fail(vdir, problems)
    else:
        ctx.log("no expected_outputs.json beside the model: outputs not compared")
    result = {"ok": True, "version_dir": str(vdir), "version": vdir.name,
              "warmup_requests": report["requests"], "compared": expected is not None,
              "max_abs_diff": worst, "load_seconds": report["load_seconds"],
              "latency_ms": report["latency_ms"], "problems": []}
    (ctx.output("check") / "check.json").write_text(json.dumps(result, indent=2) + "\n")
    ctx.record(ok=True, warmup_requests=report["requests"], max_abs_diff=worst,
               load_seconds=round(report["load_seconds"], 3))
    ctx.log(f"version {vdir.name}: loads in a fresh process, {report['requests']} warmup "
            f"requests answer as the in-process model (max diff {worst:.2g})")


def _load(path):
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError as exc:
        raise StageError(f"check: {path} is not valid JSON: {exc}") from None


def _fail(vdir, problems: list[str]) -> None:
    lines = "\n".join(f"  - {p}" for p in problems)
    raise StageError(f"check: the SavedModel at {vdir} is refused ({len(problems)} "
                     f"problem{'s' if len(problems) > 1 else ''}):\n{lines}")
