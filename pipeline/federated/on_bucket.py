"""An external federation's files on a bucket, for pods that share no volume.

With `baton run --superlink ... --runs-dir s3://...` (the Kubernetes run Job of `baton k8s
--runs-dir s3://...`) the stage, the SuperNodes and the ServerApp run in different pods, so the
federation directory `<run>/<stage>.federation/` (strategies.federation_files.federation_dir) lives on the
bucket rather than on a shared claim:

* the run Job writes a rehearsal's silos and the plan into its local mirror, then `share`s
  them: every silo's shards, then each silo's `schema.json` (what a SuperNode's init container,
  `python -m baton.storage.pull --after schema.json`, waits for), then `plan.json`; the
  ServerApp is submitted with the plan's URL, and the plan's `out_dir` is the bucket's
  `<run>/<stage>.federation/server`;
* the ServerApp (flower_server) writes into a directory of its own pod (`local_out`) and
  uploads `rounds.jsonl` after every event (`MirroredRoundLog`: an object is replaced whole,
  never appended) and its outputs when the run ends (`upload_tree`);
* the run Job follows the rounds from the bucket (`BucketRoundLog`) and, once the SuperLink
  reports the run completed, copies the outputs down (`baton.storage.pull`) and publishes them
  as the stage's artifacts, which the runner commits by manifest like any stage's.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from baton.pipeline.federated.plan import Plan, RoundLog
from baton.storage import location as L
from baton.storage import objects
from baton.strategies.federation_files import PLAN_FILE, SILOS_DIR

SCHEMA = "schema.json"  # an examples artifact's file written last


def share(work: Path, url: str) -> str:
    """Upload the silos under `work/clients` and `work/plan.json` to `url`; the plan's URL."""
    silos = work / SILOS_DIR
    files = sorted(p.relative_to(work).as_posix() for p in silos.rglob("*")
                   if p.is_file()) if silos.is_dir() else []

    def up(rel: str) -> None:
        objects.upload_file(work / rel, L.join(url, rel))

    objects.each(up, [r for r in files if Path(r).name != SCHEMA])
    objects.each(up, [r for r in files if Path(r).name == SCHEMA])  # each silo complete now
    up(PLAN_FILE)
    return L.join(url, PLAN_FILE)


def load_plan(location: str) -> Plan:
    """The plan at a path or a bucket URL (the ServerApp's run config names either)."""
    if L.is_remote(location):
        return Plan.from_json(objects.read_bytes(location))
    return Plan.load(Path(location))


def local_out(plan: Plan) -> Path:
    """Where the ServerApp writes: the plan's directory, or for a bucket one of this pod's."""
    if L.is_remote(plan.out_dir):
        return Path(tempfile.mkdtemp(prefix="baton-serverapp-"))
    return Path(plan.out_dir)


class MirroredRoundLog(RoundLog):
    """The ServerApp's round log, written locally and uploaded whole after each event."""

    def __init__(self, path: Path, url: str) -> None:
        super().__init__(path)
        self.url = url

    def write(self, record: dict[str, Any]) -> None:
        super().write(record)
        objects.upload_file(self.path, self.url)


class BucketRoundLog:
    """The round log as the run Job follows it: the object the ServerApp last uploaded."""

    def __init__(self, url: str) -> None:
        self.url = url

    def read(self) -> list[dict[str, Any]]:
        try:
            text = objects.read_bytes(self.url).decode()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in text.splitlines() if line.strip()]


def upload_tree(directory: Path, url: str) -> None:
    """Every file below `directory` to `url/<rel>` (the ServerApp's outputs, once, at the end)."""
    files = [p for p in directory.rglob("*") if p.is_file()]
    objects.each(lambda p: objects.upload_file(p, L.join(url, p.relative_to(directory)
                                                         .as_posix())), files)
