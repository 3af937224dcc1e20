"""Where a compiled pipeline keeps things in Baton's runs directory (a bucket URL, or a local
directory for `kfp.local`): the runs, the spec a run's first step wrote, the models push
publishes, the markers of permanently failed steps.
"""

from __future__ import annotations

from pathlib import Path

from baton.storage import location as L

SPEC_DIR = ".kfp/spec"  # beside the stages in the run directory (no stage name starts with '.')


def runs_root(runs_dir: str, pipeline: str) -> str:
    """`<runs dir>/<pipeline>`: a bucket URL, or an absolute local path (as the runner's)."""
    base = L.normalize(runs_dir, "runs_dir")
    return L.join(base, pipeline) if L.is_remote(base) else str((Path(base) / pipeline).resolve())


def run_location(runs_dir: str, pipeline: str, run_id: str) -> str:
    return L.join(runs_root(runs_dir, pipeline), run_id)


def models_location(runs_dir: str, pipeline: str) -> str:
    """`models/<pipeline>` beside the runs directory (`baton k8s --runs-dir`'s choice)."""
    base = L.normalize(runs_dir, "runs_dir").rstrip("/")
    if L.is_remote(base):
        url = L.parse(base)
        parent = L.parent(base) if url.key else base
        return L.join(parent, "models", pipeline)
    return str(Path(base).resolve().parent / "models" / pipeline)


def marker_location(runs_dir: str, pipeline: str, job: str, step: str) -> str:
    return L.join(runs_root(runs_dir, pipeline), ".kfp", "jobs", _safe(job), f"{step}.json")


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in text) or "job"
