"""Running a train job: in this process, or as a local cluster of `baton task` processes
(one per task, on free 127.0.0.1 ports, as the TFJob pods run); and where its backups live.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

from baton.errors import Preempted, StageError
from baton.pipeline.context import StageContext
from baton.pipeline.training.topology import Topology
from baton.strategies import backup_sync
from baton.strategies.factory import MULTI_WORKER_MIRRORED
from baton.strategies.job import MODEL_FILE, TRAIN_INFO_FILE


def backup_dir(ctx: StageContext, job: Any) -> Path:
    """Where this stage's training backups live: stable across pids and run ids.

    `runs/<pipeline>/.backups/<stage>-<key>`, outside the stage's pid-named temporary directory
    (which the runner discards on failure or interruption). The key digests what determines
    the training, like the runner's cache key but over what training actually reads: the job
    (config, feature spec, row count; `TrainJob.fingerprint`, which includes the content hash
    of the transformed data and not its path) and the stage's code version. It leaves out the
    transform graph's SavedModel bytes, which differ between two transforms of the same data.
    So a rerun of the same spec on the same data, in the same run (`--run-id`) or a new one,
    finds the interrupted run's backup; a changed config, data or code starts afresh. The
    directory is removed once the model is written.
    """
    import hashlib

    from baton.pipeline import cache, registry

    code = cache.code_version(registry.resolve(ctx.stage_type).code_files())
    key = hashlib.sha256(f"{code}\n{job.fingerprint()}".encode()).hexdigest()[:16]
    path = ctx.runs_root / ".backups" / f"{ctx.stage}-{key}"
    backup_sync.pull(path)  # a bucket run: the interrupted run's backup, from the bucket
    return path


def content_hash(path: Path) -> str:
    """An input's content hash: from its producer's lineage record, else hashed here."""
    from baton.pipeline import lineage, store

    rec = lineage.read(path.parent) or {}
    out = rec.get("outputs", {}).get(path.name, {})
    return str(out.get("hash") or store.hash_path(path))


def run_in_process(
    ctx: StageContext, job: Any, out: Path, node: dict, defaults: dict, backups: Path
) -> None:
    from baton.strategies import faults, trainer
    from baton.strategies.job import run_task, write_model_artifact
    from baton.strategies.preemption import stop_on_sigterm

    bar = ctx.progress(job.total_steps(), "steps", label=ctx.stage)

    def on_progress(step: int, total: int, metrics: dict[str, float]) -> None:
        bar.set(step)

    role = trainer.TaskRole(
        is_chief=True,
        task_name="worker:0",
        backup_dir=backups,
        logs_dir=out / "logs",
        fault=faults.parse_fault(ctx.options.inject_failure),
        on_progress=on_progress,
    )
    # SIGTERM: stop at the next chunk boundary, save, exit 143 (not a death without a backup).
    with stop_on_sigterm(role.stop.set) as sigterm:
        role.after_strategy = sigterm.install  # a multi-worker strategy installs its own
        try:
            result = run_task(job, None, role)
        except Preempted as exc:
            bar.close()
            raise Preempted(f"training {exc} in {backups}; rerun to resume", step=exc.step) from None
    bar.close()
    assert result is not None
    write_model_artifact(
        out,
        job,
        result,
        {"cluster": {"workers": 1, "ps": 0}, "inventory": [node], "defaults": defaults},
    )
    if sigterm.seen:  # it came after the last chunk: the final backup stands, resume is instant
        raise Preempted(f"SIGTERM after training finished; backup in {backups}")
    backup_sync.remove(backups)


def task_argv(job_file: Path, out: Path, backup_dir: Path) -> list[str]:
    """The command of one local task: `baton task` in its explicit form (a counted job file)."""
    return [sys.executable, "-m", "baton.pipeline.commands.task", "--job", str(job_file),
            "--out", str(out), "--backup-dir", str(backup_dir)]


def run_cluster(
    ctx: StageContext, max_restarts: int, job: Any, topo: Topology, out: Path,
    backups: Path
) -> None:
    from baton.strategies import faults, launcher
    from baton.strategies.slowdown import parse_slowdown

    job_file = ctx.work_dir / "job.json"
    job_file.write_text(job.to_json())
    fault = faults.parse_fault(ctx.options.inject_failure)
    cluster_out = ctx.work_dir / "cluster"

    def command(task: Any) -> list[str]:
        return task_argv(job_file, cluster_out, backups)

    bar = ctx.progress(job.total_steps(), "steps", label=ctx.stage)
    result = launcher.launch(
        launcher.LaunchConfig(
            workers=topo.workers,
            ps=topo.ps,
            strategy=topo.strategy,
            max_restarts=max_restarts,
            fault=fault,
            state_dir=ctx.work_dir / "launcher",
            slowdown=parse_slowdown(getattr(ctx.options, "inject_slowdown", None)),
            min_workers=topo.min_workers if topo.strategy == MULTI_WORKER_MIRRORED else None,
            global_batch_size=job.batch_size,
        ),
        command,
        stream=ctx.stream,
        quiet=ctx.options.quiet,
        on_step=bar.set,
    )
    bar.close()
    if result.preempted:
        raise Preempted(f"training cluster {result.error}; backup in {backups}; rerun to resume")
    if not result.ok:
        raise StageError(f"training cluster failed: {result.error}")
    produced = cluster_out / "model"
    if not (produced / MODEL_FILE).is_file():
        raise StageError(f"the chief finished but wrote no model into {produced}")
    shutil.rmtree(out)
    produced.replace(out)
    info = json.loads((out / TRAIN_INFO_FILE).read_text())
    info["restarts"] = result.restarts
    info["launcher"] = result.summary()
    # where this stage's first group started (a backup of an earlier, interrupted run, or 0):
    # the examples it trained count from there, over every restart and resize
    first = result.segments[0].get("resumed_from") if result.segments else None
    if first is not None:
        info["started_from_step"] = first
    if topo.elastic or result.elastic:
        # strategies/elastic.py: each resize and the speed of each group size
        info["min_workers"] = topo.min_workers
        info["elastic"] = result.elastic
        info["segments"] = result.segments
    (out / TRAIN_INFO_FILE).write_text(json.dumps(info, indent=2, default=str) + "\n")
    backup_sync.remove(backups)


def examples_trained(info: dict[str, Any], batch_size: int) -> int:
    """The examples this stage run trained on, from its train_info: the steps from where its
    first group started (a backup of an earlier, interrupted run, or 0) to the last, over every
    restart and resize of the group in between. The stage's energy, the steps a restart
    recomputes included, is divided by it (joules per example). A parameter-server run has no
    segments: it counts from its last group's start."""
    start = info.get("started_from_step", info.get("resumed_from_step", 0))
    return (int(info["steps"]) - int(start)) * batch_size


def spec_cluster(ctx: StageContext) -> Any:
    from baton.pipeline.spec import load_spec

    try:
        return load_spec(ctx.spec_path).cluster if ctx.spec_path else None
    except Exception:  # noqa: BLE001 - the cluster section is optional context here
        return None
