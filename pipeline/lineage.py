"""Lineage records: what each stage execution read, with which config and code, and made.

One JSON record per stage execution at `runs/<pipeline>/<run id>/<stage>/lineage.json`, written
inside the stage's temporary directory so it appears atomically with the outputs it describes.
Records are how `baton inspect` explains a run, how the cache finds reusable work, and how
later stages find baselines (the last blessed model) without a metadata server.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

FILENAME = "lineage.json"


def read(stage_dir: Path) -> dict[str, Any] | None:
    path = stage_dir / FILENAME
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def iter_records(
    runs_root: Path, stage_type: str | None = None, exclude_run: str | None = None
) -> Iterator[dict[str, Any]]:
    """Successful stage records under `runs_root`, newest run first (run ids sort by time)."""
    if not runs_root.is_dir():
        return
    for run_dir in sorted((p for p in runs_root.iterdir() if p.is_dir()), reverse=True):
        if run_dir.name.startswith(".") or run_dir.name == exclude_run:
            continue
        for stage_dir in sorted(p for p in run_dir.iterdir() if p.is_dir()):
            rec = read(stage_dir)
            if rec is None or rec.get("status") != "succeeded":
                continue
            if stage_type is None or rec.get("type") == stage_type:
                rec.setdefault("run_id", run_dir.name)
                rec["stage_dir"] = str(stage_dir)
                yield rec
