"""A run's outcome per stage, and the end-of-run table (`baton run`, `baton inspect`)."""

from __future__ import annotations

import dataclasses
import datetime as _dt
from pathlib import Path
from typing import Any

from baton.errors import BatonError
from baton.pipeline import store
from baton.pipeline.accounting import Usage, totals
from baton.pipeline.configs import config_to_dict


@dataclasses.dataclass
class StageResult:
    name: str
    type: str
    status: str  # succeeded | cached | failed | skipped | interrupted
    usage: Usage = dataclasses.field(default_factory=Usage)
    metrics: dict[str, Any] = dataclasses.field(default_factory=dict)
    error: str = ""


def summary_table(results: list[StageResult]) -> str:
    """The end-of-run table: one row per stage with time, CPU, memory, energy, carbon and key
    metrics."""
    head = ("stage", "status", "wall s", "cpu s", "peak MB", "energy J", "gCO2e", "metrics")
    rows = [head]
    for r in results:
        u = r.usage
        shown = [f"{k}={_fmt(v)}" for k, v in r.metrics.items()
                 if isinstance(v, int | float) or (isinstance(v, str) and len(v) <= 24)]
        rows.append((r.name, r.status, f"{u.wall_s:.1f}", f"{u.cpu_s:.1f}", f"{u.peak_rss_mb:.0f}",
                     f"{u.energy_j:.0f}", f"{u.co2e_g:.3f}",
                     " ".join(shown[:3]) or (r.error[:60] if r.error else "")))
    t = totals([r.usage for r in results])
    rows.append(("total", "", f"{t['wall_s']:.1f}", f"{t['cpu_s']:.1f}", f"{t['peak_rss_mb']:.0f}",
                 f"{t['energy_j']:.0f}", f"{t['co2e_g']:.3f}", f"energy: {t['energy_method']}"))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(head))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def summary_fields(results: list[StageResult]) -> dict[str, Any]:
    """The end-of-run table as the `summary` record's fields (BATON_LOG_FORMAT=json): one
    entry per stage under `stages` (name, type, status, usage, metrics, error), and `totals`."""
    return {
        "stages": [{"name": r.name, "type": r.type, "status": r.status, **r.usage.as_dict(),
                    "metrics": r.metrics, **({"error": r.error} if r.error else {})}
                   for r in results],
        "totals": totals([r.usage for r in results]),
    }


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def write_run_record(
    run_dir: Path, pipeline: str, run_id: str, started: str, status: str,
    results: list[StageResult], options: Any, energy_config: Any = None,
    bucket: Any = None,
) -> None:
    """`run.json`: the run's status and every stage's row so far (uploaded beside a bucket
    run too: `bucket` is its pipeline.bucket_run.BucketRun)."""
    store.write_json_atomic(run_dir / "run.json", {
        "pipeline": pipeline, "run_id": run_id, "status": status, "started": started,
        "finished": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds") if status != "running" else None,
        "options": config_to_dict({k: v for k, v in dataclasses.asdict(options).items()}),
        "stages": [{"name": r.name, "type": r.type, "status": r.status, "usage": r.usage.as_dict(),
                    "metrics": r.metrics, "error": r.error} for r in results],
        "totals": totals([r.usage for r in results]),
        **({"energy": config_to_dict(energy_config)} if energy_config is not None else {}),
    })
    if bucket is not None:
        try:
            bucket.save("run.json")
        except BatonError:
            if status in ("succeeded", "running"):
                raise  # a run whose record is missing on the store did not succeed there
            # failed or stopped already (often because of the store): that error is the news
