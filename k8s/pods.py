"""Pod pieces every Baton workload shares: the artifacts volume, the spec ConfigMap, input gates.

All pods of one run mount the same PersistentVolumeClaim at `/artifacts`, so the data Job, the
TFJob replicas, the release Job and the model server agree on paths without copying anything:
`/artifacts/runs/<pipeline>/<run-id>/<stage>/<output>` and `/artifacts/models/<pipeline>`.
"""

from __future__ import annotations

import shlex

from baton.k8s.options import QUEUE_LABEL, JobOptions, pull_policy

SPEC_DIR = "/etc/baton"
SPEC_KEY = "pipeline.yaml"
SPEC_FILE = f"{SPEC_DIR}/{SPEC_KEY}"
ISTIO_OFF = {"sidecar.istio.io/inject": "false"}
# The project image runs as uid 10001 (see Dockerfile: above 10000, no host user's); fsGroup
# makes the PVC writable for it; RuntimeDefault seccomp is what the restricted Pod Security
# Standard asks (k8s.security).
SECURITY_CONTEXT = {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001, "fsGroup": 10001,
                    "seccompProfile": {"type": "RuntimeDefault"}}
FAILED_SUFFIX = ".failed.json"  # a stage that failed for good (the runner's, `baton task`'s)
RETRYABLE_EXIT_CODES = [129, 137, 143]  # transient (a peer died), SIGKILL, SIGTERM (preempted)
# Every Baton Job's (a JobSet step's, the data and release Jobs'): evictions and preemptions are
# not the pod's fault; a permanent exit code fails the Job at once; a retryable one re-creates
# the pod (counted against backoffLimit). The TFJob operator's ExitCode policy, in Job fields.
POD_FAILURE_POLICY = {"rules": [
    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
    {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": RETRYABLE_EXIT_CODES}},
    {"action": "Count", "onExitCodes": {"operator": "In", "values": RETRYABLE_EXIT_CODES}},
]}


def training_metadata(opts: JobOptions, component: str) -> dict:
    """The metadata of the object Kueue admits (a JobSet, TrainJob or TFJob): the run's labels,
    the Kueue queue's when `--queue` gave one, and the strategy."""
    labels = opts.labels(component)
    if opts.queue:
        labels[QUEUE_LABEL] = opts.queue
    return {"name": opts.job_name, "namespace": opts.namespace, "labels": labels,
            "annotations": {"baton.dev/strategy": opts.topology.strategy}}


def spec_configmap_name(opts: JobOptions) -> str:
    return f"{opts.job_name}-spec"


def spec_args(opts: JobOptions) -> list[str]:
    """The SPEC argument of `baton run/task`: the mounted ConfigMap, or nothing (embedded default)."""
    return [SPEC_FILE] if opts.spec_text is not None else []


def volumes(opts: JobOptions, read_only: bool = False) -> tuple[list[dict], list[dict]]:
    """(pod volumes, container volumeMounts) for the artifacts PVC and the spec ConfigMap (no
    PVC when the run directory is on a bucket: k8s.object_storage)."""
    vols: list[dict] = [] if opts.storage else [
        {
            "name": "artifacts",
            "persistentVolumeClaim": {"claimName": opts.pvc_name, **({"readOnly": True} if read_only else {})},
        }
    ]
    mounts: list[dict] = [] if opts.storage else [
        {"name": "artifacts", "mountPath": opts.mount_path, **({"readOnly": True} if read_only else {})}
    ]
    if opts.spec_text is not None:
        cm: dict = {"name": spec_configmap_name(opts)}
        if opts.code_files:  # keys are flat: `items` put each module back at its path
            cm["items"] = [{"key": SPEC_KEY, "path": SPEC_KEY}] + [
                {"key": code_key(rel), "path": rel} for rel, _ in opts.code_files
            ]
        vols.append({"name": "pipeline-spec", "configMap": cm})
        mounts.append({"name": "pipeline-spec", "mountPath": SPEC_DIR, "readOnly": True})
    return vols, mounts


def code_key(rel: str) -> str:
    """The ConfigMap key of a user module at `rel` (keys cannot hold '/'): `pkg/m.py` -> `pkg--m.py`."""
    return rel.replace("/", "--")


def env(opts: JobOptions) -> list[dict]:
    return [
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "TF_CPP_MIN_LOG_LEVEL", "value": "1"},
        {"name": "BATON_RUN_ID", "value": opts.run_id},
        # one JSON record per line (baton.logs): what a cluster's log router parses into fields
        {"name": "BATON_LOG_FORMAT", "value": "json"},
    ]


