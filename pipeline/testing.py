"""Helpers for tests of stages: run one stage outside a pipeline, exactly as the runner would."""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from baton.configs import build_config
from baton.pipeline import registry
from baton.pipeline.context import RunOptions, StageContext


def run_stage(
    stage_type: str,
    config: Mapping[str, Any] | None,
    inputs: Mapping[str, str | Path],
    root: str | Path,
    *,
    stage: str | None = None,
    run_id: str = "test-run",
    pipeline: str = "test",
    options: RunOptions | None = None,
    spec_dir: str | Path | None = None,
) -> tuple[dict[str, Path], dict[str, Any]]:
    """Run `stage_type` with `config` on `inputs`; returns (outputs by name, recorded metrics).

    Outputs land in `root/runs/<pipeline>/<run_id>/<stage>/<output>` after an atomic rename,
    as in a real run. `spec_dir` (default: `root`) is where user code named in the config is
    imported from, as the spec's directory is in a run.
    """
    st = registry.resolve(stage_type)
    stage = stage or stage_type
    runs_root = Path(root) / "runs" / pipeline
    run_dir = runs_root / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    work = run_dir / f".tmp-{stage}-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=False)
    cfg = build_config(st.config_cls, config) if st.config_cls else dict(config or {})
    ctx = StageContext(
        pipeline=pipeline, run_id=run_id, stage=stage, stage_type=stage_type, run_dir=run_dir,
        runs_root=runs_root, work_dir=work, inputs={k: Path(v) for k, v in inputs.items()},
        options=options or RunOptions(quiet=True), spec_dir=Path(spec_dir or root), stream=io.StringIO(),
    )
    st.run(ctx, cfg)
    final = run_dir / stage
    os.replace(work, final)
    return {name: final / name for name in st.outputs}, dict(ctx.metrics)
