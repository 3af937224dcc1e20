"""The whole pipeline as one JobSet (jobset.x-k8s.io/v1alpha2, JobSet v0.12.0).

One replicated job per step and per TensorFlow task type, ordered by JobSet's `dependsOn` (the
controller creates a replicated job's Jobs only once the ones it depends on are `Ready` or
`Complete`), so one `kubectl apply` runs the data stages, the training and the release stages
in order with no pod polling a volume:

    data (Complete) -> [ps (Ready) ->] worker / chief -> release   (success: release Complete)

* **data**: `baton run --only <stages before training>`; the first replicated job.
* **training**: `chief`, `worker`, `ps` (and `evaluator`), each one Indexed Job whose pods run
  `baton task` (one TensorFlow task each). Under parameter servers the PS start first and the
  workers after them (`dependsOn: ps Ready`, a TCP readiness probe on the gRPC port saying a
  server listens), the chief (coordinator) after the workers. Under multi-worker mirrored every
  task starts once the data are there. Each pod builds its TF_CONFIG from its JobSet host name,
  labels and completion index (strategies.jobset_cluster): the manifest passes them through the
  downward API with the topology in `BATON_TF_TOPOLOGY`.
* **release**: `baton run --only <stages after training>`, once the task that writes the model
  (the chief, or worker 0 without one) has completed.

Exit codes (baton.errors) map onto Kubernetes' own policies, the TFJob operator's `ExitCode`
restart policy spelled with JobSet's and Job's parts: each Job's `podFailurePolicy` fails the Job
at once on a permanent code (anything but 129 transient, 137 killed, 143 preempted) and re-creates
the pod (same index, same host name) for a retryable one, counting it against `backoffLimit`; a
pod evicted or preempted by the cluster (`DisruptionTarget`) is re-created without counting. The
re-created task resumes from the last backup, as under the TFJob. The JobSet's `failurePolicy`
then decides the end: a Job failed by the pod failure policy (a permanent error) or by its
deadline fails the whole JobSet at once, so no later step waits for inputs that will never come;
a Job whose retries are spent restarts the whole JobSet once (`maxRestarts: 1`: every step again,
training from its backup), then fails it. The `successPolicy` is the last step's: the JobSet is
complete when the release step (else the chief) is, and the controller then deletes what still
runs (parameter servers and their workers never exit by themselves).
"""

from __future__ import annotations

import copy
import dataclasses

from baton.k8s import jobs, placement, pods, security, tfjob
from baton.k8s.errors import ManifestError
from baton.k8s.options import JOBSET, TRAINJOB, JobOptions, Resources
from baton.strategies import jobset_cluster
from baton.strategies.factory import PARAMETER_SERVER

API_VERSION = "jobset.x-k8s.io/v1alpha2"
KIND = "JobSet"
PORT_NAME = "tf-grpc"
FAILURE_POLICY = {"maxRestarts": 1, "rules": [
    {"name": "permanentError", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]},
    {"name": "deadlineExceeded", "action": "FailJobSet", "onJobFailureReasons": ["DeadlineExceeded"]},
    {"name": "retriesSpent", "action": "RestartJobSet", "onJobFailureReasons": ["BackoffLimitExceeded"]},
]}
TRAINER_ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
NODE = "node"  # Trainer's trainer replicated job and its container (pkg/constants)
_POD_SUFFIX = len("-abcde")  # the Job controller's random suffix, counted by JobSet's webhook


@dataclasses.dataclass(frozen=True)
class Step:
    """One replicated job: what it runs and after what.

    `tasks` are the TensorFlow tasks its pods take, in pod order ([] for the data and release
    steps); `depends_on` are (replicated job, "Ready" | "Complete") pairs.
    """

    name: str
    component: str  # data, train, release
    tasks: tuple[tuple[str, int], ...] = ()
    depends_on: tuple[tuple[str, str], ...] = ()
    ancestor: str | None = None  # Trainer's trainjob-ancestor-step label
    server: bool = False  # a TensorFlow server the next tasks wait for (PS strategy)

    @property
    def pods(self) -> int:
        return max(1, sum(c for _, c in self.tasks))

    @property
    def container(self) -> str:
        if self.ancestor == "trainer":
            return NODE
        return tfjob.CONTAINER if self.tasks else "baton"


