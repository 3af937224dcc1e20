"""What the stage that runs a training job lends the run: where it writes, how it reports,
where a job's backups live, and the command line of one local task.

strategies may not import pipeline, so the train stage (pipeline.stages.train) fills this in
from its StageContext and hands it to `strategies.run.train` with the job: the runs here say
what they do through it and never read the flags or the spec themselves.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any


@dataclasses.dataclass(frozen=True)
class Host:
    work_dir: Path  # the stage's scratch directory: job files, probes, a cluster's output
    out: Path  # the model artifact's directory
    log: Callable[[str], None]
    progress: Callable[[int], Any]  # a progress bar over N steps: .set(step), .close()
    backup_dir: Callable[[Any], Path]  # where a TrainJob's backups live (stable across runs)
    task_command: Callable[[Path, Path, Path], list[str]]  # (job file, out, backups) -> argv
    stream: Any = None  # where a local cluster's task lines go
    quiet: bool = False
    inject_failure: str | None = None  # a rehearsed fault (strategies.faults), as written
    inject_slowdown: str | None = None  # a rehearsed slow task (strategies.slowdown)
    energy: Any = None  # the spec's baton.energy.EnergyConfig (`objective: energy` probes)
