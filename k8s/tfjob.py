"""The TFJob (kubeflow.org/v1) for the train stage of a pipeline.

Each replica runs ONE task of the train stage: `baton task SPEC --stage train --run-dir DIR`.
The operator injects TF_CONFIG naming the task; the task reads it once at the edge. The replica
restart policy is `ExitCode`, so the task's own exit code (baton.errors) decides retries:
`EXIT_PREEMPTED` (143: SIGTERM, checkpoint saved), `EXIT_TRANSIENT` (129: a dead peer) and 137
(SIGKILL) restart the pod, `EXIT_FAILED` (1: a permanent error) fails the job.
"""

from __future__ import annotations

from baton.k8s import placement, pods, security
from baton.k8s.options import JobOptions

API_VERSION = "kubeflow.org/v1"
KIND = "TFJob"
CONTAINER = "tensorflow"  # the operator's webhook requires a container of this name
PORT_NAME = "tfjob-port"  # the operator reads the TF_CONFIG port from this container port


def task_command(opts: JobOptions) -> tuple[list[str], list[str]]:
    """(command, args) of a training replica. Change here to change what every replica runs."""
    return ["baton"], [
        "task", *pods.spec_args(opts), "--stage", opts.train_stage, "--run-dir", opts.run_dir,
    ]


def _replica(opts: JobOptions, rtype: str, replicas: int) -> dict:
    vols, mounts = pods.volumes(opts)
    command, args = task_command(opts)
    res = opts.resources_for(rtype)
    container = {
        **pods.baton_container(opts, command, args, name=CONTAINER),
        "ports": [{"name": PORT_NAME, "containerPort": opts.port, "protocol": "TCP"}],
        "resources": res.to_k8s(),
        "volumeMounts": mounts,
    }
    spec: dict = {
        # time for the SIGTERM handler to write a checkpoint before SIGKILL
        "terminationGracePeriodSeconds": opts.termination_grace_seconds,
        "securityContext": dict(pods.SECURITY_CONTEXT),
        "containers": [container],
        "volumes": vols,
    }
    gate = pods.gate_container(opts, opts.train_inputs, mounts)
    if gate:
        spec["initContainers"] = [gate]
    return {
        "replicas": replicas,
        "restartPolicy": "ExitCode",
        "template": {
            "metadata": {
                "labels": {**opts.labels("train"), "baton.dev/replica-type": rtype.lower()},
                # what the pod's inventory will derive from its limits (k8s.placement)
                "annotations": {**pods.ISTIO_OFF, placement.ANNOTATION: placement.annotation(res)},
            },
            "spec": spec,
        },
    }


def build_tfjob(opts: JobOptions) -> dict:
    """The TFJob manifest as a plain dict (YAML-ready)."""
    replica_specs = {
        rtype: _replica(opts, rtype, n) for rtype, n in opts.topology.replica_counts().items()
    }
    return security.harden({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": pods.training_metadata(opts, "train"),
        "spec": {
            "runPolicy": opts.run_policy.to_k8s(),
            "tfReplicaSpecs": replica_specs,
        },
    })
