"""Kubeflow Trainer v2: a TrainJob (trainer.kubeflow.org/v1alpha1, v2.3.0) and the
ClusterTrainingRuntime it references, written by Baton for TensorFlow.

Trainer ships no TensorFlow runtime: its `plainML` policy (no torch/mpi/jax/xgboost/flux entry
in `mlPolicy`) only sets the trainer job's pod count from `trainer.numNodes` and adds
`trainer.env` to its `node` container (`pkg/runtime/framework/plugins/plainml/plainml.go`);
TF_CONFIG is the container's to build (kubeflow/trainer 2699). Baton's runtime is a JobSet
template (`k8s.jobset`, the same steps in the same order) in which:

* the **trainer** job (label `trainer.kubeflow.org/trainjob-ancestor-step: trainer`, container
  `node`, `replicas: 1` as Trainer's webhook requires) holds the tasks that compute: every
  training task under multi-worker mirrored (`numNodes` = `--workers`, node 0 the chief unless
  `--no-chief`), the workers under parameter servers (`numNodes` = `--workers`);
* the `ps` and `chief` (coordinator) jobs of the parameter-server strategy, the data and the
  release steps are ordinary replicated jobs of the template, ordered by `dependsOn`;
* `mlPolicy.numNodes` and the TrainJob's `trainer.numNodes` are the same number, the node
  container's resources the TrainJob's `trainer.resourcesPerNode`.

The TrainJob names the runtime (`runtimeRef`) and sets `numNodes`, `resourcesPerNode` and the
image; Trainer's controller copies the template into a JobSet named after the TrainJob (so pods
are `<trainjob>-node-0-<i>`, `strategies.jobset_cluster`'s rule) and applies those fields to
the `node` container (`k8s.trainer_controller` does the same for validation and emulation).
The runtime carries this run's commands (its run id, spec ConfigMap and claim), so it is
written per run, named `<job>-tensorflow`: a ClusterTrainingRuntime is cluster-scoped, so
applying it needs a cluster role that may create runtimes (docs/kubernetes.md).

What cannot be expressed is refused at generation with the reason: a chief whose resources
differ from the workers' under multi-worker mirrored (node 0 shares the nodes' one template),
a name that makes a pod name longer than a DNS label.
"""

from __future__ import annotations

from baton.k8s import jobset, pods, security
from baton.k8s.options import TRAINJOB, JobOptions

API_VERSION = "trainer.kubeflow.org/v1alpha1"
RUNTIME_KIND = "ClusterTrainingRuntime"
KIND = "TrainJob"
FRAMEWORK_LABEL = "trainer.kubeflow.org/framework"


def runtime_name(opts: JobOptions) -> str:
    return f"{opts.job_name}-tensorflow"


def _trainer_step(steps: list[jobset.Step]) -> jobset.Step:
    return next(s for s in steps if s.ancestor == "trainer")


def build_runtime(opts: JobOptions) -> dict:
    """The ClusterTrainingRuntime: the pipeline's JobSet template with a trainer node job."""
    steps = jobset.layout(opts, TRAINJOB)
    jobset.check_names(opts.job_name, steps)
    labels = {**opts.labels("runtime"), FRAMEWORK_LABEL: "tensorflow"}
    return security.harden({
        "apiVersion": API_VERSION,
        "kind": RUNTIME_KIND,
        "metadata": {"name": runtime_name(opts), "labels": labels},
        "spec": {
            "mlPolicy": {"numNodes": _trainer_step(steps).pods},
            "template": {
                "metadata": {"labels": opts.labels("pipeline")},
                "spec": jobset.jobset_spec(opts, steps, TRAINJOB),
            },
        },
    })


def build_trainjob(opts: JobOptions) -> dict:
    """The TrainJob: the runtime, the node count, the image and the resources per node."""
    steps = jobset.layout(opts, TRAINJOB)
    node = _trainer_step(steps)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": pods.training_metadata(opts, "train"),
        "spec": {
            "runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": RUNTIME_KIND,
                           "name": runtime_name(opts)},
            "activeDeadlineSeconds": opts.run_policy.active_deadline_seconds,
            "trainer": {
                "image": opts.image,
                "numNodes": node.pods,
                "resourcesPerNode": jobset.step_resources(opts, node, TRAINJOB).to_k8s(),
            },
        },
    }
