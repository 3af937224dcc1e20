"""What the train stage lends the run of its job (strategies.run): where its backups live, the
command line of one local task, the spec's cluster and energy sections; and the inputs' content
hash and the examples a run trained on, for the stage's records.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from baton.pipeline.context import StageContext
from baton.strategies import backup_sync
from baton.strategies.host import Host


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


def task_argv(job_file: Path, out: Path, backup_dir: Path) -> list[str]:
    """The command of one local task: `baton task` in its explicit form (a counted job file)."""
    return [sys.executable, "-m", "baton.pipeline.commands.task", "--job", str(job_file),
            "--out", str(out), "--backup-dir", str(backup_dir)]


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


def spec_energy(ctx: StageContext) -> Any:
    from baton.energy import EnergyConfig
    from baton.pipeline.spec import load_spec

    try:
        return load_spec(ctx.spec_path).energy if ctx.spec_path else EnergyConfig()
    except Exception:  # noqa: BLE001 - the energy section is optional context here
        return EnergyConfig()


def host(ctx: StageContext) -> Host:
    """The stage's context as the run of its job sees it (strategies.host.Host)."""
    return Host(
        work_dir=ctx.work_dir,
        out=ctx.output("model"),
        log=ctx.log,
        progress=lambda total: ctx.progress(total, "steps", label=ctx.stage),
        backup_dir=lambda job: backup_dir(ctx, job),
        task_command=task_argv,
        stream=ctx.stream,
        quiet=ctx.options.quiet,
        inject_failure=ctx.options.inject_failure,
        inject_slowdown=getattr(ctx.options, "inject_slowdown", None),
        energy=spec_energy(ctx),
    )
