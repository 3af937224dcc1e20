"""Finding the baseline (the last blessed model of this pipeline) and earlier versions through
lineage records, never by scanning directories: lineage is what says a stage succeeded.

A record is the runner's `lineage.json`: `stage`, `type`, `status`, `outputs` ({name: {path,
hash}}), `metrics` (what the stage passed to ctx.record), `run_id` when present.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from baton.strategies.job import MODEL_FILE


def output_path(record: Mapping[str, Any], name: str, roots: Iterable[Path],
                fetch: Callable[[Path], Path] = Path) -> Path | None:
    """The directory of output `name` of a lineage record, if it still exists (`fetch`: stages
    it on this node first, for a run directory on an object store: StageContext.fetch)."""
    out = (record.get("outputs") or {}).get(name)
    raw = out.get("path") if isinstance(out, Mapping) else out
    if not raw:
        return None
    p = Path(raw)
    candidates = [fetch(p)] if p.is_absolute() else [r / p for r in roots] + [p]
    return next((c for c in candidates if c.exists()), None)


def _roots(ctx: Any) -> list[Path]:
    root = Path(ctx.runs_root)
    return [root, root.parent, root.parent.parent]


def run_id(record: Mapping[str, Any]) -> str:
    return str(record.get("run_id") or record.get("run") or "?")


def find(ctx: Any, reevaluate: Callable[[Path, Path], Mapping[str, float]] | None = None
         ) -> dict[str, Any] | None:
    """The last blessed evaluation of this stage in this pipeline, or None.

    With `reevaluate(model_dir, transform_dir)`, the baseline model is evaluated again on the
    current data when its artifacts still exist; otherwise its recorded metrics are used.
    """
    records = list(ctx.previous_records(stage_type=ctx.stage_type))
    same = [r for r in records if r.get("stage") == ctx.stage] or records
    for record in same:
        if record.get("status", "succeeded") != "succeeded":
            continue
        bless_dir = output_path(record, "blessing", _roots(ctx), ctx.fetch)
        blessing = None
        if bless_dir is not None and (bless_dir / "blessing.json").is_file():
            blessing = json.loads((bless_dir / "blessing.json").read_text())
        blessed = blessing["blessed"] if blessing else (record.get("metrics") or {}).get("blessed")
        if not blessed:
            continue
        metrics = dict((blessing or {}).get("metrics") or record.get("metrics") or {})
        metrics.pop("blessed", None)
        base = {"run_id": run_id(record), "metrics": metrics, "source": "recorded",
                "model": (blessing or {}).get("model")}
        if reevaluate and blessing:
            model = ctx.fetch(blessing.get("model", ""))
            transform = ctx.fetch(blessing.get("transform_graph", ""))
            if (model / MODEL_FILE).is_file() and transform.is_dir():
                try:
                    base["metrics"] = dict(reevaluate(model, transform))
                    base["source"] = "re-evaluated on this eval split"
                except Exception as exc:  # noqa: BLE001 - e.g. a model of an older data format
                    first = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
                    base["source"] = f"recorded (cannot re-evaluate on this data: {first})"
        return base
    return None


def last_version(ctx: Any, stage_type: str = "export") -> int:
    """The highest `version` recorded by earlier successful `stage_type` stages (0 if none)."""
    best = 0
    for record in ctx.previous_records(stage_type=stage_type):
        v = (record.get("metrics") or {}).get("version")
        if isinstance(v, int) and not isinstance(v, bool):
            best = max(best, v)
    return best
