"""The stages before and after training, as Kubernetes Jobs.

Data stages (ingest ... transform) run Beam in the pod (`baton run --only ...`, FnApiRunner in
process); the release stages (evaluate ... push) run after the TFJob, gated on the train outputs.
Both use the run id of the TFJob, so `--run-dir` paths agree without any coordination service.
To run Beam on a portable runner (Flink/Spark job server) instead, give the data stages' Beam
options in the spec; the pod then only submits the pipeline.
"""

from __future__ import annotations

import copy
import dataclasses

from baton.k8s import pods, security
from baton.k8s.options import JobOptions


def run_command(opts: JobOptions, stages: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(command, args) of `baton run` for a subset of stages of this run."""
    return ["baton"], [
        "run", *pods.spec_args(opts), "--run-id", opts.run_id, "--only", ",".join(stages),
        "--runs-dir", opts.runs_dir,
    ]


def _job(opts: JobOptions, component: str, stages: tuple[str, ...], inputs: tuple[str, ...]) -> dict:
    vols, mounts = pods.volumes(opts)
    command, args = run_command(opts, stages)
    container = {
        **pods.baton_container(opts, command, args),
        # the data stages run on CPU; the CPU limit is the quota Beam's workers follow
        "resources": (opts.resources if component == "release"
                      else dataclasses.replace(opts.resources, gpu=0)).to_k8s(),
        "volumeMounts": mounts,
    }
    pod_spec: dict = {
        "restartPolicy": "Never",
        "securityContext": dict(pods.SECURITY_CONTEXT),
        "containers": [container],
        "volumes": vols,
    }
    gate = pods.gate_container(opts, inputs, mounts)
    if gate:
        pod_spec["initContainers"] = [gate]
    return security.harden({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"{opts.job_name}-{component}",
            "namespace": opts.namespace,
            "labels": opts.labels(component),
        },
        "spec": {
            "backoffLimit": opts.run_policy.backoff_limit,
            # exit 1 fails the Job at once: a TFJob's gate waiting for these outputs ends on the
            # stage's failed record, and no retry may succeed after it gave up
            "podFailurePolicy": copy.deepcopy(pods.POD_FAILURE_POLICY),
            "activeDeadlineSeconds": opts.run_policy.active_deadline_seconds,
            "ttlSecondsAfterFinished": opts.run_policy.ttl_seconds_after_finished,
            "template": {
                "metadata": {"labels": opts.labels(component), "annotations": dict(pods.ISTIO_OFF)},
                "spec": pod_spec,
            },
        },
    })


def build_data_job(opts: JobOptions) -> dict | None:
    """The Job for the stages upstream of training; None when the spec has none."""
    if not opts.data_stages:
        return None
    return _job(opts, "data", opts.data_stages, ())


def build_release_job(opts: JobOptions) -> dict | None:
    """The Job for the stages downstream of training, waiting for the train outputs."""
    if not opts.release_stages:
        return None
    return _job(opts, "release", opts.release_stages, opts.release_inputs)
