"""Distributed training on Vertex AI: a CustomJob with one worker pool per replica type.

Vertex AI runs the pools (pool 0 the chief, 1 the workers, 2 the parameter servers) and writes
TF_CONFIG in each replica itself: TensorFlow's task names (`chief`, `worker`, `ps`) plus its own
`environment` and `job` fields, which `baton task` reads like the operator's. Every replica runs
`baton task <run>/.kfp/spec/<spec> --stage train --run-dir <run>`, reading the spec and the
user's modules from the run on the bucket (a CustomJob has no ConfigMap); the chief commits the
stage to the run. The step creates the job through Vertex AI's REST API with the step's own
credentials (Application Default Credentials: the pipeline's service account), polls its state,
and cancels it when the step is stopped.

`kfp.local` (`--run-local`) has no Vertex AI: the pools then run on this machine as processes,
each with the TF_CONFIG Vertex AI would give it (addresses on 127.0.0.1), so what `baton task`
receives is Vertex AI's format.
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

from baton.errors import EXIT_PREEMPTED, UsageError

API = "https://{location}-aiplatform.googleapis.com/v1"
DONE = {"JOB_STATE_SUCCEEDED": 0, "JOB_STATE_FAILED": 1, "JOB_STATE_CANCELLED": 1,
        "JOB_STATE_EXPIRED": 1}
POLL_SECONDS = 30.0
POOLS = ("chief", "worker", "ps")  # worker pool i runs replicas of POOLS[i]
PORT = 2222


def settings(options: Any) -> dict[str, Any]:
    return {"project": options.vertex_project, "location": options.vertex_location,
            "machine_type": options.vertex_machine_type, "image": options.image,
            "accelerator_type": options.vertex_accelerator}


def pools(flags: dict[str, Any]) -> list[tuple[str, int]]:
    """(task type, replicas) per worker pool, in Vertex AI's order: the chief in pool 0, the
    other workers in pool 1, the parameter servers in pool 2 (a multi-worker mirrored chief
    trains too, as a TFJob's does)."""
    from baton.strategies.factory import PARAMETER_SERVER

    if flags["strategy"] == PARAMETER_SERVER:
        return [("chief", 1), ("worker", int(flags["workers"])), ("ps", int(flags["ps"]))]
    return [("chief", 1), ("worker", int(flags["workers"]) - 1)]


def custom_job(launch: dict[str, Any], spec: Any, stage: str, run_id: str,
               runs_dir: str) -> dict[str, Any]:
    """The CustomJob's REST body (aiplatform v1)."""
    from baton.pipeline.kfp.locations import SPEC_DIR, run_location

    v = launch["vertex"]
    run = run_location(runs_dir, spec.name, run_id)
    image = v.get("image") or spec.cluster.image
    args = ["task", f"{run}/{SPEC_DIR}/{spec.path.name if spec.path else 'pipeline.yaml'}",
            "--stage", stage, "--run-dir", run]
    env = [{"name": "PYTHONUNBUFFERED", "value": "1"}, {"name": "BATON_RUN_ID", "value": run_id},
           {"name": "BATON_LOG_FORMAT", "value": "json"}]  # Cloud Logging parses JSON lines
    machine: dict[str, Any] = {"machineType": v["machine_type"]}
    gpu = int(spec.cluster.resources.gpu)
    if gpu:
        machine.update(acceleratorType=v["accelerator_type"],
                       acceleratorCount=gpu)
    specs = []
    for _task, replicas in pools(launch["flags"]):
        specs.append({} if replicas == 0 else {
            "machineSpec": machine, "replicaCount": str(replicas),
            "containerSpec": {"imageUri": image, "command": ["baton"], "args": args,
                              "env": env}})
    while specs and not specs[-1]:
        specs.pop()
    body: dict[str, Any] = {"displayName": f"{spec.name}-{run_id}-{stage}",
                            "labels": {"app": "baton", "baton-run-id": run_id},
                            "jobSpec": {"workerPoolSpecs": specs}}
    if run.startswith("gs://"):
        body["jobSpec"]["baseOutputDirectory"] = {"outputUriPrefix": f"{run}/.kfp/vertex/{stage}"}
    return body


def check(launch: dict[str, Any], spec: Any, stage: str) -> None:
    """UsageError naming the flag when the job could not run. (Without --vertex-project the
    step creates the job in its own project, CLOUD_ML_PROJECT_ID where Vertex AI runs it.)"""
    v = launch["vertex"]
    if not v.get("machine_type"):
        raise UsageError("--vertex-machine-type: required for a CustomJob. Received: ''")
    custom_job(launch, spec, stage, "probe", "gs://probe-bucket/runs")


def run_on_vertex(v: dict[str, Any], body: dict[str, Any]) -> tuple[int, list[str]]:
    """Create the CustomJob, say each state it goes through, return when it ends."""
    import google.auth
    from google.auth.transport.requests import AuthorizedSession

    lines: list[str] = []

    def say(text: str) -> None:
        print(f"baton kfp: {text}", flush=True)
        lines.append(text)

    project = v.get("project") or os.environ.get("CLOUD_ML_PROJECT_ID")
    if not project:
        say("error: no Vertex AI project: compile with --vertex-project, or run on Vertex AI "
            "(CLOUD_ML_PROJECT_ID)")
        return 1, lines
    credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
    session = AuthorizedSession(credentials)
    base = API.format(location=v["location"])
    reply = session.post(f"{base}/projects/{project}/locations/{v['location']}/customJobs",
                         json=body, timeout=60)
    if reply.status_code >= 300:
        say(f"error: Vertex AI refused the CustomJob: {reply.status_code} {reply.text[:500]}")
        return 1, lines
    name = reply.json()["name"]
    say(f"created CustomJob {name} ({len(body['jobSpec']['workerPoolSpecs'])} worker pools)")
    stop: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, _frame: stop.append(signum))
    state = ""
    try:
        while True:
            if stop:
                session.post(f"{base}/{name}:cancel", timeout=60)
                say(f"stopped: cancelled {name}")
                return EXIT_PREEMPTED, lines
            job = session.get(f"{base}/{name}", timeout=60).json()
            if job.get("state") != state:
                state = str(job.get("state"))
                say(f"{name}: {state}")
            if state in DONE:
                if DONE[state]:
                    say(f"error: {name} ended {state}: {json.dumps(job.get('error', {}))}")
                return DONE[state], lines
            time.sleep(POLL_SECONDS)
    finally:
        signal.signal(signal.SIGTERM, previous)


def tf_config(body: dict[str, Any], addresses: dict[str, list[str]], task: str,
              index: int) -> str:
    """The TF_CONFIG Vertex AI writes for replica `index` of `task` in the job `body`."""
    return json.dumps({"cluster": addresses, "task": {"type": task, "index": index},
                       "environment": "cloud", "job": body["jobSpec"]}, sort_keys=True)
