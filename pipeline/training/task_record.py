"""The train stage's lineage record when its tasks ran as pods (`baton task`), not under the runner.

On a cluster the train stage is not run by `baton run`: each pod of the TFJob, JobSet or TrainJob
runs one task (`baton task SPEC --stage train --run-dir DIR`) and the chief renames `model` into
`DIR/<stage>/`. The release step that follows is `baton run --only evaluate,...` with the same
run id, and the runner accepts an upstream stage it does not run only when that stage's
`lineage.json` says it succeeded (runner._require_outputs): without one it refused ("stage
'train' is not selected by --only and has no finished outputs"), so the release step of every
generated pipeline failed. The chief therefore writes the record the runner would have written,
last and atomically, after the model is in place: what the stage read (its inputs with their
producers' hashes), with which config and code, what it made (`model` with its hash) and its
metrics; `cache.hit` false and no cache entry (the cache is the runner's: a later local run
trains again rather than trust a key computed elsewhere).

A replica that fails permanently leaves `<run dir>/<stage>.failed.json`, as the runner does for
a failed stage: a step that waits for this stage's outputs (a TFJob's release Job, whose init
container polls the volume) then ends at once, naming the failure, instead of waiting forever.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
from pathlib import Path
from typing import Any

from baton.pipeline import cache, lineage, registry, store
from baton.pipeline.configs import build_config, config_to_dict

FAILED_SUFFIX = ".failed.json"  # the runner's marker of a failed stage, beside its directory


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _record(spec: Any, stage_name: str, run_dir: Path, started: str) -> dict[str, Any]:
    if spec is None:  # the spec itself could not be read: the failure says why
        return {"run_id": run_dir.name, "stage": stage_name, "started": started}
    stage = spec.stage(stage_name)
    st = registry.resolve(stage.type, spec.spec_dir)
    config = build_config(st.config_cls, stage.config) if st.config_cls else dict(stage.config)
    inputs: dict[str, dict[str, str]] = {}
    for key, ref in stage.inputs.items():
        src, _, output = ref.partition(".")
        path = run_dir / src / output
        produced = (lineage.read(run_dir / src) or {}).get("outputs", {}).get(output) or {}
        inputs[key] = {"ref": ref, "path": str(path),
                       "hash": produced.get("hash") or store.hash_path(path)}
    return {
        "pipeline": spec.name, "run_id": run_dir.name, "stage": stage_name, "type": stage.type,
        "config": config_to_dict(config), "code_version": cache.code_version(st.code_files()),
        "inputs": inputs, "external_inputs": {}, "started": started,
    }


def succeeded_record(spec: Any, stage_name: str, run_dir: Path, started: str, wall_s: float,
                     model: Path) -> dict[str, Any]:
    """The record the runner would have written for the train stage whose model is `model`
    (in place under `run_dir/<stage>/`, or about to be committed there from a bucket run's
    mirror). Its metrics are the train stage's own, read from `model/train_info.json`."""
    from baton.pipeline.accounting import Usage
    from baton.pipeline.training.execution import examples_trained

    record = _record(spec, stage_name, run_dir, started)
    info = json.loads((model / "train_info.json").read_text())
    history = json.loads((model / "history.json").read_text()) if (model / "history.json").exists() else []
    last = history[-1] if history else {}
    metrics: dict[str, Any] = {
        "steps": info["steps"], "examples_per_sec": info.get("examples_per_sec"),
        "strategy": info.get("strategy"), "replicas": info.get("num_replicas"),
        "examples_trained": examples_trained(info, int(record["config"].get("batch_size", 0))),
        **{k: round(v, 4) for k, v in last.items() if k.startswith(("eval_", "train_"))},
    }
    record.update(
        status="succeeded", finished=_now(),
        outputs={"model": {"path": str(run_dir / stage_name / "model"),
                           "hash": store.hash_path(model)}},
        usage=Usage(wall_s=wall_s).as_dict(),
        metrics={k: v for k, v in metrics.items() if v is not None},
        cache={"key": None, "hit": False},
        ran_as="baton task (one process per task of a cluster; this record by the chief)",
    )
    return record


def write_succeeded(spec: Any, stage_name: str, run_dir: Path, started: str,
                    wall_s: float) -> Path:
    """Write `<run dir>/<stage>/lineage.json` for the model the chief just renamed into place;
    returns its path."""
    stage_dir = run_dir / stage_name
    record = succeeded_record(spec, stage_name, run_dir, started, wall_s, stage_dir / "model")
    (run_dir / f"{stage_name}{FAILED_SUFFIX}").unlink(missing_ok=True)  # an earlier attempt's
    store.write_json_atomic(stage_dir / lineage.FILENAME, record)
    return stage_dir / lineage.FILENAME


def write_failed(spec: Any | None, stage_name: str, run_dir: Path, started: str, task: str,
                 error: str) -> Path:
    """`<run dir>/<stage>.failed.json`: this stage failed for good (a replica's exit 1)."""
    record = _record(spec, stage_name, run_dir, started)
    record.update(status="failed", finished=_now(), task=task, error=error)
    path = run_dir / f"{stage_name}{FAILED_SUFFIX}"
    store.write_json_atomic(path, record)
    return path


class SpecRecords:
    """`baton task SPEC --run-dir DIR`'s records beside the run: the stage's lineage when the
    chief succeeds, `<stage>.failed.json` when a replica fails for good. `run_dir` None (the
    explicit `--job` form, or `--out` elsewhere): nothing is written. `spec` is set once loaded."""

    def __init__(self, stage: str, run_dir: str | None) -> None:
        self.stage = stage
        self.run_dir = Path(run_dir) if run_dir else None
        self.spec: Any = None

    def succeeded(self, started: str, wall_s: float) -> Path | None:
        if self.run_dir is None or self.spec is None:
            return None
        return write_succeeded(self.spec, self.stage, self.run_dir, started, wall_s)

    def record(self, started: str, wall_s: float, out: Path) -> dict[str, Any]:
        """The succeeded record for the model in `out/model`, written by no one yet (a bucket
        run commits it with the model: pipeline.training.bucket_task)."""
        assert self.run_dir is not None and self.spec is not None
        return succeeded_record(self.spec, self.stage, self.run_dir, started, wall_s,
                                out / "model")

    def failed(self, started: str, task_name: str, error: str) -> None:
        if self.run_dir is not None and self.run_dir.is_dir():
            with contextlib.suppress(OSError):
                write_failed(self.spec, self.stage, self.run_dir, started, task_name, error)
