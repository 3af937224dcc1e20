"""Run Deployments, Services and Jobs on this machine: the Flower federation `baton k8s` writes.

The TFJob emulator (k8s.emulator.tfjob) plays the training operator; this plays the parts of
Kubernetes a federated stage's manifests use, so the exact files can be rehearsed on one
machine before a cluster sees them:

* a **Deployment** (the SuperLink, one SuperNode per client) is one pod, `<name>-0`: its init
  containers, then its first container, restarted whatever its exit (restartPolicy Always) up to
  `restarts` times, after which the run fails rather than crash-loop forever;
* a **Job** (the data Job, the federated run Job, the release Job) is one pod re-created on
  failure up to its `backoffLimit` (the operator's `ReplicaRestart` policy), within its
  `activeDeadlineSeconds`; the run ends when every Job has succeeded or one has failed;
* a **Service** is its DNS names (`name`, `name.ns`, `name.ns.svc`, `name.ns.svc.cluster.local`)
  with a port, written as HOST:PORT anywhere in a command, an argument or an env value, mapped to
  `127.0.0.1:<the local port of the pod its selector and targetPort pick>`;
* a pod's **containerPorts** each get a free local port (bound to 0 and read back; pods share
  this machine's network, so no two may keep 9091): an argument equal to the port, `--x=PORT`
  or `HOST:PORT` becomes the local one, and a bind address `0.0.0.0` becomes `127.0.0.1`;
* **volumes** as for the TFJob (emulator.pods): a claim is a local directory, the artifacts
  claim `volume_dir`, a claim named in `volumes` its own directory (a real silo's data), a
  `subPath` inside it. A mount the manifest makes read-only is checked: a file created, changed
  or removed under it while its pod ran fails the run, naming the pod, the mount and the files.
  A **Secret** (the federation's keys and certificates, k8s.federated.build_secrets) is found
  beside the manifests and materialised like a ConfigMap (its `data` base64-decoded, its
  `items` at their paths), in a directory of its pod's own, files mode 0600.

The processes are one `strategies.supervisor.ProcessGroup` (a member per pod); SIGTERM or SIGINT
deletes everything, as deleting the objects would: every pod is stopped (SIGTERM, the grace
period, SIGKILL) and `run()` returns 143 or 130. So does the end of the run, success or failure:
the Deployments, which never finish by themselves, are stopped when the Jobs are done.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from baton.k8s.emulator.pods import (
    EmulationError,
    Step,
    controller_exit,
    deleted_on_signals,
    find_configmaps,
    find_documents,
    mount_dirs,
    plan_steps,
    read_only_mounts,
)
from baton.strategies.restart_policies import Action, ReplicaRestart
from baton.strategies.supervisor import Command, Exit, ProcessGroup, exit_code

KINDS = ("Deployment", "Job", "Service")
SKIPPED_COMPONENTS = ("serving",)  # tensorflow_model_server: `baton serve` stands in for it
_BIND_ALL = ("0.0.0.0", "[::]", "::")


@dataclasses.dataclass
class FederationOptions:
    """How to map the objects onto this machine.

    Attributes:
        volume_dir: the directory of every claim not in `volumes` (the artifacts claim).
        work_dir: logs (`logs/<pod>.log`), `status.json`, `addresses.json`, pod directories.
        volumes: claim name -> local directory (a real silo's examples artifact).
        manifests_dir: where mounted ConfigMaps are found.
        restarts: restarts of one Deployment pod before the run fails (a crash loop).
        grace_seconds: cap on terminationGracePeriodSeconds when stopping pods.
    """

    volume_dir: Path
    work_dir: Path
    volumes: Mapping[str, Path] = dataclasses.field(default_factory=dict)
    manifests_dir: Path | None = None
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    restarts: int = 3
    grace_seconds: float = 10.0
    poll_seconds: float = 0.2
    stream: TextIO | None = None


@dataclasses.dataclass
class _Pod:
    kind: str  # Deployment or Job
    object: str  # the Deployment's or Job's name
    namespace: str
    name: str  # the pod's: <object>-0
    spec: dict[str, Any]  # the pod template's spec
    labels: dict[str, str]
    ports: dict[int, int]  # containerPort -> local port
    steps: tuple[Step, ...] = ()
    phase: str = "Pending"
    restarts: int = 0
    exit_codes: list[int] = dataclasses.field(default_factory=list)
    read_only: dict[str, Path] = dataclasses.field(default_factory=dict)  # mountPath -> local
    snapshot: dict[str, dict[str, tuple[int, int]]] = dataclasses.field(default_factory=dict)


def select(docs: list[dict]) -> list[dict]:
    """The documents this emulator runs: Deployments, Jobs and Services, less the serving ones."""
    return [d for d in docs if d.get("kind") in KINDS and (d.get("metadata") or {}).get(
        "labels", {}).get("app.kubernetes.io/component") not in SKIPPED_COMPONENTS]


class FederationEmulator:
    """The objects' local run; `run()` returns 0 when every Job succeeded, 1 when one failed
    (or a Deployment crash-looped, or a read-only mount changed), 143/130 on SIGTERM/SIGINT."""

    def __init__(self, docs: list[dict], options: FederationOptions) -> None:
        from baton.strategies.cluster import free_ports

        self.opts = options
        self.services = [d for d in docs if d["kind"] == "Service"]
        workloads = [d for d in docs if d["kind"] in ("Deployment", "Job")]
        if not any(d["kind"] == "Job" for d in workloads):
            raise EmulationError("no Job among the manifests: the run ends when its Jobs do "
                                 "(give the run Job, e.g. OUT/federated-run-job.yaml)")
        self.pods: dict[str, _Pod] = {}
        for d in workloads:
            tmpl = d["spec"]["template"]
            ports = [p["containerPort"] for c in tmpl["spec"]["containers"][:1]
                     for p in c.get("ports") or []]
            name = f"{d['metadata']['name']}-0"
            self.pods[name] = _Pod(d["kind"], d["metadata"]["name"],
                                   d["metadata"].get("namespace") or "default", name, tmpl["spec"],
                                   dict((tmpl.get("metadata") or {}).get("labels") or {}),
                                   dict(zip(ports, free_ports(len(ports)), strict=True)))
        self.jobs = {d["metadata"]["name"]: d for d in workloads if d["kind"] == "Job"}
        self.addresses = self._service_addresses()
        self.group = ProcessGroup(grace=options.grace_seconds, on_start=self._started,
                                  exec_failure_exit=127, die_with_parent=True)
        self.backoff = {pod.name: ReplicaRestart(
            {pod.name: "OnFailure"}, self.jobs[pod.object]["spec"].get("backoffLimit", 6))
            for pod in self.pods.values() if pod.kind == "Job"}
        self.signalled: int | None = None
        self.started = time.monotonic()
        self.problems: list[str] = []

    # ------------------------------------------------------------------ addresses
    def _service_addresses(self) -> dict[str, str]:
        """`<service DNS name>:<port>` -> `127.0.0.1:<local port>`, every form of the name."""
        out: dict[str, str] = {}
        for svc in self.services:
            meta, spec = svc["metadata"], svc["spec"]
            ns = meta.get("namespace") or "default"
            selector = spec.get("selector") or {}
            pods = [p for p in self.pods.values() if p.kind == "Deployment"
                    and all(p.labels.get(k) == v for k, v in selector.items())]
            if not pods:
                raise EmulationError(f"Service {meta['name']}: its selector {selector} matches "
                                     "no Deployment among the manifests")
            pod = pods[0]
            named = {p["name"]: p["containerPort"] for c in pod.spec["containers"][:1]
                     for p in c.get("ports") or [] if "name" in p}
            for port in spec.get("ports") or []:
                target = port.get("targetPort", port["port"])
                cport = named.get(target) if isinstance(target, str) else int(target)
                if cport not in pod.ports:
                    raise EmulationError(f"Service {meta['name']}: targetPort {target!r} is not "
                                         f"a containerPort of {pod.object}")
                for host in (f"{meta['name']}.{ns}.svc.cluster.local", f"{meta['name']}.{ns}.svc",
                             f"{meta['name']}.{ns}", meta["name"]):
                    out[f"{host}:{port['port']}"] = f"127.0.0.1:{pod.ports[cport]}"
        return out

    def _translate(self, pod: _Pod, container: Mapping, text: str) -> str:
        """A Service address, one of the pod's own ports or a bind-all address, made local."""
        # the replacements are addresses and port numbers: no backslash for re.sub to expand
        for address in sorted(self.addresses, key=len, reverse=True):
            text = re.sub(r"(?<![\w.-])" + re.escape(address) + r"(?!\d)",
                          self.addresses[address], text)
        own = {p["containerPort"] for p in container.get("ports") or []}
        if text in _BIND_ALL:
            return "127.0.0.1"
        for cport in own & set(pod.ports):
            local = str(pod.ports[cport])
            if text == str(cport):
                return local
            text = re.sub(r"^(--?[\w-]+=)" + str(cport) + "$", r"\g<1>" + local, text)
            text = re.sub(r"(?:(?<![\w.-])(?:0\.0\.0\.0|127\.0\.0\.1|localhost)|\[::\]|^):"
                          + str(cport) + r"(?!\d)", f"127.0.0.1:{local}", text)
        return text

    # ------------------------------------------------------------------ setup
    def _plan(self) -> None:
        configmaps = find_configmaps(self.opts.manifests_dir)
        secrets = find_secrets(self.opts.manifests_dir)
        for pod in self.pods.values():
            pod.spec = _secrets_as_configmaps(pod, secrets, configmaps)
            containers = [(c, False) for c in pod.spec.get("initContainers") or []]
            main = pod.spec["containers"][0]
            containers.append((main, True))
            pod.steps = plan_steps(
                pod.spec, containers, pod.name, pod.namespace, self.opts.volume_dir, self.opts.work_dir,
                configmaps, extra_env=self.opts.env, claim_dirs=self.opts.volumes,
                translate=functools.partial(self._translate, pod))
            dirs = {k: Path(v) for k, v in mount_dirs(
                pod.spec, main, pod.name, self.opts.volume_dir, self.opts.work_dir, configmaps,
                self.opts.volumes).items()}
            pod.read_only = {m: dirs[m] for m in read_only_mounts(pod.spec, main) if m in dirs}
        for secret_dir in (self.opts.work_dir / "configmaps").glob("secret-*"):
            secret_dir.chmod(0o700)  # a Secret's files: this user's only
            for f in secret_dir.rglob("*"):
                f.chmod(0o700 if f.is_dir() else 0o600)
        mapping = {"services": self.addresses,
                   "pods": {p.name: {str(k): v for k, v in p.ports.items()}
                            for p in self.pods.values()}}
        (self.opts.work_dir / "addresses.json").write_text(json.dumps(mapping, indent=2))
        for address, local in self.addresses.items():
            if address.count(".") == 2:  # name.ns.svc:port, the form the manifests use
                self._say(f"Service {address} -> {local}")

    # ------------------------------------------------------------------ reporting
    def _say(self, text: str) -> None:
        if self.opts.stream is not None:
            self.opts.stream.write(f"[{time.monotonic() - self.started:6.1f}s] {text}\n")
            self.opts.stream.flush()

    def status(self) -> dict[str, Any]:
        return {"pods": {p.name: {"kind": p.kind, "phase": p.phase, "restarts": p.restarts,
                                  "exitCodes": p.exit_codes} for p in self.pods.values()},
                "problems": self.problems}

    def _write_status(self) -> None:
        (self.opts.work_dir / "status.json").write_text(json.dumps(self.status(), indent=2))

    def _tail(self, pod: _Pod, lines: int = 15) -> None:
        path = self.opts.work_dir / "logs" / f"{pod.name}.log"
        if path.exists():
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            self._say(f"{pod.name}: last log lines ({path}):\n    " + "\n    ".join(tail))

    # ------------------------------------------------------------------ processes
    def _start(self, pod: _Pod) -> None:
        log = self.opts.work_dir / "logs" / f"{pod.name}.log"
        commands = [Command(s.argv, s.env, s.cwd, log=log, label=s.name,
                            header=f"===== {pod.name} container {s.name} (attempt {pod.restarts}) =====\n")
                    for s in pod.steps]
        grace = float(pod.spec.get("terminationGracePeriodSeconds", 30))
        self.group.start(pod.name, commands, grace=grace)

    def _started(self, name: str, index: int, command: Command, pid: int) -> None:
        pod = self.pods[name]
        pod.phase = "Running"
        if index == len(pod.steps) - 1:  # the main container: what its read-only mounts hold
            pod.snapshot = {m: _files(d) for m, d in pod.read_only.items()}
            self._say(f"{name}: started pid {pid} (attempt {pod.restarts})")

    def _check_read_only(self, pod: _Pod) -> None:
        for mount, before in pod.snapshot.items():
            after = _files(pod.read_only[mount])
            changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
            if changed:
                self.problems.append(
                    f"{pod.name}: {mount} is read-only in its manifest, and {len(changed)} file(s) "
                    f"under it changed while the pod ran: {', '.join(changed[:5])}")
        pod.snapshot = {}

    def _handle(self, ended: Exit) -> str | None:
        """One pod's exit; "Failed" when the run fails."""
        pod = self.pods[ended.name]
        pod.exit_codes.append(ended.code)
        self._check_read_only(pod)
        if pod.kind == "Job":
            verdict = self.backoff[pod.name].decide(self.group, ended)
            if ended.code == 0:
                pod.phase = "Succeeded"
                self._say(f"{pod.name}: exited 0; Job {pod.object} complete")
                return None
            self._say(f"{pod.name}: {verdict.reason}")
            if verdict.action is Action.RESTART:
                pod.restarts += 1
                self._start(pod)
                return None
            pod.phase = "Failed"
            self._tail(pod)
            limit = self.jobs[pod.object]["spec"].get("backoffLimit", 6)
            self.problems.append(f"Job {pod.object} failed (exit code {ended.code}"
                                 + (f", backoffLimit {limit} reached)" if verdict.exhausted else ")"))
            return "Failed"
        # a Deployment's pod never ends by itself: restartPolicy Always, whatever the code
        self._say(f"{pod.name}: exited {ended.code} (Deployment {pod.object}: restartPolicy Always)")
        if pod.restarts >= self.opts.restarts:
            pod.phase = "Failed"
            self._tail(pod)
            self.problems.append(f"Deployment {pod.object} is crash-looping: its pod exited "
                                 f"{pod.restarts + 1} times (codes {pod.exit_codes})")
            return "Failed"
        pod.restarts += 1
        self._start(pod)
        return None

    # ------------------------------------------------------------------ controller
    def run(self) -> int:
        with deleted_on_signals(self._on_signal):
            result = self._run()
        return controller_exit(result, self.signalled, ok=not self.problems)

    def _on_signal(self, signum: int) -> None:
        if self.signalled is None:
            self.signalled = signum

    def _run(self) -> str:
        self.opts.work_dir.mkdir(parents=True, exist_ok=True)
        self.opts.volume_dir.mkdir(parents=True, exist_ok=True)
        self.started = time.monotonic()
        self._plan()
        result = "Failed"
        try:
            for pod in self.pods.values():  # apply order: the Deployments' pods, then the Jobs'
                if self.signalled is None:
                    self._start(pod)
            result = self._loop()
        finally:
            stopped = self.group.close(grace=self.opts.grace_seconds)
            for name, rc in stopped.items():
                pod = self.pods[name]
                self._check_read_only(pod)
                code = exit_code(-9 if rc is None else rc)
                pod.phase = "Deleted" if pod.phase == "Running" else pod.phase
                self._say(f"{name}: deleted (exit code {code})")
            for problem in self.problems:
                self._say(f"problem: {problem}")
            self._write_status()
        return result

    def _loop(self) -> str:
        exits = self.group.poll()
        while True:
            if self.signalled is not None:
                self._say(f"{signal.Signals(self.signalled).name}: the objects are deleted; "
                          "deleting their pods")
                return "Deleted"
            for ended in exits:
                if self._handle(ended) == "Failed":
                    return "Failed"
            jobs = [p for p in self.pods.values() if p.kind == "Job"]
            if all(p.phase == "Succeeded" for p in jobs):
                self._say(f"every Job succeeded ({', '.join(p.object for p in jobs)}); deleting "
                          "the Deployments' pods")
                return "Succeeded"
            elapsed = time.monotonic() - self.started
            for p in jobs:
                limit = self.jobs[p.object]["spec"].get("activeDeadlineSeconds")
                if p.phase != "Succeeded" and limit and elapsed > limit:
                    self.problems.append(f"Job {p.object} exceeded activeDeadlineSeconds={limit}")
                    return "Failed"
            exits = self.group.wait(self.opts.poll_seconds)


def find_secrets(manifests_dir: Path | None) -> dict[str, dict[str, str]]:
    """Secret name -> its data (decoded), from every YAML file in `manifests_dir`."""
    import base64

    out: dict[str, dict[str, str]] = {}
    for d in find_documents(manifests_dir, "Secret"):
        data = {k: base64.b64decode(v).decode() for k, v in (d.get("data") or {}).items()}
        data.update({k: str(v) for k, v in (d.get("stringData") or {}).items()})
        out[d["metadata"]["name"]] = data
    return out


def _secrets_as_configmaps(pod: _Pod, secrets: Mapping[str, Mapping[str, str]],
                           configmaps: dict[str, dict[str, str]]) -> dict[str, Any]:
    """`pod`'s spec with each Secret volume as a ConfigMap volume of its own (the kubelet
    projects both the same way; a per-pod name keeps one pod's keys out of another's files)."""
    volumes = []
    for vol in pod.spec.get("volumes") or []:
        if "secret" not in vol:
            volumes.append(vol)
            continue
        name = vol["secret"]["secretName"]
        if name not in secrets:
            raise EmulationError(f"pod {pod.name} mounts Secret {name!r}, which is not in the "
                                 "manifests beside it (pass the directory `baton k8s` wrote)")
        local = f"secret-{pod.name}-{name}"
        configmaps[local] = dict(secrets[name])
        source = {"name": local, **({"items": vol["secret"]["items"]}
                                    if vol["secret"].get("items") else {})}
        volumes.append({"name": vol["name"], "configMap": source})
    return {**pod.spec, "volumes": volumes}


def _files(root: Path) -> dict[str, tuple[int, int]]:
    """relative path -> (mtime_ns, size) of every file under `root` (bytecode caches aside)."""
    out = {}
    if root.is_dir():
        for f in root.rglob("*"):
            if "__pycache__" in f.parts or not f.is_file():
                continue
            st = f.stat()
            out[f.relative_to(root).as_posix()] = (st.st_mtime_ns, st.st_size)
    return out


def emulate_documents(docs: list[dict], options: FederationOptions) -> int:
    """Validate the Deployments, Services and Jobs among `docs` and run them (see the module)."""
    from baton.k8s.validate import check

    chosen = select(docs)
    check(chosen)
    if options.stream is None:
        options.stream = sys.stdout
    return FederationEmulator(chosen, options).run()
