"""Distributed training from a pipeline step: the training object started, then waited on.

A train stage whose topology is one process (one_device, mirrored over the pod's GPUs) trains
inside its step, like any stage. A multi-worker or parameter-server topology needs pods of its
own, so its step starts them and waits:

- Kubeflow Pipelines: the step creates the Kubernetes training object `baton k8s --target T`
  generates for the same spec and flags (a JobSet by default, a TrainJob with its
  ClusterTrainingRuntime, or a TFJob), with what it needs: the run's NetworkPolicies, the spec's
  ConfigMap. Its replicas run `baton task SPEC --stage train --run-dir <run on the bucket>` and
  its chief commits the stage to the run; the step waits on the object's conditions and deletes
  it when the step is deleted. The RBAC this needs (`rbac`) is written beside the compiled
  pipeline.
- Vertex AI: a CustomJob with one worker pool per replica type (pipeline.kfp.vertex); Vertex
  writes TF_CONFIG itself, in the format `baton task` reads.
- `kfp.local` (`baton kfp --run-local`): the same training object, run on this machine by
  Baton's emulator of its controller (baton.k8s.emulator.tfjob), replica processes and all.

The object is target-agnostic here: `training_documents` picks the training object and what it
needs from what `baton k8s` builds for the target, and `CONDITIONS` says how each kind tells
that it is done.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from pathlib import Path
from typing import Any

from baton.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_PREEMPTED, UsageError

KFP, VERTEX = "kfp", "vertex"  # the engines a pipeline compiles for
ENGINES = (KFP, VERTEX)
CLUSTER, EMULATE = "cluster", "emulate"
# training object kind -> (its success condition, its failure condition): the training
# operator's TFJob, JobSet v1alpha2 (JobSetCompleted / JobSetFailed), Trainer v2's TrainJob
CONDITIONS = {"TFJob": ("Succeeded", "Failed"), "JobSet": ("Completed", "Failed"),
              "TrainJob": ("Complete", "Failed")}
TRAINING_KINDS = tuple(CONDITIONS)
TARGETS = {"jobset": "JobSet", "trainjob": "TrainJob", "tfjob": "TFJob"}  # `baton k8s --target`
# what the training object needs beside it (of the run: its NetworkPolicies, its spec's
# ConfigMap, an identity; a TrainJob its runtime), in `baton k8s`'s apply order
NEEDS = ("NetworkPolicy", "ServiceAccount", "ConfigMap", "ClusterTrainingRuntime")
# the API resources of each kind, for the RBAC
PLURALS = {"JobSet": ("jobset.x-k8s.io", "jobsets"), "TFJob": ("kubeflow.org", "tfjobs"),
           "TrainJob": ("trainer.kubeflow.org", "trainjobs")}


def plan(spec: Any, the_plan: Any, options: Any, bundle: Any) -> dict[str, dict[str, Any]]:
    """stage -> how its step launches training, for each train stage whose topology is more
    than one process; checked now (exit 2), so a run does not fail in its train step."""
    from baton.pipeline.context import RunOptions
    from baton.pipeline.stages import train as train_stage

    out: dict[str, dict[str, Any]] = {}
    flags = RunOptions(strategy=options.strategy, workers=options.workers, ps=options.ps)
    for stage in spec.stages:
        if stage.type != "train":
            continue
        config = the_plan.configs[stage.name].for_replica()
        if config.workers == "auto" or (config.workers is None and spec.cluster.workers == "auto"
                                        and options.workers is None):
            continue  # probed inside the step: a local cluster in the step's pod
        topo = train_stage.topology(config, flags, spec.cluster)
        if not topo.multi_process:
            continue
        launch = {"engine": options.engine, "mode": EMULATE if options.local else CLUSTER,
                  "flags": _flags(options, topo)}
        if options.engine == VERTEX:
            from baton.pipeline.kfp import vertex

            launch["vertex"] = vertex.settings(options)
            vertex.check(launch, spec, stage.name)
        else:
            documents(launch, spec, stage.name, "probe", "s3://probe-bucket/runs")
        out[stage.name] = launch
    return out


def _flags(options: Any, topo: Any) -> dict[str, Any]:
    """`baton k8s`'s flags for this topology (commands.k8s.generate.job_options reads them)."""
    return {"workers": topo.workers, "ps": topo.ps, "strategy": topo.strategy,
            "image": options.image, "namespace": options.namespace, "target": options.target,
            "queue": options.queue,
            "credentials_secret": None if options.local else options.credentials_secret,
            "service_account": options.service_account}


def documents(launch: dict[str, Any], spec: Any, stage: str, run_id: str,
              runs_dir: str) -> list[dict[str, Any]]:
    """The training object of `stage` for run `run_id` and what it needs, in apply order (the
    object last): what `baton k8s` writes for these flags, validated (CRD schema, webhook
    rules, Kubernetes schemas). UsageError names the field otherwise."""
    from baton.k8s.errors import ManifestError, ValidationFailed
    from baton.k8s.render import build_all
    from baton.k8s.validate import check
    from baton.pipeline.commands.k8s import generate as k8s_cmd

    args = argparse.Namespace(
        **{"target": "jobset", "queue": None, **launch["flags"]}, run_id=run_id,
        runs_dir=runs_dir, name=None, no_chief=False, evaluator=False,
        service_account_annotation=[], serving_image=None)
    try:
        k8s_cmd.check_train(spec, args)
        opts = k8s_cmd.job_options(spec, args)
    except ManifestError as exc:
        raise UsageError(f"stage {stage!r}: training object: {exc}") from None
    opts = dataclasses.replace(opts, train_stage=stage, data_stages=(), release_stages=(),
                               release_inputs=())
    docs = [d for ds in build_all(opts).values() for d in ds]
    picked = [d for d in docs if d.get("kind") in NEEDS] + \
        [d for d in docs if d.get("kind") in TRAINING_KINDS]
    # the run's own (a ConfigMap of the spec, the run's NetworkPolicies), not the serving's
    picked = [d for d in picked if d.get("kind") not in ("ConfigMap", "NetworkPolicy")
              or d["metadata"]["name"].startswith(f"{opts.job_name}-")]
    try:
        check(picked)
    except ValidationFailed as exc:
        raise UsageError(f"stage {stage!r}: the training object does not validate:\n{exc}") \
            from None
    return picked


