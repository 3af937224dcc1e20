"""The KFP artifacts of a Baton step: the commit records of what it made, and their checks.

A stage's outputs stay where Baton committed them (the run directory on the bucket, manifests
and content-addressed objects, docs/artifacts.md): copying every example shard and model
through KFP's launcher (download before a step, upload after) would move each byte again for
every step that reads it. Each output becomes a KFP artifact whose file is a small JSON record
naming the committed output (run, stage, output, content hash, location) and whose metadata
repeats it for the UI and Vertex ML Metadata. A consuming step checks what KFP handed it against
the run's own commit: a record from another run, or one the run no longer holds (the stage ran
again since), fails the step with both named instead of reading the wrong bytes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from baton.errors import StageError
from baton.storage import location as L
from baton.storage import objects

LINEAGE = "lineage.json"
# artifact types by what an output holds (KFP's system types: the UI draws each its own way)
MODELS = ("model", "saved_model", "edge_model", "pushed")
DATASETS = ("examples", "transformed")


def kind(output: str) -> str:
    """The KFP artifact class name (`kfp.dsl`) for Baton output `output`."""
    if output in MODELS:
        return "Model"
    if output in DATASETS:
        return "Dataset"
    return "Artifact"


def commit(run_location: str, stage: str) -> dict[str, Any] | None:
    """The committed lineage record of `stage` in the run at `run_location` (a bucket URL or a
    local run directory), or None."""
    rec = objects.read_json(L.join(run_location, stage, LINEAGE))
    return rec if isinstance(rec, dict) and rec.get("status") == "succeeded" else None


def record(rec: Mapping[str, Any], output: str, run_location: str) -> dict[str, Any]:
    """What the artifact of `output` of the committed stage `rec` says."""
    out = rec["outputs"][output]
    cache = rec.get("cache") or {}
    return {
        "pipeline": rec.get("pipeline"), "run_id": rec.get("run_id"), "stage": rec.get("stage"),
        "type": rec.get("type"), "output": output, "hash": out.get("hash"),
        "location": out.get("url") or L.join(run_location, str(rec.get("stage")), output),
        "cached_from": cache.get("from") if cache.get("hit") else None,
    }


def write(artifact: Any, rec: Mapping[str, Any], output: str, run_location: str) -> None:
    """Fill KFP output `artifact` (a kfp.dsl.Artifact) with the record of `output`."""
    data = record(rec, output, run_location)
    with open(artifact.path, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    artifact.metadata.update({k: v for k, v in data.items() if v is not None})


def read(artifact: Any) -> dict[str, Any]:
    """The record in KFP input `artifact` (StageError when it holds none)."""
    try:
        with open(artifact.path) as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise StageError(f"input artifact {artifact.uri}: not a Baton output record ({exc})") \
            from None
    if not isinstance(data, dict) or "hash" not in data:
        raise StageError(f"input artifact {artifact.uri}: not a Baton output record")
    return data


def check(name: str, data: Mapping[str, Any], run_id: str, run_location: str) -> None:
    """StageError unless the record `data` KFP passed as input `name` is what this run holds."""
    ref = f"{data.get('stage')}.{data.get('output')}"
    if data.get("run_id") != run_id:
        raise StageError(
            f"input {name!r} ({ref}): KFP passed the output of run {data.get('run_id')}, and "
            f"this step runs in run {run_id}; a step's inputs come from its own run (KFP's step "
            "cache is off for Baton steps: docs/kfp.md)")
    rec = commit(run_location, str(data.get("stage")))
    held = (rec or {}).get("outputs", {}).get(str(data.get("output")), {}).get("hash")
    if held != data.get("hash"):
        raise StageError(
            f"input {name!r} ({ref}): KFP passed content {data.get('hash')}, and run {run_id} "
            f"holds {held or 'nothing'} for it (the stage ran again since, or its commit is "
            "gone)")
