"""Shared, cached small artifacts for data-plane tests (penguins ingest + transform run once)."""

from __future__ import annotations

from pathlib import Path

from baton.pipeline.testing import run_stage

_CACHE: dict[str, dict[str, Path]] = {}


def penguins(root: Path) -> dict[str, Path]:
    """examples, transformed and transform_graph of the embedded penguins, built once per session."""
    if "penguins" not in _CACHE:
        out, _ = run_stage("ingest", {}, {}, root)
        t_out, _ = run_stage("transform", {}, {"examples": out["examples"]}, root)
        _CACHE["penguins"] = {**out, **t_out}
    return _CACHE["penguins"]