def rbac(namespace: str, service_account: str, pipeline: str,
         kinds: tuple[str, ...] = ("JobSet",)) -> list[dict[str, Any]]:
    """A Role and RoleBinding letting the pipeline's steps (running as `service_account`, KFP's
    `pipeline-runner` or a profile's `default-editor`) create, watch and delete the training
    objects of `kinds`, the run's spec ConfigMap and NetworkPolicies, and read its pods' logs,
    in `namespace` only; for a TrainJob also a ClusterRole and ClusterRoleBinding for its
    ClusterTrainingRuntime (cluster-scoped: Trainer v2 resolves a TrainJob's runtimeRef
    there), limited to creating and reading runtimes."""
    labels = {"app.kubernetes.io/name": "baton", "app.kubernetes.io/part-of": pipeline}
    name = f"{pipeline}-kfp-training"
    groups: dict[str, list[str]] = {}
    for kind in kinds:
        group, plural = PLURALS[kind]
        groups.setdefault(group, []).append(plural)
    subject = {"kind": "ServiceAccount", "name": service_account, "namespace": namespace}
    docs = [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": name, "namespace": namespace, "labels": labels},
         "rules": [
             *({"apiGroups": [group], "resources": sorted(plurals),
                "verbs": ["create", "get", "list", "watch", "delete"]}
               for group, plurals in sorted(groups.items())),
             {"apiGroups": [""], "resources": ["configmaps"],
              "verbs": ["create", "get", "update", "delete"]},
             {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
              "verbs": ["create", "get"]},
             {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"]},
         ]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": name, "namespace": namespace, "labels": labels},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [subject]},
    ]
    if "TrainJob" in kinds:
        cluster_name = f"{name}-{namespace}-runtimes"
        docs += [
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
             "metadata": {"name": cluster_name, "labels": labels},
             "rules": [{"apiGroups": ["trainer.kubeflow.org"],
                        "resources": ["clustertrainingruntimes"],
                        "verbs": ["create", "get"]}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": {"name": cluster_name, "labels": labels},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": cluster_name},
             "subjects": [subject]},
        ]
    return docs


def train(launch: dict[str, Any], spec_path: Path, stage: str, run_id: str,
          runs_dir: str) -> tuple[int, list[str]]:
    """Run `stage`'s training as `launch` says; (exit code, the last lines of its output):
    0 when the training object succeeded, 1 when it failed (its controller already retried
    what is retryable), 143 when this step was told to stop."""
    from baton.pipeline.spec import load_spec
    from baton.storage import location as L

    spec = load_spec(spec_path)
    if not L.is_remote(runs_dir):
        message = (f"baton kfp: error: stage {stage!r} trains on several pods, which share no "
                   f"disk: runs_dir must be a bucket (s3://, gs://). Received: {runs_dir!r}")
        print(message, flush=True)
        return 1, [message]
    if launch["engine"] == VERTEX:
        from baton.pipeline.kfp import vertex

        body = vertex.custom_job(launch, spec, stage, run_id, runs_dir)
        if launch["mode"] == EMULATE:
            from baton.pipeline.kfp.vertex_local import run_pools

            return run_pools(body)
        return vertex.run_on_vertex(launch["vertex"], body)
    try:
        docs = documents(launch, spec, stage, run_id, runs_dir)
    except UsageError as exc:
        print(f"baton kfp: error: {exc}", flush=True)
        return 1, [f"baton kfp: error: {exc}"]
    if launch["mode"] == EMULATE:
        return _emulate(docs)
    from baton.pipeline.kfp import k8s_wait

    return k8s_wait.run(docs, CONDITIONS)


def _emulate(docs: list[dict[str, Any]]) -> tuple[int, list[str]]:
    """The training object run here by Baton's emulator of its controller (the TFJob's
    training operator, the JobSet controller, Trainer's TrainJob controller)."""
    from baton.k8s.emulator.files import emulate_training
    from baton.k8s.render import dump

    obj = docs[-1]
    with tempfile.TemporaryDirectory(prefix="baton-kfp-train-") as tmp:
        root = Path(tmp)
        (root / "needs.yaml").write_text(dump(docs[:-1]))  # the ConfigMap the pods mount, ...
        path = root / "training.yaml"
        path.write_text(dump([obj]))
        print(f"baton kfp: {obj['kind']} {obj['metadata']['name']} emulated on this machine "
              "(kfp.local: no cluster)", flush=True)
        rc = emulate_training(obj["kind"], [(root / "needs.yaml", d) for d in docs[:-1]] +
                              [(path, obj)], root / "volume", root / "work", root)
        tail: list[str] = []
        for log in sorted((root / "work").rglob("*.log")):
            lines = log.read_text(errors="replace").splitlines()[-40:]
            print(f"--- {log.name} (last lines)", *lines, sep="\n", flush=True)
            tail += lines
    stopped = rc in (EXIT_INTERRUPTED, EXIT_PREEMPTED)
    return (EXIT_OK if rc == 0 else EXIT_PREEMPTED if stopped else EXIT_FAILED), tail
