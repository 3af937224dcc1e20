"""What a step of a compiled pipeline does in its pod (the bodies of the generated components).

Three kinds of step:

- `plan` (first): takes the run's parameters, allocates the run id, applies the parameters to
  the spec, has `baton run SPEC --check` judge the result, and writes the spec and the user's
  modules into the run directory (`<run>/.kfp/spec/`), where every later step reads them;
- a stage: runs `baton run SPEC --run-id R --only STAGE --runs-dir URL`, the command of
  `baton k8s`'s Jobs (or starts the stage's distributed training, `launch`), then turns the
  stage's commit into the step's KFP output artifacts (`artifacts`);
- `finish` (last): writes the run's record (`run.json`) with every stage's row from the
  commits, so `baton inspect` and later runs' baselines see the whole run, and the summary table
  as a Markdown artifact the KFP UI shows.

Retries follow Baton's exit codes, which KFP cannot see: a KFP retry policy retries every
failure. A command exiting 128 or more (a signal: SIGKILL, a preemption's SIGTERM after a
backup; 129 a lost peer) fails the step and KFP's retry runs it again. One exiting 1 to 127 is
permanent: the step leaves a marker (`<runs>/<pipeline>/.kfp/jobs/<job>/<step>.json`) with
Baton's message, and a retry of that step in the same KFP run finds it and fails at once,
repeating the message, without running anything (the retry costs a pod start, not a rerun).
"""

from __future__ import annotations

import collections
import datetime as _dt
import json
import os
import signal
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

from baton.errors import EXIT_FAILED, BatonError
from baton.pipeline.kfp import artifacts
from baton.pipeline.kfp.locations import (
    SPEC_DIR,
    marker_location,
    models_location,
    run_location,
    runs_root,
)
from baton.storage import location as L
from baton.storage import objects

RETRYABLE_FROM = 128  # exit codes from here on are retried (Baton's and the TFJob's contract)


# ------------------------------------------------------------------------------ the steps
def plan_step(pipeline: str, bundle_json: str, param_defs: str, values: Mapping[str, Any],
              job: str, buckets_only: bool) -> str:
    """The first step: returns the run id every later step works in."""
    import yaml

    from baton.pipeline.kfp.bundle import Bundle
    from baton.pipeline.kfp.params import RunParam, apply, check_run_id
    from baton.pipeline.store import new_run_id

    runs_dir = str(values.get("runs_dir") or "")
    _stop_if_marked(runs_dir, pipeline, job, "plan")
    try:
        if not runs_dir:
            raise BatonError("runs_dir: must be the runs directory. Received: ''")
        if buckets_only and not L.is_remote(runs_dir):
            raise BatonError(f"runs_dir: the pods of a cluster share no disk: give a bucket URL "
                             f"(s3://..., gs://...). Received: {runs_dir!r}")
        run_id = check_run_id(str(values.get("run_id") or new_run_id()))
        params = [RunParam(d["name"], {"str": str, "int": int, "dict": dict}[d["type"]],
                           d["default"], d.get("stage"), d.get("field"))
                  for d in json.loads(param_defs)]
        bundle = Bundle.from_json(bundle_json)
        models = str(values.get("models_dir") or models_location(runs_dir, pipeline))
        data = apply(yaml.safe_load(bundle.spec_text), params, values, models)
        effective = yaml.safe_dump(data, sort_keys=False)
    except BatonError as exc:
        _permanent(runs_dir, pipeline, job, "plan", EXIT_FAILED, str(exc))
    run = run_location(runs_dir, pipeline, run_id)
    with tempfile.TemporaryDirectory(prefix="baton-kfp-") as tmp:
        files = {**dict(bundle.files), bundle.spec: effective}
        for rel, text in files.items():
            (Path(tmp) / rel).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / rel).write_text(text)
        print(f"baton kfp: run {run_id} of pipeline {pipeline!r} in {run}", flush=True)
        rc, tail = run_baton(["run", str(Path(tmp) / bundle.spec), "--check"], cwd=tmp)
        _judge(rc, tail, runs_dir, pipeline, job, "plan")
        for rel, text in files.items():
            objects.write_bytes(L.join(run, SPEC_DIR, rel), text.encode())
    objects.write_json(L.join(run, ".kfp", "run.json"), {
        "job": job, "started": _now(), "parameters": dict(values), "spec": bundle.spec})
    return run_id