def _training_steps(opts: JobOptions, target: str, after: tuple[tuple[str, str], ...]) -> list[Step]:
    topo = opts.topology
    counts = topo.replica_counts()
    chief, workers, ps = counts.get("Chief", 0), counts.get("Worker", 0), counts.get("PS", 0)
    trainer = "trainer" if target == TRAINJOB else None
    if topo.strategy == PARAMETER_SERVER:
        steps = [Step("ps", "train", (("ps", ps),), after, server=True)]
        worker_name = NODE if trainer else "worker"
        steps.append(Step(worker_name, "train", (("worker", workers),), (("ps", "Ready"),),
                          ancestor=trainer, server=True))
        steps.append(Step("chief", "train", (("chief", 1),), ((worker_name, "Ready"),)))
    elif trainer:  # every training task is a Trainer node: numNodes = --workers
        tasks: tuple[tuple[str, int], ...] = (("chief", chief),) if chief else ()
        tasks += (("worker", workers),) if workers else ()
        steps = [Step(NODE, "train", tasks, after, ancestor=trainer)]
    else:
        steps = [Step("chief", "train", (("chief", 1),), after)] if chief else []
        if workers:
            steps.append(Step("worker", "train", (("worker", workers),), after))
    if topo.evaluator:
        steps.append(Step("evaluator", "train", (("evaluator", 1),), after))
    return steps


def layout(opts: JobOptions, target: str = JOBSET) -> list[Step]:
    """The replicated jobs of the pipeline, in order (JobSet or a TrainJob's runtime)."""
    steps: list[Step] = []
    after: tuple[tuple[str, str], ...] = ()
    if opts.data_stages:
        steps.append(Step("data", "data"))
        after = (("data", "Complete"),)
    if opts.tfjob:
        steps += _training_steps(opts, target, after)
    if opts.release_stages:
        steps.append(Step("release", "release", depends_on=((model_writer(steps), "Complete"),)))
    return steps


def model_writer(steps: list[Step]) -> str:
    """The replicated job whose first pod writes the model: the chief's, else worker 0's."""
    for kind in ("chief", "worker"):
        for step in steps:
            if step.tasks and step.tasks[0][0] == kind:
                return step.name
    raise ManifestError("cluster.workers", "no task writes the model")


def topology(opts: JobOptions, steps: list[Step]) -> jobset_cluster.Topology:
    """What every training pod reads as BATON_TF_TOPOLOGY (one Job of `pods` per step)."""
    return jobset_cluster.Topology(
        tuple(jobset_cluster.ReplicatedJob(s.name, 1, s.pods, s.tasks) for s in steps if s.tasks),
        port=opts.port)


def step_resources(opts: JobOptions, step: Step, target: str = JOBSET) -> Resources:
    """A step's pod resources: the data step's without GPUs, the release step's the cluster's,
    a training step's those of its task type. A Trainer node job holding the chief and the
    workers has one pod template: their resources must agree."""
    if step.component == "data":
        return dataclasses.replace(opts.resources, gpu=0)
    if step.component == "release":
        return opts.resources
    found = {kind: opts.resources_for(tfjob_type(kind)) for kind, _ in step.tasks}
    if len(set(found.values())) > 1:
        raise ManifestError(
            "cluster.replica_resources.chief",
            f"a {'TrainJob' if target == TRAINJOB else 'JobSet'}'s {step.name!r} pods share one "
            "pod template (Trainer's numNodes x resourcesPerNode), so the chief (node 0) cannot "
            "have other resources than the workers under multi_worker_mirrored; give them the "
            f"same, or use --target jobset. Received: {found}")
    return next(iter(found.values()))


def tfjob_type(kind: str) -> str:
    """`ps` -> `PS`, `chief` -> `Chief`: the replica type `replica_resources` is keyed by."""
    return "PS" if kind == "ps" else kind.capitalize()


def check_names(name: str, steps: list[Step], field: str = "name") -> None:
    """JobSet's webhook rule, before anything is written: the longest pod name, `<jobset>-<step>
    -<last job>-<last index>-abcde` (the Job controller adds a 5-character suffix), must be a
    DNS-1035 label of at most 63 characters."""
    for step in sorted(steps, key=lambda s: -len(f"{s.name}-0-{s.pods - 1}")):  # longest first
        pod = f"{name}-{step.name}-0-{step.pods - 1}"
        if len(pod) + _POD_SUFFIX > 63:
            raise ManifestError(
                field, f"the {step.name!r} pods would be named like {pod + '-abcde'!r} "
                f"({len(pod) + _POD_SUFFIX} characters), longer than a DNS label (63); the "
                f"name may have at most {63 - _POD_SUFFIX - len(pod) + len(name)} characters "
                f"here. Received: {name!r} ({len(name)} characters)")


