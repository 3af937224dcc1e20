"""TF_CONFIG without an operator: built inside a JobSet pod from what JobSet gives it.

The Kubeflow training operator wrote TF_CONFIG into every TFJob pod. Neither JobSet nor Kubeflow
Trainer v2 has a TensorFlow operator (Trainer's `plainML` policy leaves TF_CONFIG to the
container: kubeflow/trainer 2699), so `baton task` builds it from three sources:

* what the JobSet controller (kubernetes-sigs/jobset v0.12.0, `pkg/controllers/
  jobset_controller.go`) and the Job controller give every pod: with `network.enableDNSHostnames`
  (on by default) the pod of Job `<jobset>-<replicatedJob>-<jobIndex>` at completion index
  `<podIndex>` has the host name `<jobset>-<replicatedJob>-<jobIndex>-<podIndex>`
  (`placement.GenPodName`) under the subdomain `<jobset>` (a headless Service of that name, or
  `spec.network.subdomain`); the labels `jobset.sigs.k8s.io/jobset-name`, `replicatedjob-name`,
  `job-index` and `replicatedjob-replicas`, and the Job's annotation
  `batch.kubernetes.io/job-completion-index`, which the manifest passes into the container with
  the downward API (`BATON_JOBSET_NAME`, `BATON_REPLICATED_JOB`, `BATON_JOB_INDEX`,
  `BATON_REPLICATED_JOB_REPLICAS`, `BATON_COMPLETION_INDEX`);
* the shape of the other replicated jobs, which no pod can see (the downward API exposes the
  pod's own labels only): `BATON_TF_TOPOLOGY`, written by `baton k8s` into the container, a JSON
  object `{"port": 2222, "subdomain": null, "replicatedJobs": [{"name", "replicas",
  "parallelism", "tasks": [[type, count], ...]}, ...]}`. Pods of a replicated job are numbered
  `jobIndex * parallelism + podIndex` and take the tasks in that order: `[["chief", 1],
  ["worker", 3]]` makes pod 0 the chief and pods 1-3 workers 0-2 (a TrainJob's `node` job);
* Kubeflow Trainer's own naming for a TrainJob's JobSet (kubeflow/trainer v2.3.0, `pkg/runtime/
  framework/plugins/jobset/jobset.go`, IdentifyPodNetwork): the JobSet is named after the
  TrainJob and its endpoints are `<trainjob>-<replicatedJob>-<jobIndex>-<podIndex>.<subdomain>`,
  the same rule.

The result has the operator's shape (`{"cluster": {...}, "task": {...}, "environment":
"cloud"}`, Go's compact JSON with sorted cluster keys, every address `<host>.<subdomain>:<port>`),
so everything downstream is the code a TFJob pod runs. What the pod can check, it checks: its own
replicated job is in the topology with the replica count its label says, its index is within the
parallelism, its host name is the one the rule gives. A missing input or a mismatch is a
`JobSetEnvError` naming the variable, the label or field it comes from, and what was received:
`baton task` exits 1 with it (a permanent failure), never waits for peers that cannot exist.

`BATON_ADDRESS_MAP` (a JSON object `{"<host>.<subdomain>:<port>": "127.0.0.1:<port>"}`) is the
local emulator's (`baton k8s emulate`): host names do not resolve on a laptop, so each address
is replaced by its local one after TF_CONFIG is built; the built string stays available.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from typing import Any

from baton.strategies.cluster import TASK_TYPES, ClusterSpec, ClusterSpecError, TaskId, TFConfig

TOPOLOGY_ENV = "BATON_TF_TOPOLOGY"
ADDRESS_MAP_ENV = "BATON_ADDRESS_MAP"
# env var -> where the manifest takes it from (downward API)
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
REPLICAS_LABEL = "jobset.sigs.k8s.io/replicatedjob-replicas"
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
DOWNWARD = {
    "BATON_JOBSET_NAME": f"metadata.labels['{JOBSET_NAME_LABEL}']",
    "BATON_REPLICATED_JOB": f"metadata.labels['{REPLICATED_JOB_LABEL}']",
    "BATON_JOB_INDEX": f"metadata.labels['{JOB_INDEX_LABEL}']",
    "BATON_REPLICATED_JOB_REPLICAS": f"metadata.labels['{REPLICAS_LABEL}']",
    "BATON_COMPLETION_INDEX": f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']",
}


class JobSetEnvError(ClusterSpecError):
    """A JobSet pod whose TF_CONFIG inputs are missing or contradict each other."""


@dataclasses.dataclass(frozen=True)
class ReplicatedJob:
    """One replicated job of the topology: `replicas` Jobs of `parallelism` pods each, whose
    pods take `tasks` ([(type, count)]) in order of `jobIndex * parallelism + podIndex`."""

    name: str
    replicas: int
    parallelism: int
    tasks: tuple[tuple[str, int], ...]

    @property
    def pods(self) -> int:
        return self.replicas * self.parallelism

    def pod_names(self, jobset: str) -> list[str]:
        """JobSet's GenPodName for every pod, in pod order."""
        return [f"{jobset}-{self.name}-{j}-{p}"
                for j in range(self.replicas) for p in range(self.parallelism)]


