"""One training job run on this node: in this process, or as a local cluster of task processes
(one per task, on free 127.0.0.1 ports, as the TFJob pods run), after a topology probe when the
workers are `auto`.

The train stage (pipeline.stages.train) resolves the topology, builds the `TrainJob` and calls
`train` once; everything from there to a written `model` artifact happens here: the row count,
the probe, the node's inventory and its defaults, the backup directory's report, the launcher
or the in-process task. What the stage lends the run (its directories, log, progress bar,
where backups live, the command of one task) arrives as a `strategies.host.Host`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from baton.errors import Preempted, StageError
from baton.strategies import backup_sync
from baton.strategies.factory import MULTI_WORKER_MIRRORED
from baton.strategies.host import Host
from baton.strategies.job import MODEL_FILE, TRAIN_INFO_FILE, TrainJob, counted
from baton.strategies.topology import Topology, placed


def train(job: TrainJob, topo: Topology, host: Host) -> None:
    """Train `job` under `topo` (probing the candidates first under `workers: auto`) into
    `host.out`, resuming from the job's backup when one is on disk.

    What the stage records comes from the artifact alone (its train_info.json: the model's
    figures, the node's `defaults`, the probe's `topology_probe`), so nothing of the run
    travels back up but the files."""
    from baton.strategies import inventory

    job = placed(counted(job), topo)
    node = inventory.node_inventory()
    probe: dict[str, Any] | None = None
    if topo.auto is not None:
        from baton.strategies.auto_workers import pick_topology

        topo, job, probe = pick_topology(host, job, topo.auto, node)
    backups = host.backup_dir(job)
    if not topo.multi_process and "threads" not in node:  # a task sets its own (commands.task)
        node["threads"] = inventory.apply_threads(inventory.thread_plan(node, 1))
    defaults = inventory.derive_defaults([node] * max(topo.workers, 1), job.settings.batch_size,
                                         topo.strategy)
    host.log(
        f"strategy {topo.strategy}, workers {topo.workers}, ps {topo.ps}; "
        f"{inventory.describe(node)}; "
        f"{inventory.describe_defaults(defaults)}"
    )
    found = " (holds a backup: resuming from it)" if (backups / "checkpoint").is_file() else ""
    host.log(f"backups in {backups}{found}")
    if topo.multi_process:
        run_cluster(host, job, topo, backups)
    else:
        run_in_process(host, job, node, defaults, backups)
    if probe is not None:  # the probe's table and choice, beside the run they chose
        info = json.loads((host.out / TRAIN_INFO_FILE).read_text())
        info["topology_probe"] = probe
        (host.out / TRAIN_INFO_FILE).write_text(json.dumps(info, indent=2, default=str) + "\n")


def run_in_process(
    host: Host, job: TrainJob, node: dict, defaults: dict, backups: Path
) -> None:
    from baton.strategies import faults, loop
    from baton.strategies.preemption import stop_on_sigterm
    from baton.strategies.task import run_task, write_model_artifact

    bar = host.progress(job.total_steps())

    def on_progress(step: int, total: int, metrics: dict[str, float]) -> None:
        bar.set(step)

    role = loop.TaskRole(
        is_chief=True,
        task_name="worker:0",
        backup_dir=backups,
        logs_dir=host.out / "logs",
        fault=faults.parse_fault(host.inject_failure),
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
        host.out,
        job,
        result,
        {"cluster": {"workers": 1, "ps": 0}, "inventory": [node], "defaults": defaults},
    )
    if sigterm.seen:  # it came after the last chunk: the final backup stands, resume is instant
        raise Preempted(f"SIGTERM after training finished; backup in {backups}")
    backup_sync.remove(backups)


def run_cluster(host: Host, job: TrainJob, topo: Topology, backups: Path) -> None:
    from baton.strategies import faults, launcher
    from baton.strategies.slowdown import parse_slowdown

    job_file = host.work_dir / "job.json"
    job_file.write_text(job.to_json())
    fault = faults.parse_fault(host.inject_failure)
    cluster_out = host.work_dir / "cluster"

    def command(task: Any) -> list[str]:
        return host.task_command(job_file, cluster_out, backups)

    bar = host.progress(job.total_steps())
    result = launcher.launch(
        launcher.LaunchConfig(
            workers=topo.workers,
            ps=topo.ps,
            strategy=topo.strategy,
            max_restarts=job.settings.max_restarts,
            fault=fault,
            state_dir=host.work_dir / "launcher",
            slowdown=parse_slowdown(host.inject_slowdown),
            min_workers=topo.min_workers if topo.strategy == MULTI_WORKER_MIRRORED else None,
            global_batch_size=job.settings.batch_size,
        ),
        command,
        stream=host.stream,
        quiet=host.quiet,
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
    out = host.out
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
