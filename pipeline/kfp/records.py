"""The record of a run whose stages ran as separate steps: `run.json` from the stages' commits.

Each stage's step is one `baton run --only STAGE` invocation, and each writes the run's
`run.json` as it finished; steps on parallel branches finish in any order. The last step writes
it once more from every stage's commit, so the record lists the whole run (`baton inspect`,
and later runs' search for the last blessed model, read it).
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

from baton.configs import build_config
from baton.energy import EnergyConfig
from baton.pipeline import lineage
from baton.pipeline.bucket_run import BucketRun
from baton.pipeline.context import RunOptions
from baton.pipeline.summary import StageResult, committed_result, summary_table
from baton.pipeline.summary import write_run_record as _write
from baton.storage import location as L
from baton.storage import objects


def write_run_record(pipeline: str, stages: list[tuple[str, str]], run_id: str,
                     root: str) -> str:
    """Write `<root>/<run_id>/run.json` (root: the pipeline's runs location, a bucket URL or a
    local directory) from the commits of `stages` ((name, type) in run order); returns the
    summary table. A stage without a commit is `failed` and the run too."""
    bucket = BucketRun(root, run_id) if L.is_remote(root) else None
    run_dir = bucket.run_dir if bucket is not None else Path(root) / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    earlier = objects.read_json(L.join(root, run_id, "run.json")) or {}
    energy = earlier.get("energy") or {}
    results: list[StageResult] = []
    started = []
    for name, kind in stages:
        rec = bucket.read_commit(name) if bucket is not None else lineage.read(run_dir / name)
        if rec is None or rec.get("status") != "succeeded":
            results.append(StageResult(name, kind, "failed", error="no commit in this run"))
            continue
        results.append(committed_result(rec, energy))
        started.append(str(rec.get("started") or ""))
    status = "succeeded" if all(r.status != "failed" for r in results) else "failed"
    first = min((s for s in started if s), default=_dt.datetime.now(_dt.UTC).isoformat())
    # the spec's energy settings, as the stages' own invocations recorded them
    planned = objects.read_json(L.join(root, run_id, ".kfp", "run.json")) or {}
    _write(run_dir, pipeline, run_id, str(planned.get("started") or first), status, results,
           RunOptions(), build_config(EnergyConfig, energy) if energy else None, bucket)
    return summary_table(results)