@dataclasses.dataclass(frozen=True)
class Topology:
    """`BATON_TF_TOPOLOGY`: which replicated jobs hold which TensorFlow tasks, and the port."""

    replicated_jobs: tuple[ReplicatedJob, ...]
    port: int = 2222
    subdomain: str | None = None  # None: the JobSet's name (the controller's default)

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for rj in self.replicated_jobs:
            if rj.name in seen:
                raise JobSetEnvError(f"{TOPOLOGY_ENV}: replicated job {rj.name!r} is listed twice")
            seen.add(rj.name)
            if rj.replicas < 1 or rj.parallelism < 1:
                raise JobSetEnvError(
                    f"{TOPOLOGY_ENV}: replicatedJobs[{rj.name}] needs replicas and parallelism "
                    f">= 1. Received: replicas={rj.replicas}, parallelism={rj.parallelism}")
            for kind, count in rj.tasks:
                if kind not in TASK_TYPES or count < 1:
                    raise JobSetEnvError(
                        f"{TOPOLOGY_ENV}: replicatedJobs[{rj.name}].tasks takes task types of "
                        f"{', '.join(TASK_TYPES)} with counts >= 1. Received: [{kind!r}, {count}]")
            if sum(c for _, c in rj.tasks) != rj.pods:
                raise JobSetEnvError(
                    f"{TOPOLOGY_ENV}: replicatedJobs[{rj.name}] has {rj.pods} pods "
                    f"(replicas {rj.replicas} x parallelism {rj.parallelism}) but its tasks "
                    f"count {sum(c for _, c in rj.tasks)}. Received: tasks={list(rj.tasks)}")
        if not 0 < self.port < 65536:
            raise JobSetEnvError(f"{TOPOLOGY_ENV}: port must be 1-65535. Received: {self.port!r}")

    def to_json(self) -> str:
        """Compact JSON, the form `baton k8s` writes into the manifest."""
        return json.dumps({
            "port": self.port, "subdomain": self.subdomain,
            "replicatedJobs": [{"name": r.name, "replicas": r.replicas,
                                "parallelism": r.parallelism,
                                "tasks": [[k, c] for k, c in r.tasks]}
                               for r in self.replicated_jobs],
        }, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Topology:
        try:
            data = json.loads(text)
            rjobs = tuple(
                ReplicatedJob(str(r["name"]), _int(r["replicas"]), _int(r["parallelism"]),
                              tuple((str(k), _int(c)) for k, c in r["tasks"]))
                for r in data["replicatedJobs"])
            sub = data.get("subdomain")
            return cls(rjobs, _int(data.get("port", 2222)), None if sub is None else str(sub))
        except JobSetEnvError:
            raise
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise JobSetEnvError(
                f"{TOPOLOGY_ENV} must be a JSON object {{\"port\", \"replicatedJobs\": [{{\"name\", "
                f"\"replicas\", \"parallelism\", \"tasks\": [[type, count]]}}]}} ({exc!r}). "
                f"Received: {text[:300]!r}") from None

    def replicated_job(self, name: str) -> ReplicatedJob:
        for rj in self.replicated_jobs:
            if rj.name == name:
                return rj
        raise JobSetEnvError(
            f"this pod's replicated job {name!r} (label {REPLICATED_JOB_LABEL}) holds no "
            f"TensorFlow task in {TOPOLOGY_ENV}, which lists "
            f"{[r.name for r in self.replicated_jobs]}")

    def assignments(self) -> list[tuple[str, int, TaskId]]:
        """(replicated job, pod number within it, TensorFlow task) for every pod, in order;
        a task type's indices run on across replicated jobs in their order."""
        next_index = dict.fromkeys(TASK_TYPES, 0)
        out = []
        for rj in self.replicated_jobs:
            pod = 0
            for kind, count in rj.tasks:
                for _ in range(count):
                    out.append((rj.name, pod, TaskId(kind, next_index[kind])))
                    next_index[kind] += 1
                    pod += 1
        return out

    def cluster(self, jobset: str) -> dict[str, list[str]]:
        """TF_CONFIG's `cluster`: every task's `<pod host name>.<subdomain>:<port>`."""
        sub = self.subdomain or jobset
        names = {rj.name: rj.pod_names(jobset) for rj in self.replicated_jobs}
        out: dict[str, list[str]] = {}
        for rjob, pod, task in self.assignments():
            out.setdefault(task.type, []).append(f"{names[rjob][pod]}.{sub}:{self.port}")
        return out

    def task(self, rjob: str, job_index: int, completion_index: int) -> TaskId:
        rj = self.replicated_job(rjob)
        number = job_index * rj.parallelism + completion_index
        return next(t for r, pod, t in self.assignments() if r == rjob and pod == number)


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"not an integer: {value!r}")
    return int(value)