def stage_step(pipeline: str, stage: str, run_id: str, runs_dir: str, job: str,
               inputs: Mapping[str, Any], outputs: Mapping[str, Any], metrics: Any,
               launch: str = "") -> None:
    """A stage's step: run it in this run, then describe its commit in the KFP outputs."""
    _stop_if_marked(runs_dir, pipeline, job, stage)
    run = run_location(runs_dir, pipeline, run_id)
    try:
        for name, artifact in inputs.items():
            artifacts.check(name, artifacts.read(artifact), run_id, run)
    except BatonError as exc:
        _permanent(runs_dir, pipeline, job, stage, EXIT_FAILED, str(exc))
    with tempfile.TemporaryDirectory(prefix="baton-kfp-") as tmp:
        spec = fetch_spec(run, Path(tmp))
        if launch:
            from baton.pipeline.kfp import launch as launcher

            rc, tail = launcher.train(json.loads(launch), spec, stage, run_id, runs_dir)
        else:
            rc, tail = run_baton(["run", str(spec), "--run-id", run_id, "--only", stage,
                                  "--runs-dir", runs_dir], cwd=tmp)
    _judge(rc, tail, runs_dir, pipeline, job, stage)
    rec = artifacts.commit(run, stage)
    if rec is None:
        _permanent(runs_dir, pipeline, job, stage, EXIT_FAILED,
                   f"stage {stage!r} exited 0 and {run} holds no commit of it")
    for name, artifact in outputs.items():
        artifacts.write(artifact, rec, name, run)
    if metrics is not None:
        for key, value in _numbers(rec.get("metrics", {})).items():
            metrics.log_metric(key, value)
        usage = rec.get("usage") or {}
        for key in ("wall_s", "cpu_s", "energy_j"):
            if isinstance(usage.get(key), int | float):
                metrics.log_metric(f"usage.{key}", float(usage[key]))


def finish_step(pipeline: str, stages: list[list[str]], run_id: str, runs_dir: str, job: str,
                summary: Any) -> None:
    """The last step: the run's record from every stage's commit, and its summary table."""
    from baton.pipeline.kfp.records import write_run_record

    _stop_if_marked(runs_dir, pipeline, job, "finish")
    run = run_location(runs_dir, pipeline, run_id)
    try:
        table = write_run_record(pipeline, [(s[0], s[1]) for s in stages], run_id,
                                 runs_root(runs_dir, pipeline))
    except BatonError as exc:
        _permanent(runs_dir, pipeline, job, "finish", EXIT_FAILED, str(exc))
    print(table, flush=True)
    with open(summary.path, "w") as f:
        f.write(f"# Baton run {run_id}\n\n{run}\n\n```\n{table}\n```\n")


def fetch_spec(run: str, directory: Path) -> Path:
    """The spec and modules `plan` wrote into the run, copied into `directory`; the spec's
    path."""
    from baton.pipeline.training.bucket_task import fetch_spec as fetch

    info = objects.read_json(L.join(run, ".kfp", "run.json")) or {}
    if not info.get("spec"):
        raise SystemExit(_say(f"error: {run} holds no spec: the pipeline's plan step did not "
                              "finish for this run", EXIT_FAILED))
    return fetch(L.join(run, SPEC_DIR, str(info["spec"])), directory)


