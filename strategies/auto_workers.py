"""`workers: auto`: probe each candidate topology on the real job for a few steps and pick
the fastest (or, with `objective: energy`, the fewest joules per example), saying why.

strategies.probe measures and chooses; this drives the candidates (one process here, clusters
through the launcher) for `strategies.run.train`, before the real run.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

from baton.errors import StageError
from baton.strategies.factory import ONE_DEVICE
from baton.strategies.host import Host
from baton.strategies.topology import AutoWorkers, Topology, balance_mode


def candidate_job(job: Any, cand: Any) -> Any:
    """The real job with a candidate's strategy (and the balance that strategy would get)."""
    topo = Topology(cand.strategy, cand.workers, 0)
    balance = "off" if cand.strategy == ONE_DEVICE else balance_mode(job.settings, topo)
    return dataclasses.replace(job, strategy=cand.strategy, balance=balance)


def pick_topology(
    host: Host, job: Any, auto: AutoWorkers, node: dict
) -> tuple[Topology, Any, dict[str, Any]]:
    """`workers: auto`: probe every candidate on this job, pick one, say why.

    A candidate whose backup is on disk (an interrupted auto run) is taken without probing, so
    the rerun resumes it. Otherwise each is probed for one warm-up chunk plus `probe_steps`
    timed steps: one process in this process, clusters through the launcher with the same job
    (user callbacks left out: their side effects belong to the real run). Probes write their
    backups (a cluster's tasks need a directory) under this stage's work directory, removed
    after each probe: the real run starts from step 0.
    """
    import time

    from baton import energy
    from baton.strategies import inventory
    from baton.strategies import probe as probing

    cands = probing.candidates(auto.max_workers)
    for cand in cands:
        cand_job = candidate_job(job, cand)
        if (host.backup_dir(cand_job) / "checkpoint").is_file():
            reason = f"picked {cand.label}: its backup is on disk (resuming it, no probe)"
            host.log(f"workers auto ({auto.source}): {reason}")
            info = {"source": auto.source, "objective": auto.objective, "candidates": [],
                    "chosen": {"strategy": cand.strategy, "workers": cand.workers},
                    "reason": reason, "seconds": 0.0, "max_workers": auto.max_workers}
            return Topology(cand.strategy, cand.workers, 0), cand_job, info
    energy_config = host.energy or energy.EnergyConfig()
    counter = energy.open_counter(energy_config)
    total = job.total_steps()
    probe_len = job.settings.steps_per_execution + auto.probe_steps
    host.log(
        f"workers auto ({auto.source}): probing {', '.join(c.label for c in cands)} for "
        f"{job.settings.steps_per_execution} warm-up + {auto.probe_steps} timed steps each "
        f"(objective {auto.objective}, energy {energy.RAPL if counter else energy.ESTIMATE})"
        + (f"; the job has only {total} steps, each probe runs as long as training"
           if total <= probe_len else ""))
    # this process's thread pools, set before TensorFlow starts (the one-process probe and a
    # one-process real run both train here)
    node["threads"] = inventory.apply_threads(inventory.thread_plan(node, 1))
    measured = []
    started = time.monotonic()
    sampler = probing.RaplSampler(counter) if counter is not None else None
    with sampler if sampler is not None else _nothing():
        for i, cand in enumerate(cands):
            cand_job = candidate_job(job, cand)
            probe_job = dataclasses.replace(  # the user's callbacks belong to the real run
                cand_job, probe_steps=auto.probe_steps,
                settings=dataclasses.replace(cand_job.settings, callbacks=()))
            t0 = time.monotonic()
            try:
                windows = (probe_in_process(probe_job) if cand.workers == 1 else
                           probe_cluster(host, probe_job, cand, host.work_dir / f"probe-{i}"))
                error = ""
            except Exception as exc:  # noqa: BLE001 - a failed candidate is reported, not fatal
                windows, error = [], f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            rapl_j = (sampler.joules_between(windows[0]["started_at"], windows[0]["ended_at"])
                      if sampler is not None and windows and windows[0].get("steps") else None)
            m = probing.measure(cand, windows, job.settings.batch_size, energy_config.pue, rapl_j,
                                wall_s=time.monotonic() - t0)
            if error:
                m = dataclasses.replace(m, error=error)
            measured.append(m)
    try:
        chosen, reason = probing.choose(measured, auto.objective)
    except ValueError as exc:
        raise StageError(f"workers auto: {exc}") from None
    for line in probing.table(measured, chosen):
        host.log(f"  {line}")
    host.log(f"workers auto: {reason}")
    cand = chosen.candidate
    info = {
        "source": auto.source, "objective": auto.objective, "max_workers": auto.max_workers,
        "probe_steps": auto.probe_steps, "warmup_steps": job.settings.steps_per_execution,
        "energy_method": energy.RAPL if counter else energy.ESTIMATE,
        "candidates": [m.as_dict() for m in measured],
        "chosen": {"strategy": cand.strategy, "workers": cand.workers},
        "reason": reason, "seconds": round(time.monotonic() - started, 2),
    }
    return Topology(cand.strategy, cand.workers, 0), candidate_job(job, cand), info


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def probe_in_process(job: Any) -> list[dict[str, Any]]:
    from baton.strategies import loop
    from baton.strategies.task import run_task

    result = run_task(job, None, loop.TaskRole(is_chief=True, backup_dir=None))
    assert result is not None
    return [result.info.get("window", {})]


def probe_cluster(host: Host, job: Any, cand: Any, work: Path) -> list[dict[str, Any]]:
    from baton.strategies import launcher

    work.mkdir(parents=True, exist_ok=True)
    job_file = work / "job.json"
    job_file.write_text(job.to_json())
    try:
        result = launcher.launch(
            launcher.LaunchConfig(workers=cand.workers, strategy=cand.strategy, max_restarts=0,
                                  state_dir=work / "launcher", global_batch_size=job.settings.batch_size),
            lambda task: host.task_command(job_file, work / "out", work / "backup"),
            stream=host.stream, quiet=True,
        )
        if not result.ok:
            raise StageError(f"probe cluster failed: {result.error}")
        reports = sorted((work / "out" / "probe").glob("*.json"),
                         key=lambda p: int(p.stem.rpartition("-")[2]))  # worker-0 first
        return [json.loads(p.read_text()) for p in reports]
    finally:
        shutil.rmtree(work, ignore_errors=True)  # its backups with it