def container_env(opts: JobOptions, step: Step, topo: jobset_cluster.Topology) -> list[dict]:
    env = pods.env(opts)
    if step.tasks:
        env.append({"name": jobset_cluster.TOPOLOGY_ENV, "value": topo.to_json()})
        env += [{"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}
                for name, path in jobset_cluster.DOWNWARD.items()]
    return env


def replicated_job(opts: JobOptions, step: Step, topo: jobset_cluster.Topology,
                   target: str = JOBSET) -> dict:
    """One `replicatedJobs[]` entry: one Indexed Job of `step.pods` pods."""
    vols, mounts = pods.volumes(opts)
    if step.tasks:
        command, args = tfjob.task_command(opts)
    else:
        stages = opts.data_stages if step.component == "data" else opts.release_stages
        command, args = jobs.run_command(opts, stages)
    res = step_resources(opts, step, target)
    container = {
        **pods.baton_container(opts, command, args, name=step.container),
        "env": container_env(opts, step, topo),
        "resources": res.to_k8s(),
        "volumeMounts": mounts,
    }
    if step.tasks:
        container["ports"] = [{"name": PORT_NAME, "containerPort": opts.port, "protocol": "TCP"}]
    if step.server:  # Ready = its TensorFlow server listens (what dependsOn: Ready waits for)
        container["readinessProbe"] = {"tcpSocket": {"port": PORT_NAME}, "periodSeconds": 5}
    labels = {**opts.labels(step.component), "baton.dev/step": step.name}
    annotations = dict(pods.ISTIO_OFF)
    if step.tasks:
        annotations[placement.ANNOTATION] = placement.annotation(res)
    job_labels = {TRAINER_ANCESTOR_LABEL: step.ancestor} if step.ancestor else {}
    entry: dict = {"name": step.name, "replicas": 1}
    if step.depends_on:
        entry["dependsOn"] = [{"name": n, "status": s} for n, s in step.depends_on]
    entry["template"] = {
        **({"metadata": {"labels": job_labels}} if job_labels else {}),
        "spec": {
            "completionMode": "Indexed",
            "parallelism": step.pods,
            "completions": step.pods,
            # about runPolicy.backoffLimit retries per pod: one failure stops a whole
            # all-reduce group, every member of which is re-created
            "backoffLimit": opts.run_policy.backoff_limit * step.pods,
            "activeDeadlineSeconds": opts.run_policy.active_deadline_seconds,
            "podFailurePolicy": copy.deepcopy(pods.POD_FAILURE_POLICY),
            "template": {
                "metadata": {"labels": labels, "annotations": annotations},
                "spec": {
                    "restartPolicy": "Never",  # what podFailurePolicy requires
                    "terminationGracePeriodSeconds": opts.termination_grace_seconds,
                    "securityContext": dict(pods.SECURITY_CONTEXT),
                    "containers": [container],
                    "volumes": vols,
                },
            },
        },
    }
    return entry


def jobset_spec(opts: JobOptions, steps: list[Step], target: str = JOBSET) -> dict:
    topo = topology(opts, steps)
    last = "release" if opts.release_stages else model_writer(steps)
    return {
        "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
        "successPolicy": {"operator": "All", "targetReplicatedJobs": [last]},
        "failurePolicy": copy.deepcopy(FAILURE_POLICY),
        "ttlSecondsAfterFinished": opts.run_policy.ttl_seconds_after_finished,
        "replicatedJobs": [replicated_job(opts, s, topo, target) for s in steps],
    }


def build_jobset(opts: JobOptions) -> dict:
    """The pipeline's JobSet (YAML-ready); ManifestError when a name would not fit."""
    steps = layout(opts, JOBSET)
    check_names(opts.job_name, steps)
    return security.harden({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": pods.training_metadata(opts, "pipeline"),
        "spec": jobset_spec(opts, steps),
    })