# ------------------------------------------------------------------------------ processes
def run_baton(args: list[str], cwd: str | Path, env: Mapping[str, str] | None = None,
              ) -> tuple[int, list[str]]:
    """Run `baton ARGS` with its output streamed to this step's log; (exit code as the kubelet
    reports it, the output's last lines). SIGTERM to the step (a pod deletion, a preemption) is
    passed on, so training saves a backup; the child dies with the step (PR_SET_PDEATHSIG)."""
    from baton.strategies.supervisor import Command, ProcessGroup

    tail: collections.deque[str] = collections.deque(maxlen=200)

    def echo(_name: str, line: str) -> None:
        line = line.rstrip("\n")
        print(line, flush=True)
        tail.append(line)

    group = ProcessGroup(grace=60.0, echo=echo, die_with_parent=True, exec_failure_exit=127)
    environ = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    group.start("baton", Command([sys.executable, "-m", "baton", *args], env=environ, cwd=cwd))
    forward: Any = signal.SIG_DFL

    def on_term(signum: int, _frame: Any) -> None:
        group.signal("baton", signum)

    try:
        forward = signal.signal(signal.SIGTERM, on_term)
    except ValueError:  # not the main thread: the step's own SIGTERM then ends it
        forward = None
    try:
        while True:
            exits = group.wait(timeout=1.0)
            if exits:
                code = exits[0].code
                break
    finally:
        group.close()
        if forward is not None:
            signal.signal(signal.SIGTERM, forward)
    return code, list(tail)


def _judge(rc: int, tail: list[str], runs_dir: str, pipeline: str, job: str, step: str) -> None:
    """Return on 0; otherwise end the step, retryable or not by Baton's exit code."""
    if rc == 0:
        return
    if rc >= RETRYABLE_FROM:
        raise SystemExit(_say(f"baton kfp: step {step!r} exited {rc} (a signal, a preemption or "
                              "a lost peer): retryable, KFP's retry policy runs it again", rc))
    _permanent(runs_dir, pipeline, job, step, rc, headline(tail) or f"exit code {rc}")


def headline(lines: list[str]) -> str:
    """Baton's own error lines in a command's output: from its last `baton <cmd>:` line on."""
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith(("baton run:", "baton task:", "baton k8s:", "error:")):
            return "\n".join(lines[i:i + 12]).strip()
    return "\n".join(lines[-5:]).strip()


def _permanent(runs_dir: str, pipeline: str, job: str, step: str, rc: int,
               message: str) -> NoReturn:
    """Leave the marker that stops this step's retries, say the message, exit 1."""
    try:
        objects.write_json(marker_location(runs_dir, pipeline, job, step), {
            "step": step, "exit_code": rc, "message": message, "time": _now()})
    except (BatonError, OSError) as exc:  # the retry then reruns the step: still correct
        _say(f"baton kfp: cannot leave the permanent-failure marker: {exc}", 0)
    raise SystemExit(_say(f"baton kfp: step {step!r} failed permanently (exit {rc}; Baton does "
                          f"not retry it):\n{message}", EXIT_FAILED))


def _stop_if_marked(runs_dir: str, pipeline: str, job: str, step: str) -> None:
    """A retry of a step that already failed permanently in this KFP run: fail again at once."""
    if not runs_dir:
        return
    try:
        marker = objects.read_json(marker_location(runs_dir, pipeline, job, step))
    except BatonError:
        return  # the store out of reach: the step itself will say so
    if isinstance(marker, dict):
        raise SystemExit(_say(
            f"baton kfp: step {step!r} failed permanently in an earlier attempt of this run "
            f"(exit {marker.get('exit_code')}); not run again:\n{marker.get('message')}",
            EXIT_FAILED))


def _say(text: str, code: int) -> int:
    print(text, file=sys.stderr if code else sys.stdout, flush=True)
    return code


def _numbers(values: Mapping[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in values.items()
            if isinstance(v, int | float) and not isinstance(v, bool)}


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