def operator_json(cluster: Mapping[str, list[str]], task: TaskId) -> str:
    """The training operator's bytes (Go encoding/json: compact, cluster keys sorted)."""
    return json.dumps({"cluster": {k: list(cluster[k]) for k in sorted(cluster)},
                       "task": {"type": task.type, "index": task.index},
                       "environment": "cloud"}, separators=(",", ":"))


def _env_int(env: Mapping[str, str], name: str, low: int = 0) -> int:
    source = DOWNWARD.get(name, name)
    text = env.get(name)
    if text is None or not text.strip():
        raise JobSetEnvError(
            f"{name} is missing: the container must take it from {source} (downward API, as "
            f"`baton k8s` writes it); without it this pod cannot know its TensorFlow task")
    if not text.strip().isdigit() or int(text) < low:
        raise JobSetEnvError(f"{name} (from {source}) must be an integer >= {low}. "
                             f"Received: {text!r}")
    return int(text)


def _env_text(env: Mapping[str, str], name: str) -> str:
    text = (env.get(name) or "").strip()
    if not text:
        raise JobSetEnvError(
            f"{name} is missing: the container must take it from {DOWNWARD[name]} (downward "
            "API, as `baton k8s` writes it); without it this pod cannot know its TensorFlow task")
    return text


@dataclasses.dataclass(frozen=True)
class JobSetTask:
    """What a JobSet pod derived: its TF_CONFIG (addresses as the cluster names them) and, in
    the emulator, the same with local addresses."""

    tf_config: TFConfig  # what the task runs with (local addresses where a map was given)
    operator_json: str  # the TF_CONFIG as the cluster's names give it
    hostname: str


def is_jobset_pod(environ: Mapping[str, str]) -> bool:
    return bool((environ.get(TOPOLOGY_ENV) or "").strip())


