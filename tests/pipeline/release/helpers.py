"""Shared helpers for release tests: fixture upstream artifacts and lineage records."""

from __future__ import annotations

import dataclasses
import functools
import json
import shutil
from pathlib import Path
from typing import Any

from baton.pipeline.registry import stage
from baton.pipeline.release.testing import scratch, upstream
from baton.pipeline.testing import run_stage


def upstream_inputs(model: Path | None = None) -> dict[str, Path]:
    """Inputs of evaluate/export: the fixture model (or `model`), transform graph, examples."""
    u = upstream()
    return {"model": model or u.model, "transform_graph": u.transform_graph,
            "examples": u.examples}


def record(outputs: dict[str, Path], metrics: dict[str, Any], stage: str,
           stage_type: str | None = None) -> None:
    """Write the lineage record the runner would write after `pipeline.testing.run_stage`."""
    stage_dir = next(iter(outputs.values())).parent
    rec = {"stage": stage, "type": stage_type or stage, "status": "succeeded",
           "outputs": {k: {"path": str(v), "hash": "sha256:test"} for k, v in outputs.items()},
           "metrics": metrics, "finished": "2026-01-01T00:00:00Z"}
    (stage_dir / "lineage.json").write_text(json.dumps(rec))


@dataclasses.dataclass(frozen=True)
class ExportFixtureConfig:
    damage: str = "none"  # none | truncate | drop_variables | rename_input
    blessed: bool = True


def damage(saved_model: Path, how: str) -> None:
    """Break an exported saved_model artifact in one of the ways the check stage must refuse."""
    vdir = next(p for p in saved_model.iterdir() if p.name.isdigit())
    if how == "truncate":
        pb = vdir / "saved_model.pb"
        pb.write_bytes(pb.read_bytes()[: pb.stat().st_size // 2])
    elif how == "drop_variables":
        next((vdir / "variables").glob("variables.data-*")).unlink()
    elif how == "rename_input":
        from tensorflow.core.protobuf import saved_model_pb2

        pb = vdir / "saved_model.pb"
        sm = saved_model_pb2.SavedModel.FromString(pb.read_bytes())
        inputs = sm.meta_graphs[0].signature_def["serving_default"].inputs
        inputs["islnd"].CopyFrom(inputs["island"])
        del inputs["island"]
        pb.write_bytes(sm.SerializeToString())
    elif how != "none":
        raise ValueError(f"unknown damage {how!r}")


@stage(outputs=("saved_model", "blessing"), config=ExportFixtureConfig)
def fixture_export(ctx, config: ExportFixtureConfig) -> None:
    """A user stage for runner tests: a (possibly damaged) export of the fixture model and a
    blessing, so check/push can be run inside a real pipeline without training."""
    src = exported()
    dst = ctx.output("saved_model")
    shutil.rmtree(dst)
    shutil.copytree(src, dst)
    damage(dst, config.damage)
    (ctx.output("blessing") / "blessing.json").write_text(
        json.dumps({"blessed": config.blessed, "failed": [] if config.blessed else ["test"]}))


@functools.cache
def exported() -> Path:
    """One export of the fixture model per process (read-only for tests)."""
    root = scratch("baton-export-fixture-")
    outs, _ = run_stage("export", {"warmup_rows": 2}, upstream_inputs(), root)
    return outs["saved_model"]


@dataclasses.dataclass(frozen=True)
class UpstreamConfig:
    weak: bool = False  # an untrained model instead of the trained fixture model


@stage(outputs=("model", "transform_graph", "examples"), config=UpstreamConfig)
def fixture_upstream(ctx, config: UpstreamConfig) -> None:
    """A user stage for runner tests: the fixture train/transform/ingest outputs."""
    from baton.pipeline.release.testing import weak_model

    for name, src in upstream_inputs(weak_model() if config.weak else None).items():
        dst = ctx.output(name)
        shutil.rmtree(dst)
        shutil.copytree(src, dst)
