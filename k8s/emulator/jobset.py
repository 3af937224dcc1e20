"""Run a JobSet on this machine as the JobSet controller (v0.12.0) and the Job controller would.

One local process per pod (its init containers, then its container), under one
`strategies.supervisor.ProcessGroup`; the controllers' bookkeeping is here and in
k8s.emulator.jobs:

* **replicated jobs in order**, each created (its `replicas` Jobs, each Indexed with
  `completions` pods) once every `dependsOn` entry is reached, as `dependencyReachedStatus`
  decides: `Complete` when all that job's Jobs succeeded, `Ready` when each is ready (its ready
  and succeeded pods cover its pod count; a pod is ready once its container runs and, with a TCP
  readiness probe, its port accepts connections) or finished. A step held back says so;
* **pods as the controllers make them**: the JobSet labels and annotations
  (`jobset.sigs.k8s.io/jobset-name`, `replicatedjob-name`, `replicatedjob-replicas`,
  `job-index`, `job-global-index`, `global-replicas`, `restart-attempt`, ...) and the Job's
  `batch.kubernetes.io/job-completion-index`, which the container's downward-API env reads;
  host name `<jobset>-<rjob>-<jobIndex>-<podIndex>` (HOSTNAME) under the subdomain. Those names
  do not resolve here, and every pod wants its port on this one host: each pod's containerPorts
  get free local ports (kept for its life, as a DNS name is) and every pod gets
  `BATON_ADDRESS_MAP` (`<host>.<subdomain>:<port>` -> `127.0.0.1:<local port>`), which
  `baton task` applies to the TF_CONFIG it builds (strategies.jobset_cluster);
* **the Jobs' pod failure policies and backoff limits** (k8s.emulator.jobs), then the JobSet's
  `failurePolicy` when a Job fails: the first rule whose `onJobFailureReasons` and
  `targetReplicatedJobs` match decides (`FailJobSet`; `RestartJobSet`, which fails the JobSet
  with `ReachedMaxRestarts` once `maxRestarts` restarts are spent; `RestartJobSetAndIgnore
  MaxRestarts`); without a matching rule `RestartJobSet`, without a policy the JobSet fails. A
  restart deletes every pod and starts again from the first replicated job (`restart-attempt`
  one more);
* **the success policy** (`All` / `Any` of the target replicated jobs' Jobs complete), after
  which what still runs is deleted (SIGTERM, the grace period, SIGKILL), as the controller
  deletes the active Jobs of a finished JobSet.

Plain Jobs (the data and release Jobs beside a TFJob) run through the same code as replicated
jobs of their own, with no JobSet labels, host names or ports: `plain_jobs`.

SIGTERM or SIGINT deletes the JobSet: every pod is stopped and `run()` returns 143 or 130.
Logs are `WORK/logs/<pod>.log`, the state `WORK/status.json`.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import socket
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

from baton.k8s import jobset_webhook
from baton.k8s.emulator.jobs import ChildJob, JobPod, jobset_labels
from baton.k8s.emulator.jobs import plain_jobs as plain_jobs
from baton.k8s.emulator.pods import (
    EmulationError,
    InitWatch,
    controller_exit,
    deleted_on_signals,
    find_configmaps,
    plan_steps,
)
from baton.strategies.supervisor import Command, ProcessGroup, exit_code

ATTEMPT_ENV = "BATON_ATTEMPT"
ADDRESS_MAP_ENV = "BATON_ADDRESS_MAP"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


@dataclasses.dataclass
class JobSetOptions:
    """How to run it here (see k8s.emulator.tfjob.EmulatorOptions for the same fields on a TFJob)."""

    volume_dir: Path
    work_dir: Path
    manifests_dir: Path | None = None
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    grace_seconds: float = 10.0
    poll_seconds: float = 0.1
    stream: TextIO | None = None
    on_event: Callable[[str, str, dict], None] | None = None
    label: str = "JobSet"  # how the console names the object (TrainJob: what Trainer made)


class JobSetEmulator:
    """One JobSet's local run; `run()` returns 0 (Completed), 1 (Failed), 143/130 (deleted)."""

    def __init__(self, doc: Mapping[str, Any], options: JobSetOptions, plain: bool = False) -> None:
        from baton.strategies.inventory import TASKS_ON_NODE_ENV

        self.opts = options
        self.plain = plain
        self.js = jobset_webhook.default(dict(doc)) if not plain else dict(doc)
        meta = self.js.get("metadata") or {}
        self.name, self.namespace = str(meta.get("name") or ""), meta.get("namespace") or "default"
        spec = self.js["spec"]
        self.rjobs: list[dict[str, Any]] = list(spec.get("replicatedJobs") or [])
        net = spec.get("network") or {}
        self.dns = not plain and net.get("enableDNSHostnames", True)
        self.subdomain = net.get("subdomain") or self.name
        self.success = spec.get("successPolicy") or {"operator": "All"}
        self.failure = spec.get("failurePolicy")
        self.restarts = self.counted_restarts = 0
        self.jobs: dict[str, ChildJob] = {}
        self.created: set[str] = set()
        self.attempts: dict[str, int] = {}  # host name -> pods created for it (all restarts)
        self.waiting_said: dict[str, str] = {}
        self.init_watch = InitWatch()  # what a pod's init container waits for, on the console
        self.conditions: list[dict[str, str]] = []
        self.signalled: int | None = None
        self.result = ""
        self.started = time.monotonic()
        self.group = ProcessGroup(grace=options.grace_seconds, on_start=self._on_start,
                                  exec_failure_exit=127, die_with_parent=True)
        self.configmaps = find_configmaps(options.manifests_dir)
        self.ports = self._ports()
        train_pods = sum(1 for h in self.ports if self.ports[h])
        self.env = {TASKS_ON_NODE_ENV: str(max(1, train_pods)), **options.env}
        self.by_member: dict[str, JobPod] = {}
        self.steps: dict[str, int] = {}  # member -> its containers (init ones first)

    # ------------------------------------------------------------------ names and ports
    def _job_name(self, rj: Mapping[str, Any], job_index: int) -> str:
        return str(rj["name"]) if self.plain else f"{self.name}-{rj['name']}-{job_index}"

    def _pod_shape(self, rj: Mapping[str, Any]) -> tuple[int, int]:
        job = (rj.get("template") or {}).get("spec") or {}
        return int(rj.get("replicas", 1)), int(job.get("completions") or job.get("parallelism") or 1)

    def _ports(self) -> dict[str, dict[int, int]]:
        """host name -> {containerPort: local port} for every pod of the JobSet."""
        from baton.strategies.cluster import free_ports

        wanted: list[tuple[str, int]] = []
        for rj in self.rjobs:
            replicas, pods = self._pod_shape(rj)
            pod = _pod_spec(rj)
            declared = [p["containerPort"] for c in pod.get("containers") or []
                        for p in c.get("ports") or [] if "containerPort" in p]
            for j in range(replicas):
                for i in range(pods):
                    host = f"{self._job_name(rj, j)}-{i}"
                    wanted += [(host, port) for port in declared] or [(host, 0)]
        real = [w for w in wanted if w[1]]
        local = iter(free_ports(len(real)) if real else [])
        out: dict[str, dict[int, int]] = {}
        for host, port in wanted:
            out.setdefault(host, {})
            if port:
                out[host][port] = next(local)
        return out

    def address_map(self) -> dict[str, str]:
        return {f"{host}.{self.subdomain}:{port}": f"127.0.0.1:{local}"
                for host, ports in self.ports.items() for port, local in ports.items()}

    # ------------------------------------------------------------------ reporting
    def _say(self, text: str) -> None:
        if self.opts.stream is not None:
            self.opts.stream.write(f"[{time.monotonic() - self.started:6.1f}s] {text}\n")
            self.opts.stream.flush()

    def _event(self, kind: str, name: str, **details: Any) -> None:
        if self.opts.on_event:
            self.opts.on_event(kind, name, details)

    def condition(self, ctype: str, reason: str, message: str) -> None:
        self.conditions.append({"type": ctype, "status": "True", "reason": reason,
                                "message": message})
        self._say(f"{self.opts.label} {self.name or 'Jobs'}: {ctype} ({reason}): {message}")
        self._event("condition", "", type=ctype, reason=reason, message=message)
        self._write_status()

    def status(self) -> dict[str, Any]:
        rj_status = []
        for rj in self.rjobs:
            jobs = [j for j in self.jobs.values() if j.rjob == rj["name"]]
            rj_status.append({"name": rj["name"], "ready": sum(j.ready and j.status == "Active" for j in jobs),
                              "succeeded": sum(j.status == "Complete" for j in jobs),
                              "failed": sum(j.status == "Failed" for j in jobs),
                              "active": sum(j.status == "Active" for j in jobs)})
        pods = {}
        for j in self.jobs.values():
            for p in j.pods.values():
                pods[p.hostname] = {"phase": p.phase, "attempt": p.attempt, "exitCodes": p.exit_codes,
                                    **({"deletedExitCode": p.deleted_exit_code}
                                       if p.deleted_exit_code is not None else {})}
        return {"conditions": self.conditions, "restarts": self.restarts,
                "replicatedJobsStatus": rj_status,
                "jobs": {n: {"status": j.status, "reason": j.reason, "failures": j.failures}
                         for n, j in self.jobs.items()}, "pods": pods}

    def _write_status(self) -> None:
        self.opts.work_dir.mkdir(parents=True, exist_ok=True)
        (self.opts.work_dir / "status.json").write_text(json.dumps(self.status(), indent=2))

    # ------------------------------------------------------------------ pods
    def _labels(self, rj: Mapping[str, Any], job_index: int) -> dict[str, str]:
        if self.plain:
            return {}
        return jobset_labels(self.name, self.namespace, self.rjobs, rj, job_index,
                             self._job_name(rj, job_index), self.restarts)

    def _create_jobs(self, rj: Mapping[str, Any]) -> None:
        replicas, pods = self._pod_shape(rj)
        tmpl = ((rj.get("template") or {}).get("spec") or {}).get("template") or {}
        for j in range(replicas):
            name = self._job_name(rj, j)
            extra = self._labels(rj, j)
            job = ChildJob(name, str(rj["name"]), j, dict((rj.get("template") or {}).get("spec") or {}),
                           {**((tmpl.get("metadata") or {}).get("labels") or {}), **extra},
                           {**((tmpl.get("metadata") or {}).get("annotations") or {}), **extra})
            self.jobs[name] = job
            self._say(f"step {rj['name']}: Job {name} created ({pods} pod{'s' * (pods > 1)})")
            self._event("job", name, status="Created")
            for i in range(pods):
                job.pods[i] = JobPod(job, i, f"{name}-{i}")
                self._start(job.pods[i])

    def _start(self, pod: JobPod) -> None:
        job = pod.job
        rj = next(r for r in self.rjobs if r["name"] == job.rjob) if job.rjob else self.rjobs[0]
        podspec = _pod_spec(rj)
        regular = podspec.get("containers") or []
        if len(regular) != 1:
            raise EmulationError(f"pod {pod.hostname}: the emulator runs one container per pod "
                                 f"(and init containers). Received: {[c.get('name') for c in regular]}")
        pod.attempt = self.attempts.get(pod.hostname, 0)
        self.attempts[pod.hostname] = pod.attempt + 1
        annotations = {**job.pod_annotations, COMPLETION_INDEX: str(pod.index)}
        labels = {**job.pod_labels, COMPLETION_INDEX: str(pod.index)}
        main_env = {ATTEMPT_ENV: str(pod.attempt), **self.env}
        if self.dns:
            main_env[ADDRESS_MAP_ENV] = json.dumps(self.address_map(), separators=(",", ":"))
        containers = [(c, False) for c in podspec.get("initContainers") or []] + [(regular[0], True)]
        steps = plan_steps(podspec, containers, pod.hostname, self.namespace, self.opts.volume_dir,
                           self.opts.work_dir, self.configmaps, extra_env=main_env,
                           meta={"labels": labels, "annotations": annotations})
        log = self.opts.work_dir / "logs" / f"{pod.hostname}.log"
        commands = [Command(s.argv, {**s.env, "JOB_COMPLETION_INDEX": str(pod.index)}, s.cwd,
                            log=log, label=s.name,
                            header=f"===== {pod.hostname} container {s.name} (attempt {pod.attempt}) =====\n")
                    for s in steps]
        pod.phase, pod.started_main, pod.ready = "Pending", False, False
        self.by_member[pod.hostname] = pod
        self.steps[pod.hostname] = len(commands)
        self.group.start(pod.hostname, commands,
                         grace=float(podspec.get("terminationGracePeriodSeconds", 30)))

    def _on_start(self, name: str, index: int, command: Command, pid: int) -> None:
        pod = self.by_member[name]
        pod.phase = "Running"
        main = index == self.steps[name] - 1
        pod.started_main = main
        self._event("started", name, pid=pid, container=command.label, attempt=pod.attempt,
                    main=main)
        if main:
            self._say(f"pod {name}: started {command.label} (pid {pid}, attempt {pod.attempt})")
        else:
            self._say(f"pod {name}: init container {command.label} (pid {pid})")

    def _probe(self, pod: JobPod) -> None:
        """Readiness: the main container runs and, with a TCP probe, its port accepts."""
        if pod.ready or not pod.started_main or pod.phase != "Running":
            return
        rj = next(r for r in self.rjobs if r["name"] == pod.job.rjob) if pod.job.rjob else self.rjobs[0]
        container = (_pod_spec(rj).get("containers") or [{}])[0]
        probe = (container.get("readinessProbe") or {}).get("tcpSocket")
        if probe:
            port = probe.get("port")
            if isinstance(port, str):
                port = next((p["containerPort"] for p in container.get("ports") or []
                             if p.get("name") == port), None)
            local = self.ports.get(pod.hostname, {}).get(port) if port else None
            if local is None:
                return
            try:
                socket.create_connection(("127.0.0.1", local), timeout=0.2).close()
            except OSError:
                return
        pod.ready = True
        self._event("ready", pod.hostname)
        if probe:  # a pod without a probe is Ready as it starts: nothing worth a line
            self._say(f"pod {pod.hostname}: Ready (its port {probe.get('port')} accepts connections)")

    def _relay_init(self, pod: JobPod) -> None:
        """Say what a pod held by an init container waits for (InitWatch)."""
        if pod.phase == "Running" and not pod.started_main:
            line = self.init_watch.news(pod.hostname, self.opts.work_dir / "logs" /
                                        f"{pod.hostname}.log", time.monotonic())
            if line:
                self._say(f"pod {pod.hostname}: {line}")

    # ------------------------------------------------------------------ controller
    def _reached(self, rj: Mapping[str, Any]) -> str | None:
        """None when every dependsOn entry of `rj` is reached, else what it waits for."""
        for dep in rj.get("dependsOn") or []:
            jobs = [j for j in self.jobs.values() if j.rjob == dep["name"]]
            replicas = int(next(r for r in self.rjobs if r["name"] == dep["name"]).get("replicas", 1))
            if dep["status"] == "Complete":
                done = sum(j.status == "Complete" for j in jobs)
            else:
                done = sum(j.status in ("Complete", "Failed") or j.ready for j in jobs)
            if done != replicas or len(jobs) != replicas:
                return f"{dep['name']} {dep['status']}"
        return None

    def _reconcile(self) -> None:
        for rj in self.rjobs:
            name = str(rj["name"])
            if name in self.created:
                continue
            waiting = self._reached(rj)
            if waiting:
                if self.waiting_said.get(name) != waiting:
                    self.waiting_said[name] = waiting
                    self._say(f"step {name}: waiting for {waiting} (dependsOn)")
                continue
            self.created.add(name)
            self._create_jobs(rj)

    def _handle(self, pod: JobPod, code: int) -> None:
        job = pod.job
        verdict = job.on_exit(pod, code)
        self._event("exited", pod.hostname, code=code, verdict=verdict)
        self._say(f"pod {pod.hostname}: exited {code} ({verdict}"
                  + (f": Job {job.name} {job.reason}" if verdict == "failed" else "") + ")")
        if verdict in ("retry", "ignored"):
            self._start(pod)
        elif verdict == "failed":
            self._job_failed(job)
        elif job.status == "Complete":
            self._say(f"step {job.rjob}: Job {job.name} Complete")
            self._event("job", job.name, status="Complete")
        self._write_status()

    def _stop(self, pods: list[JobPod]) -> None:
        names = [p.hostname for p in pods if self.group.running(p.hostname)]
        if not names:
            return
        for name, rc in self.group.stop(names, grace=self.opts.grace_seconds).items():
            self.by_member[name].deleted_exit_code = exit_code(-9 if rc is None else rc)

    def _job_failed(self, job: ChildJob) -> None:
        self._event("job", job.name, status="Failed", reason=job.reason)
        self._stop([p for p in job.pods.values()])
        if self.plain or self.failure is None:
            self.result = "Failed"
            self.condition("Failed", "FailedJobs", f"job {job.name} failed: {job.reason}: {job.message}")
            return
        rule = next((r for r in self.failure.get("rules") or []
                     if (not r.get("onJobFailureReasons") or job.reason in r["onJobFailureReasons"])
                     and (not r.get("targetReplicatedJobs") or job.rjob in r["targetReplicatedJobs"])),
                    None)
        action = rule["action"] if rule else "RestartJobSet"
        why = f"job {job.name} failed ({job.reason}: {job.message})" + (
            f", failure policy rule {rule['name']!r}" if rule else ", no failure policy rule matched")
        if action == "FailJobSet":
            self.result = "Failed"
            self.condition("Failed", "FailJobSetFailurePolicyAction", why)
        elif action == "RestartJobSet" and self.counted_restarts >= int(self.failure.get("maxRestarts", 0)):
            self.result = "Failed"
            self.condition("Failed", "ReachedMaxRestarts", f"{why}; maxRestarts "
                           f"({self.failure.get('maxRestarts', 0)}) reached")
        else:
            self._restart(why, counted=action == "RestartJobSet")

    def _restart(self, why: str, counted: bool) -> None:
        self._stop([p for j in self.jobs.values() for p in j.pods.values()])
        self.restarts += 1
        self.counted_restarts += int(counted)
        self.condition("RestartingJobSet", "FailurePolicy", f"{why}; restart {self.restarts}: "
                       "every Job is created again")
        self.jobs.clear()
        self.created.clear()
        self.waiting_said.clear()

    def _succeeded(self) -> bool:
        targets = self.success.get("targetReplicatedJobs") or [r["name"] for r in self.rjobs]
        done = [j for j in self.jobs.values() if j.rjob in targets and j.status == "Complete"]
        if self.success.get("operator") == "Any":
            return bool(done)
        return len(done) == sum(int(r.get("replicas", 1)) for r in self.rjobs if r["name"] in targets)

    def run(self) -> int:
        with deleted_on_signals(self._on_signal):
            try:
                self.result = self._loop()
            finally:
                left = [p for j in self.jobs.values() for p in j.pods.values()
                        if self.group.running(p.hostname)]
                if left:
                    self._say(f"deleting what still runs: {', '.join(p.hostname for p in left)}")
                self._stop(left)
                self.group.close(grace=self.opts.grace_seconds)
                self._write_status()
        return controller_exit(self.result, self.signalled)

    def _on_signal(self, signum: int) -> None:
        if self.signalled is None:
            self.signalled = signum

    def _loop(self) -> str:
        self.opts.work_dir.mkdir(parents=True, exist_ok=True)
        self.opts.volume_dir.mkdir(parents=True, exist_ok=True)
        if self.dns and any(self.ports.values()):
            self._say("host names -> local addresses: " + ", ".join(
                f"{k} -> {v}" for k, v in self.address_map().items()))
        while True:
            if self.signalled is not None:
                self._say(f"{signal.Signals(self.signalled).name}: the {self.opts.label} is "
                          "deleted; deleting its pods")
                self._event("deleted", "", signal=signal.Signals(self.signalled).name)
                return "Deleted"
            self._reconcile()
            if self.result:
                return self.result
            for ended in self.group.wait(self.opts.poll_seconds):
                pod = self.by_member[ended.name]
                if pod.job.status == "Active":
                    self._handle(pod, ended.code)
                if self.result:
                    return self.result
            for job in list(self.jobs.values()):
                if job.deadline_passed():
                    job.fail("DeadlineExceeded", "Job was active longer than specified deadline")
                    self._job_failed(job)
                    if self.result:
                        return self.result
                for pod in job.pods.values():
                    self._probe(pod)
                    self._relay_init(pod)
            if self._succeeded():
                self.condition("Completed", "AllJobsCompleted", "jobset completed successfully")
                return "Succeeded"


def _pod_spec(rj: Mapping[str, Any]) -> dict[str, Any]:
    return (((rj.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
