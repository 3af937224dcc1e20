"""`baton task SPEC --stage train --run-dir s3://...`: a training replica without a shared volume.

Each replica (a TFJob or JobSet pod on any node) stages the train stage's inputs from the bucket
by their commits (pipeline.bucket_run: the node cache, then hard links into this node's mirror
of the run directory) and trains with its backups in the mirror, which strategies.backup_sync
keeps on the bucket, so a replica restarted elsewhere resumes. The chief, once the model is
written, commits the stage to the bucket as the runner would (its outputs by manifest, then its
lineage record), and the release Job's `baton run --only ...` finds it there.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from baton.pipeline import store
from baton.pipeline.bucket_run import BucketRun
from baton.storage import location as L
from baton.storage import node_cache


def open_run(run_dir: str | None) -> BucketRun | None:
    """The bucket run `--run-dir` names (`<runs URL>/<pipeline>/<run id>`), or None (local)."""
    if not run_dir or not L.is_remote(run_dir):
        return None
    url = L.normalize(run_dir, "--run-dir")
    return BucketRun(L.parent(url), L.basename(url))


def backup_dir(given: str | None, out: Path) -> Path:
    """`--backup-dir`: a bucket URL becomes this node's mirror of it (synced by backup_sync);
    default `OUT/backup`, which on a bucket run is inside the mirror as well."""
    if given and L.is_remote(given):
        return node_cache.mirror_dir(L.normalize(given, "--backup-dir"))
    return Path(given) if given else out / "backup"


def stage_inputs(bucket: BucketRun, stage: Any) -> dict[str, dict[str, Any]]:
    """Stage every input of `stage` (a StageSpec) from its upstream commit; returns the
    input records (ref, path, hash) for the stage's lineage."""
    from baton.errors import StageError

    records = {}
    for name, ref in stage.inputs.items():
        up, _, output = ref.partition(".")
        rec = bucket.hydrate(up, [output])
        out = (rec or {}).get("outputs", {}).get(output)
        if out is None:
            raise StageError(f"input {name!r} ({ref}) is not committed in {bucket.url}")
        records[name] = {"ref": ref, "path": str(bucket.run_dir / up / output),
                         "hash": out["hash"]}
    return records


def commit(bucket: BucketRun, stage_name: str, out: Path, outputs: tuple[str, ...],
           inputs: dict[str, dict[str, Any]], record: dict[str, Any]) -> None:
    """Commit the chief's `out/<output>` directories as stage `stage_name` of the bucket run,
    with `record` (pipeline.training.task_record.succeeded_record) as its lineage: its inputs
    are those staged from the bucket, its outputs' paths those of the committed stage."""
    work = bucket.run_dir / f"{store.TMP_PREFIX}{stage_name}-task-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    for name in outputs:
        store.link_tree(out / name, work / name)
    final = bucket.run_dir / stage_name
    record = {
        **record, "inputs": inputs,
        "outputs": {n: {"path": str(final / n), "hash": store.hash_path(work / n)}
                    for n in outputs},
        "written_by": "baton task",
    }
    try:
        bucket.begin(stage_name)
        bucket.commit(stage_name, work, record)
    finally:
        shutil.rmtree(work, ignore_errors=True)