def baton_container(opts: JobOptions, command: list[str], args: list[str],
                    name: str = "baton") -> dict:
    """The start of every container that runs Baton itself (a stage Job, a TFJob replica, the
    federation's run Job): its image, command and environment; callers add ports, resources
    and mounts."""
    return {
        "name": name,
        "image": opts.image,
        "imagePullPolicy": pull_policy(opts.image),
        "command": command,
        "args": args,
        "env": env(opts),
    }


def gate_container(opts: JobOptions, inputs: tuple[str, ...], mounts: list[dict]) -> dict | None:
    """An init container that waits until the upstream outputs exist on the shared volume.

    Kubernetes has no "start after that Job" ordering; waiting for the artifacts themselves is
    the ordering that survives retries and partial re-runs. The artifact store writes outputs
    by rename, so an existing path is a complete one.
    """
    if not inputs:
        return None
    paths = [f"{opts.run_dir}/{p}" for p in inputs]
    test = " && ".join(f"[ -e {shlex.quote(p)} ]" for p in paths)
    # an upstream stage that failed for good leaves <stage>.failed.json: end, do not wait forever
    stages = sorted({p.split("/")[0] for p in inputs})
    if opts.storage:  # on a bucket: the upstream stages' commit objects (baton.storage.wait)
        command = ["python", "-m", "baton.storage.wait", "--every", "10",
                   *(a for st in stages for a in ("--failed", f"{opts.run_dir}/{st}{FAILED_SUFFIX}")),
                   *(f"{opts.run_dir}/{st}/lineage.json" for st in stages)]
    else:
        failed = " ".join(shlex.quote(f"{opts.run_dir}/{st}{FAILED_SUFFIX}") for st in stages)
        command = ["sh", "-c", (
            f"until {test}; do for f in {failed}; do if [ -e \"$f\" ]; then "
            "echo \"upstream stage failed for good: $f\"; cat \"$f\"; exit 1; fi; done; "
            f"echo 'waiting for inputs: {' '.join(inputs)}'; sleep 10; done")]
    # requests = limits: a waiting shell needs little, Python with pyarrow's S3 client more
    size = "256Mi" if opts.storage else "64Mi"
    return {
        "name": "wait-for-inputs",
        "image": opts.image,
        "imagePullPolicy": pull_policy(opts.image),
        "command": command,
        "volumeMounts": [m for m in mounts if m["name"] == "artifacts"],
        "resources": {"requests": {"cpu": "50m", "memory": size},
                      "limits": {"cpu": "50m", "memory": size}},
    }


def pvc(opts: JobOptions) -> dict:
    """ReadWriteMany: TFJob pods on different nodes write checkpoints into the same directory."""
    spec: dict = {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": opts.pvc_size}},
    }
    if opts.storage_class:
        spec["storageClassName"] = opts.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": opts.pvc_name, "namespace": opts.namespace, "labels": opts.labels("storage")},
        "spec": spec,
    }


def spec_configmap(opts: JobOptions) -> dict | None:
    if opts.spec_text is None:
        return None
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": spec_configmap_name(opts),
            "namespace": opts.namespace,
            "labels": opts.labels("spec"),
        },
        # the spec and, beside it, the user's modules (the spec's directory as the pods see it)
        "data": {SPEC_KEY: opts.spec_text, **{code_key(rel): text for rel, text in opts.code_files}},
    }
