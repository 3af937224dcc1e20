"""The Job controller's rules, for `baton k8s emulate`: one batch/v1 Job's pods, retries and end.

What Kubernetes' Job controller does with the pods of an Indexed Job, as much as a local run
needs (k8s.emulator.jobset runs the pods, a JobSet's or a plain Job's):

* a pod per completion index; when one exits 0 its index is complete, and the Job is `Complete`
  once every index is;
* a pod that fails is judged by the Job's `podFailurePolicy` (rules in order: `onExitCodes`
  with `In` / `NotIn`, a container's non-zero code; `onPodConditions` never match here, as no
  pod is evicted locally): `FailJob` fails the Job at once (reason `PodFailurePolicy`),
  `Ignore` re-creates the pod without counting, `Count` (and no matching rule) counts the
  failure and re-creates the pod with the same index and host name, until more than
  `backoffLimit` (default 6) failures fail the Job (`BackoffLimitExceeded`);
* `activeDeadlineSeconds` fails it (`DeadlineExceeded`); a failed Job's other pods are deleted.

Pod restart policy `OnFailure` restarts the container in place instead of a new pod; both
count alike, which is all the difference a local process shows.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

DEFAULT_BACKOFF_LIMIT = 6  # the Job API's default


@dataclasses.dataclass
class JobPod:
    """One completion index of a Job, and its current pod."""

    job: ChildJob
    index: int
    hostname: str  # the ProcessGroup member: the pod's stable name on this machine
    attempt: int = 0  # pods created for this index before the current one
    phase: str = "Pending"  # Pending, Running, Succeeded, Failed
    started_main: bool = False
    ready: bool = False
    exit_codes: list[int] = dataclasses.field(default_factory=list)
    deleted_exit_code: int | None = None


@dataclasses.dataclass
class ChildJob:
    """One Job: `name`, its replicated job (None for a plain Job), its spec (the template's)."""

    name: str
    rjob: str | None
    job_index: int
    spec: dict[str, Any]
    pod_labels: dict[str, str]
    pod_annotations: dict[str, str]
    pods: dict[int, JobPod] = dataclasses.field(default_factory=dict)
    failures: int = 0
    status: str = "Active"  # Active, Complete, Failed
    reason: str = ""
    message: str = ""
    started: float = dataclasses.field(default_factory=time.monotonic)

    @property
    def completions(self) -> int:
        return int(self.spec.get("completions") or self.spec.get("parallelism") or 1)

    @property
    def backoff_limit(self) -> int:
        limit = self.spec.get("backoffLimit")
        return DEFAULT_BACKOFF_LIMIT if limit is None else int(limit)

    @property
    def ready(self) -> bool:
        """JobSet's count of a ready Job: ready + succeeded pods cover its pod count."""
        return sum(1 for p in self.pods.values() if p.ready or p.phase == "Succeeded") >= min(
            int(self.spec.get("parallelism") or 1), self.completions)

    def pod_action(self, code: int) -> str | None:
        """The podFailurePolicy action for a container exit `code` (None: no rule matched)."""
        for rule in (self.spec.get("podFailurePolicy") or {}).get("rules") or []:
            codes = rule.get("onExitCodes")
            if isinstance(codes, dict) and code != 0:
                values = codes.get("values") or []
                hit = code in values if codes.get("operator") == "In" else code not in values
                if hit:
                    return str(rule.get("action"))
        return None

    def on_exit(self, pod: JobPod, code: int) -> str:
        """Judge one pod's exit; returns "succeeded", "retry", "ignored" or "failed" (the Job;
        its reason and message are set)."""
        pod.exit_codes.append(code)
        if code == 0:
            pod.phase = "Succeeded"
            if all(self.pods.get(i) and self.pods[i].phase == "Succeeded"
                   for i in range(self.completions)):
                self.status, self.reason = "Complete", "Completed"
            return "succeeded"
        pod.phase = "Failed"
        action = self.pod_action(code)
        if action == "FailJob":
            return self.fail("PodFailurePolicy", f"Container exited with code {code}, matching "
                             "a FailJob rule of podFailurePolicy")
        if action == "Ignore":
            return "ignored"
        self.failures += 1
        if self.failures > self.backoff_limit:
            return self.fail("BackoffLimitExceeded", "Job has reached the specified backoff "
                             f"limit ({self.backoff_limit}); last exit code {code}")
        return "retry"

    def fail(self, reason: str, message: str) -> str:
        self.status, self.reason, self.message = "Failed", reason, message
        return "failed"

    def deadline_passed(self) -> bool:
        deadline = self.spec.get("activeDeadlineSeconds")
        return (self.status == "Active" and deadline is not None
                and time.monotonic() - self.started > float(deadline))


def jobset_labels(jobset: str, namespace: str, rjobs: list[dict[str, Any]], rj: Mapping[str, Any],
                  job_index: int, job_name: str, restarts: int) -> dict[str, str]:
    """The labels (also set as annotations) the JobSet controller puts on a Job's pods
    (jobset_controller.go labelAndAnnotateObject), which a pod's downward API reads."""
    replicas = [int(r.get("replicas", 1)) for r in rjobs]
    mine = [r["name"] for r in rjobs].index(rj["name"])
    return {
        "jobset.sigs.k8s.io/jobset-name": jobset,
        "jobset.sigs.k8s.io/replicatedjob-name": str(rj["name"]),
        "jobset.sigs.k8s.io/replicatedjob-replicas": str(replicas[mine]),
        "jobset.sigs.k8s.io/job-index": str(job_index),
        "jobset.sigs.k8s.io/job-global-index": str(sum(replicas[:mine]) + job_index),
        "jobset.sigs.k8s.io/global-replicas": str(sum(replicas)),
        "jobset.sigs.k8s.io/restart-attempt": str(restarts),
        "jobset.sigs.k8s.io/group-name": str(rj.get("groupName", "default")),
        "jobset.sigs.k8s.io/job-key": f"{namespace}-{job_name}",
    }


def plain_jobs(jobs: list[dict[str, Any]]) -> dict[str, Any]:
    """batch/v1 Jobs as the replicated jobs of a nameless JobSet, each one Job of its own (no
    JobSet labels or host names; a failed Job fails the run, the run ends when all complete)."""
    rjobs = [{"name": (j.get("metadata") or {}).get("name"), "replicas": 1,
              "template": {"metadata": j.get("metadata") or {}, "spec": j.get("spec") or {}}}
             for j in jobs]
    ns = ((jobs[0].get("metadata") or {}).get("namespace") if jobs else None) or "default"
    return {"metadata": {"name": "", "namespace": ns},
            "spec": {"replicatedJobs": rjobs, "successPolicy": {"operator": "All"}}}
