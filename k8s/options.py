"""Plain dataclasses that describe a Kubernetes deployment of one pipeline run.

`k8s` never imports `pipeline` (a checked layer rule): the CLI glue turns a PipelineSpec into a
`JobOptions`, and every builder here takes only these values. Everything that the cluster would
reject later is refused here first, with the option named, because a TFJob that fails in the
admission webhook after a 20-minute image build is a bad way to learn about a typo.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from baton.k8s.errors import ManifestError

# image references and queue names: checked here, defined in k8s.refs
from baton.k8s.refs import DEFAULT_IMAGE as DEFAULT_IMAGE
from baton.k8s.refs import QUEUE_LABEL as QUEUE_LABEL
from baton.k8s.refs import check_image as check_image
from baton.k8s.refs import check_queue as check_queue
from baton.k8s.refs import pull_policy as pull_policy
from baton.strategies.factory import (
    MULTI_WORKER_MIRRORED,
    PARAMETER_SERVER,
    SINGLE_WORKER,
    STRATEGIES,
)

CLEAN_POD_POLICIES = ("None", "Running", "All")
DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
CONFIGMAP_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
CONFIGMAP_MAX_BYTES = 1000 * 1024  # the API server refuses ConfigMaps over 1 MiB; leave room

# Kubernetes resource.Quantity, as the CRD's own `pattern` spells it.
QUANTITY = re.compile(
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
# The longest pod name suffix the operator appends: `-evaluator-0`; pod names are DNS labels.
_LONGEST_SUFFIX = len("-evaluator-0")
# What `baton k8s --target` writes the training as (docs/kubernetes.md: which for which cluster)
JOBSET, TRAINJOB, TFJOB = "jobset", "trainjob", "tfjob"
TARGETS = (JOBSET, TRAINJOB, TFJOB)
def check_dns1035(field: str, value: object) -> str:
    """A DNS-1035 label (what the operator's webhook requires of a job name)."""
    if not isinstance(value, str) or not DNS1035.match(value) or len(value) > 63:
        raise ManifestError(
            field,
            "must be a DNS-1035 label: lower-case letters, digits and '-', starting with a "
            f"letter, ending with a letter or digit, at most 63 characters. Received: {value!r}",
        )
    return value


def check_quantity(field: str, value: object, allow_zero: bool = False) -> str:
    """A positive Kubernetes quantity such as `500m`, `2`, `4Gi`."""
    text = str(value)
    if not QUANTITY.match(text) or text.startswith("-"):
        raise ManifestError(
            field, f"must be a non-negative Kubernetes quantity like '2', '500m' or '4Gi'. Received: {value!r}"
        )
    number = re.match(r"^\+?([0-9.]+)", text)
    if number and float(number.group(1) or 0) == 0 and not allow_zero:
        raise ManifestError(field, f"must be greater than zero. Received: {value!r}")
    return text


def quantity_text(value: object) -> object:
    """A YAML number as Kubernetes spells it (`2` -> "2", `0.5` -> "0.5"); text unchanged."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


def check_gpu(field: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ManifestError(field, f"must be an integer >= 0. Received: {value!r}")
    return value


@dataclasses.dataclass(frozen=True)
class Resources:
    """Requests and limits of one pod: CPUs, memory, GPUs (`nvidia.com/gpu`).

    `cpu` may be written as a YAML number (`2`, `0.5`) or a quantity (`"500m"`).
    """

    cpu: str | float = "1"
    memory: str = "2Gi"
    gpu: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "cpu", quantity_text(self.cpu))
        check_quantity("resources.cpu", self.cpu)
        check_quantity("resources.memory", self.memory)
        check_gpu("resources.gpu", self.gpu)

    def to_k8s(self) -> dict:
        """Requests = limits for CPU and memory (Guaranteed QoS), GPUs as limits only.

        The CPU limit is the pod's cgroup quota, which is what the inventory inside the pod
        reads as its usable cores (`strategies.inventory.cgroup_cpu_quota`): TensorFlow's
        thread pools and Beam's workers follow it. Without a limit the pod would see every core
        of its node and oversubscribe the share it was scheduled for. `nvidia.com/gpu` is an
        extended resource: Kubernetes takes it in `limits` (requests default to them).
        """
        requests: dict[str, str] = {"cpu": str(self.cpu), "memory": str(self.memory)}
        limits: dict[str, str] = {"cpu": str(self.cpu), "memory": str(self.memory)}
        if self.gpu:
            limits["nvidia.com/gpu"] = str(self.gpu)
        return {"requests": requests, "limits": limits}


# `cluster.replica_resources` keys and the TFJob replica types they stand for
REPLICA_TYPES = {"chief": "Chief", "worker": "Worker", "ps": "PS", "evaluator": "Evaluator"}


@dataclasses.dataclass(frozen=True)
class ResourceOverride:
    """Part of `Resources` for one replica type; an unset field keeps the default."""

    cpu: str | float | None = None
    memory: str | None = None
    gpu: int | None = None

    def __post_init__(self) -> None:
        if self.cpu is not None:
            object.__setattr__(self, "cpu", quantity_text(self.cpu))
            check_quantity("cpu", self.cpu)
        if self.memory is not None:
            check_quantity("memory", self.memory)
        if self.gpu is not None:
            check_gpu("gpu", self.gpu)

    def over(self, base: Resources) -> Resources:
        return Resources(
            cpu=base.cpu if self.cpu is None else self.cpu,
            memory=base.memory if self.memory is None else self.memory,
            gpu=base.gpu if self.gpu is None else self.gpu,
        )


@dataclasses.dataclass(frozen=True)
class ReplicaResources:
    """`cluster.replica_resources`: resources per TFJob replica type, over `cluster.resources`.

    Without an entry a replica type gets `cluster.resources`, except the ones that compute no
    gradients: PS tasks (they hold variables) and the parameter-server strategy's Chief (the
    coordinator, which only schedules steps) get no GPUs. An entry for a type the topology
    does not have is ignored (the same spec serves `--strategy` overrides).
    """

    chief: ResourceOverride | None = None
    worker: ResourceOverride | None = None
    ps: ResourceOverride | None = None
    evaluator: ResourceOverride | None = None

    def __post_init__(self) -> None:
        for key in REPLICA_TYPES:
            value = getattr(self, key)
            if value is not None and not isinstance(value, ResourceOverride):
                raise ManifestError(f"cluster.replica_resources.{key}",
                                    f"must be a mapping of cpu, memory, gpu. Received: {value!r}")

    def for_type(self, rtype: str, base: Resources, strategy: str) -> Resources:
        """The resources of TFJob replica type `rtype` (operator spelling: Chief, PS, ...)."""
        key = rtype.lower()
        default = base
        if key == "ps" or (key == "chief" and strategy == PARAMETER_SERVER):
            default = dataclasses.replace(base, gpu=0)
        override = getattr(self, key, None)
        return override.over(default) if override is not None else default


@dataclasses.dataclass(frozen=True)
class Topology:
    """Who trains. `workers` counts training tasks exactly as `baton run --workers` does.

    * `multi_worker_mirrored`: one Chief plus `workers - 1` Workers (the chief trains too, so
      the all-reduce ring has `workers` members, the same as locally). With `chief=0`, `workers`
      Workers and worker 0 decides success.
    * `parameter_server`: one Chief (the coordinator), `workers` Workers and `ps` PS.
    * `one_device` / `mirrored`: a single Chief pod using every device it is given.
    """

    strategy: str = MULTI_WORKER_MIRRORED
    workers: int = 2
    ps: int = 0
    chief: int = 1
    evaluator: bool = False

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ManifestError(
                "cluster.strategy", f"must be one of {', '.join(STRATEGIES)}. Received: {self.strategy!r}"
            )
        for name in ("workers", "ps", "chief"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ManifestError(f"cluster.{name}", f"must be an integer. Received: {value!r}")
        if self.chief not in (0, 1):
            raise ManifestError(
                "cluster.chief", f"a TFJob has at most one Chief. Received: chief={self.chief}"
            )
        if self.workers < 1:
            raise ManifestError(
                "cluster.workers", f"at least one training task is needed. Received: workers={self.workers}"
            )
        if self.ps < 0:
            raise ManifestError("cluster.ps", f"must be >= 0. Received: ps={self.ps}")
        if self.strategy == PARAMETER_SERVER:
            if self.ps < 1:
                raise ManifestError(
                    "cluster.ps", f"parameter_server needs at least one PS. Received: ps={self.ps}"
                )
            if self.chief != 1:
                raise ManifestError(
                    "cluster.chief",
                    f"parameter_server needs a Chief to coordinate. Received: chief={self.chief}",
                )
        elif self.ps:
            raise ManifestError(
                "cluster.ps",
                f"only parameter_server uses parameter servers; strategy {self.strategy} "
                f"does not. Received: ps={self.ps}",
            )
        if self.strategy in SINGLE_WORKER and self.workers != 1:
            raise ManifestError(
                "cluster.workers",
                f"strategy {self.strategy} trains in one pod; use multi_worker_mirrored for "
                f"more. Received: workers={self.workers}",
            )

    def replica_counts(self) -> dict[str, int]:
        """TFJob replica types (operator spelling) and their counts, in operator order."""
        counts: dict[str, int] = {}
        if self.strategy == PARAMETER_SERVER:
            counts = {"Chief": 1, "Worker": self.workers, "PS": self.ps}
        elif self.strategy == MULTI_WORKER_MIRRORED and self.chief:
            counts = {"Chief": 1, "Worker": self.workers - 1}
        elif self.strategy == MULTI_WORKER_MIRRORED:
            counts = {"Worker": self.workers}
        else:
            counts = {"Chief": 1}
        if self.evaluator:
            counts["Evaluator"] = 1
        return {k: v for k, v in counts.items() if v > 0}


@dataclasses.dataclass(frozen=True)
class RunPolicy:
    """The TFJob runPolicy. cleanPodPolicy `Running` because PS pods never exit by themselves."""

    backoff_limit: int = 3
    clean_pod_policy: str = "Running"
    ttl_seconds_after_finished: int = 7 * 24 * 3600
    active_deadline_seconds: int = 24 * 3600

    def __post_init__(self) -> None:
        if self.clean_pod_policy not in CLEAN_POD_POLICIES:
            raise ManifestError(
                "run_policy.clean_pod_policy",
                f"must be one of {', '.join(CLEAN_POD_POLICIES)}. Received: {self.clean_pod_policy!r}",
            )
        for name in ("backoff_limit", "ttl_seconds_after_finished"):
            if getattr(self, name) < 0:
                raise ManifestError(f"run_policy.{name}", f"must be >= 0. Received: {getattr(self, name)}")
        if self.active_deadline_seconds <= 0:
            raise ManifestError(
                "run_policy.active_deadline_seconds",
                f"must be a positive number of seconds. Received: {self.active_deadline_seconds}",
            )

    def to_k8s(self) -> dict:
        return {
            "backoffLimit": self.backoff_limit,
            "cleanPodPolicy": self.clean_pod_policy,
            "ttlSecondsAfterFinished": self.ttl_seconds_after_finished,
            "activeDeadlineSeconds": self.active_deadline_seconds,
        }


@dataclasses.dataclass(frozen=True)
class JobOptions:
    """Everything the manifest builders need for one pipeline run on a cluster.

    Attributes:
        pipeline: pipeline name (labels, resource names, `/artifacts/models/<pipeline>`).
        run_id: shared by the data Job, the TFJob and the release Job so they agree on the run dir.
        spec_text: the pipeline YAML, shipped as a ConfigMap; None = the image's embedded default.
        code_files: the user's modules (path relative to the spec's directory, source text)
            that the spec names and those they import from that directory; shipped in the
            spec's ConfigMap and mounted beside the spec, where Baton imports them from.
        data_stages / train_stage / release_stages: which stage runs where.
        tfjob: whether there is a training object at all (False: a spec whose training is a
            federated stage only, run by `k8s.federated`'s SuperLink and SuperNodes instead).
        target: what the training (and, for a JobSet or TrainJob, the whole pipeline) is
            written as: `jobset` (JobSet v1alpha2), `trainjob` (Kubeflow Trainer v2 TrainJob and
            a ClusterTrainingRuntime) or `tfjob` (the training operator's kubeflow.org/v1).
        queue: a Kueue LocalQueue; the training object carries `kueue.x-k8s.io/queue-name`.
        image: pinned (a tag other than latest, or a digest): `check_image`.
        train_inputs / release_inputs: `<stage>/<output>` paths (relative to the run dir) that
            must exist before the TFJob / release Job starts; init containers wait for them, so
            one `kubectl apply -k` is enough.
    """

    pipeline: str
    run_id: str
    image: str = DEFAULT_IMAGE
    namespace: str = "default"
    target: str = JOBSET
    queue: str | None = None  # Kueue LocalQueue: the training object is admitted as one gang
    topology: Topology = dataclasses.field(default_factory=Topology)
    resources: Resources = dataclasses.field(default_factory=Resources)
    ps_resources: Resources | None = None  # the PS replicas' (replica_resources.ps wins)
    replica_resources: ReplicaResources = dataclasses.field(default_factory=ReplicaResources)
    batch_size: int | None = None  # the train stage's global batch: checked against the GPUs
    run_policy: RunPolicy = dataclasses.field(default_factory=RunPolicy)
    name: str | None = None
    spec_text: str | None = None
    code_files: tuple[tuple[str, str], ...] = ()
    data_stages: tuple[str, ...] = ()
    train_stage: str = "train"
    tfjob: bool = True
    release_stages: tuple[str, ...] = ()
    train_inputs: tuple[str, ...] = ()
    release_inputs: tuple[str, ...] = ()
    port: int = 2222
    pvc_size: str = "20Gi"
    storage_class: str | None = None
    mount_path: str = "/artifacts"
    serving_image: str = "tensorflow/serving:2.18.0"
    serving_replicas: int = 1
    termination_grace_seconds: int = 120
    # the run directory on a bucket (k8s.object_storage): no shared volume, credentials instead
    storage: Any = None

    def __post_init__(self) -> None:
        check_dns1035("pipeline", self.pipeline)
        if not isinstance(self.run_id, str) or not DNS1123_LABEL.match(self.run_id):
            raise ManifestError(
                "run_id", f"must be lower-case letters, digits and '-' (it names resources). Received: {self.run_id!r}"
            )
        check_dns1035("name", self.job_name)
        if self.target == TFJOB and len(self.job_name) + _LONGEST_SUFFIX > 63:
            raise ManifestError(
                "name",
                f"pod names '<job>-<type>-<i>' must stay within 63 characters, so the job name "
                f"may have at most {63 - _LONGEST_SUFFIX}. Received: {self.job_name!r} "
                f"({len(self.job_name)} characters)",
            )
        if not DNS1123_LABEL.match(self.namespace or "") or len(self.namespace) > 63:
            raise ManifestError("namespace", f"must be a DNS-1123 label. Received: {self.namespace!r}")
        for field in ("image", "serving_image"):
            check_image(field, getattr(self, field))
        if self.target not in TARGETS:
            raise ManifestError("target", f"must be one of {', '.join(TARGETS)}. "
                                f"Received: {self.target!r}")
        if self.queue is not None:
            check_queue(self.queue)
        if not isinstance(self.port, int) or not 0 < self.port < 65536:
            raise ManifestError("port", f"must be a TCP port 1-65535. Received: {self.port!r}")
        check_quantity("pvc_size", self.pvc_size)
        if not self.mount_path.startswith("/"):
            raise ManifestError("mount_path", f"must be an absolute path. Received: {self.mount_path!r}")
        if self.serving_replicas < 1:
            raise ManifestError("serving_replicas", f"must be >= 1. Received: {self.serving_replicas}")
        self._check_code_files()

    def _check_code_files(self) -> None:
        if self.code_files and self.spec_text is None:
            raise ManifestError("code_files", "user modules ship beside a spec; there is none")
        for rel, _ in self.code_files:
            parts = rel.split("/")
            if rel.startswith("/") or ".." in parts or not all(CONFIGMAP_KEY.match(p) for p in parts):
                raise ManifestError(
                    "code_files", "a module path must be relative to the spec's directory, of "
                    f"letters, digits, '-', '_' and '.'. Received: {rel!r}")
        size = sum(len(t.encode()) for _, t in self.code_files) + len((self.spec_text or "").encode())
        if size > CONFIGMAP_MAX_BYTES:
            raise ManifestError(
                "code_files", f"the spec and its modules are {size} bytes, more than a ConfigMap "
                f"holds ({CONFIGMAP_MAX_BYTES}); build them into the image instead "
                "(docs/kubernetes.md). Received: "
                + ", ".join(rel for rel, _ in self.code_files))

    def resources_for(self, rtype: str) -> Resources:
        """The resources of TFJob replica type `rtype` (Chief, Worker, PS, Evaluator)."""
        base = self.ps_resources if (rtype == "PS" and self.ps_resources) else self.resources
        return self.replica_resources.for_type(rtype, base, self.topology.strategy)

    @property
    def job_name(self) -> str:
        return self.name or f"{self.pipeline}-{self.run_id}"

    @property
    def run_dir(self) -> str:
        return f"{self.runs_dir}/{self.pipeline}/{self.run_id}"

    @property
    def runs_dir(self) -> str:
        return self.storage.runs_url.rstrip("/") if self.storage else f"{self.mount_path}/runs"

    @property
    def models_dir(self) -> str:
        if self.storage:
            return str(self.storage.models_url(self.pipeline))
        return f"{self.mount_path}/models/{self.pipeline}"

    @property
    def pvc_name(self) -> str:
        return f"{self.pipeline}-artifacts"

    def labels(self, component: str) -> dict[str, str]:
        return {
            "app.kubernetes.io/name": "baton",
            "app.kubernetes.io/part-of": self.pipeline,
            "app.kubernetes.io/component": component,
            "baton.dev/run-id": self.run_id,
        }