def from_env(environ: Mapping[str, str]) -> JobSetTask:
    """TF_CONFIG of this JobSet pod (see the module docstring); JobSetEnvError names what is
    missing or wrong."""
    topology = Topology.from_json(environ[TOPOLOGY_ENV])
    jobset = _env_text(environ, "BATON_JOBSET_NAME")
    rjob_name = _env_text(environ, "BATON_REPLICATED_JOB")
    job_index = _env_int(environ, "BATON_JOB_INDEX")
    completion = _env_int(environ, "BATON_COMPLETION_INDEX")
    replicas = _env_int(environ, "BATON_REPLICATED_JOB_REPLICAS", low=1)
    rj = topology.replicated_job(rjob_name)
    if replicas != rj.replicas:
        raise JobSetEnvError(
            f"replicated job {rjob_name!r} has {replicas} Job(s) (label {REPLICAS_LABEL}) but "
            f"{TOPOLOGY_ENV} says {rj.replicas}: the manifest was edited on one side only")
    if job_index >= rj.replicas or completion >= rj.parallelism:
        raise JobSetEnvError(
            f"this pod is Job {job_index}, completion index {completion} of replicated job "
            f"{rjob_name!r}, outside {TOPOLOGY_ENV}'s replicas={rj.replicas} x "
            f"parallelism={rj.parallelism}: the Job's parallelism/completions were edited "
            "without the topology")
    expected = f"{jobset}-{rjob_name}-{job_index}-{completion}"
    hostname = (environ.get("HOSTNAME") or "").strip()
    if hostname and hostname != expected:
        raise JobSetEnvError(
            f"this pod's host name is {hostname!r}, not {expected!r}: the JobSet must keep "
            "spec.network.enableDNSHostnames (its default, true) so that peers reach it by name")
    cluster = topology.cluster(jobset)
    task = topology.task(rjob_name, job_index, completion)
    built = operator_json(cluster, task)
    mapping = _address_map(environ)
    if mapping:
        missing = [a for addrs in cluster.values() for a in addrs if a not in mapping]
        if missing:
            raise JobSetEnvError(f"{ADDRESS_MAP_ENV} has no local address for {missing}")
        cluster = {k: [mapping[a] for a in v] for k, v in cluster.items()}
    spec = ClusterSpec.from_dict(cluster)
    return JobSetTask(TFConfig(spec, task), built, expected)


def _address_map(environ: Mapping[str, str]) -> dict[str, str]:
    text = (environ.get(ADDRESS_MAP_ENV) or "").strip()
    if not text:
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise JobSetEnvError(f"{ADDRESS_MAP_ENV} is not JSON ({exc}). Received: {text[:200]!r}") from None
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise JobSetEnvError(f"{ADDRESS_MAP_ENV} must map addresses to addresses. Received: {text[:200]!r}")
    return data


def tf_config_from_env(environ: Mapping[str, str],
                       say: Callable[[str], None] | None = None) -> TFConfig | None:
    """This task's TF_CONFIG: the variable an operator (or the local launcher) set, or the one
    built from what a JobSet gives the pod; None to run alone. `say` gets a line saying which.

    A JobSet pod whose topology holds one task in all runs alone, as the TFJob operator gives
    no TF_CONFIG to a job that is not distributed.
    """
    if not is_jobset_pod(environ):
        return TFConfig.from_env(environ)
    if (environ.get("TF_CONFIG") or "").strip():
        raise JobSetEnvError(
            f"both TF_CONFIG and {TOPOLOGY_ENV} are set: a pod takes its task from one of them "
            "(remove TF_CONFIG from the JobSet's container)")
    built = from_env(environ)
    if say is not None:
        say(f"TF_CONFIG from the JobSet pod {built.hostname}: {built.operator_json}")
        if (environ.get(ADDRESS_MAP_ENV) or "").strip():
            say(f"local addresses (baton k8s emulate): {built.tf_config.to_json()}")
    if len(built.tf_config.cluster.tasks()) == 1:
        return None
    return built.tf_config
