"""`baton k8s emulate DIR`: run what `kubectl apply -k DIR` would, on this machine, in order.

The directory `baton k8s` wrote is read as kustomize reads it (its `kustomization.yaml`'s
`resources`, in order, its `namespace` set on every object), validated like `baton k8s
validate DIR` (an invalid directory is exit 2 before anything runs), and then each controller's
part is played:

* Namespace, NetworkPolicies: noted (a local run enforces neither: every pod runs as you, on
  one network); PersistentVolumeClaims: the volume directory; ConfigMaps: materialised where
  pods mount them;
* the pipeline, by target: a **JobSet** (k8s.emulator.jobset: data, training, release in their
  `dependsOn` order); a **TrainJob**, turned into the JobSet Trainer's controller would create
  from its ClusterTrainingRuntime (k8s.trainer_controller), then run the same way; a **TFJob**
  between the **data and release Jobs**: on a cluster all three start at once and the TFJob's
  and release Job's `wait-for-inputs` init containers hold them until the artifacts they read
  exist; here the data Job runs first, then the TFJob (k8s.emulator.tfjob), then the release Job, and
  the console says what each waits for; a Job that fails means the ones after it would wait
  for inputs that never come (with `<stage>.failed.json` on the volume their gates end at
  once): the run fails there. A federated stage runs as k8s.emulator.federation does;
* the serving **Deployment**: its readiness (k8s.emulator.serving), once the pipeline pushed.

Exit 0 when every step succeeded and the server became Ready, 1 when one failed, 143/130 when
a signal deleted what ran.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from baton.k8s.emulator.pods import EmulationError

KUSTOMIZATION = "kustomization.yaml"


@dataclasses.dataclass
class DirOptions:
    volume_dir: Path
    work_dir: Path
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    grace_seconds: float = 10.0
    serving_timeout: float = 120.0
    stream: TextIO | None = None
    on_event: Any = None


def documents(root: Path) -> list[dict[str, Any]]:
    """The directory's objects in `kubectl apply -k` order, each in the kustomization's namespace."""
    import yaml

    kust_file = root / KUSTOMIZATION
    if not kust_file.is_file():
        raise EmulationError(f"{root}: no {KUSTOMIZATION}; give the directory `baton k8s` wrote")
    kust = yaml.safe_load(kust_file.read_text()) or {}
    ns = kust.get("namespace")
    out: list[dict[str, Any]] = []
    for res in kust.get("resources") or []:
        path = root / res
        if not path.is_file():
            raise EmulationError(f"{kust_file}: resource {res!r} is not a file here (a base or an "
                                 "overlay needs kustomize: `kubectl kustomize` it first)")
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict):
                if ns and doc.get("kind") not in ("Namespace", "ClusterTrainingRuntime"):
                    doc.setdefault("metadata", {})["namespace"] = ns
                out.append(doc)
    return out


def _kind(docs: list[dict], kind: str, component: str | None = None) -> list[dict]:
    return [d for d in docs if d.get("kind") == kind and (component is None or (
        (d.get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/component") == component)]


class _Run:
    def __init__(self, root: Path, opts: DirOptions) -> None:
        self.root, self.opts = root, opts
        self.stream = opts.stream or sys.stdout

    def say(self, text: str) -> None:
        self.stream.write(f"{text}\n")
        self.stream.flush()

    def jobset(self, doc: dict, work: Path, label: str = "JobSet") -> int:
        from baton.k8s.emulator.jobset import JobSetEmulator, JobSetOptions

        return JobSetEmulator(doc, JobSetOptions(
            volume_dir=self.opts.volume_dir, work_dir=work, manifests_dir=self.root,
            env=self.opts.env, grace_seconds=self.opts.grace_seconds, stream=self.stream,
            on_event=self.opts.on_event, label=label)).run()

    def plain(self, jobs: list[dict], work: Path) -> int:
        from baton.k8s.emulator.jobset import JobSetEmulator, JobSetOptions, plain_jobs

        return JobSetEmulator(plain_jobs(jobs), JobSetOptions(
            volume_dir=self.opts.volume_dir, work_dir=work, manifests_dir=self.root,
            env=self.opts.env, grace_seconds=self.opts.grace_seconds, stream=self.stream,
            on_event=self.opts.on_event, label="Job"), plain=True).run()

    def tfjob(self, doc: dict, work: Path) -> int:
        from baton.k8s.emulator.tfjob import Emulator, EmulatorOptions

        return Emulator(doc, EmulatorOptions(
            volume_dir=self.opts.volume_dir, work_dir=work, manifests_dir=self.root,
            env=self.opts.env, grace_seconds=self.opts.grace_seconds, stream=self.stream,
            on_event=self.opts.on_event)).run()

    def pipeline(self, docs: list[dict]) -> int:
        from baton.k8s import trainer_controller

        work = self.opts.work_dir
        if _kind(docs, "JobSet"):
            doc = _kind(docs, "JobSet")[0]
            self.say(f"JobSet {doc['metadata']['name']}: created; its controller creates the steps "
                     "in dependsOn order")
            return self.jobset(doc, work)
        if _kind(docs, "TrainJob"):
            tj = _kind(docs, "TrainJob")[0]
            runtime = trainer_controller.find_runtime(tj, docs)
            assert runtime is not None  # validation refused a TrainJob without its runtime
            js = trainer_controller.to_jobset(tj, runtime)
            nodes = (tj["spec"].get("trainer") or {}).get("numNodes")
            self.say(f"TrainJob {tj['metadata']['name']}: Trainer creates JobSet "
                     f"{js['metadata']['name']} from ClusterTrainingRuntime "
                     f"{runtime['metadata']['name']} (numNodes {nodes})")
            rc = self.jobset(js, work, label="TrainJob's JobSet")
            self.say(f"TrainJob {tj['metadata']['name']}: {'Complete' if rc == 0 else 'Failed'}")
            return rc
        steps = [("data", _kind(docs, "Job", "data")), ("tfjob", _kind(docs, "TFJob")),
                 ("release", _kind(docs, "Job", "release"))]
        present = [(n, d) for n, d in steps if d]
        for i, (name, found) in enumerate(present):
            later = ", ".join(n for n, _ in present[i + 1:])
            if later:
                self.say(f"{name}: running; {later} wait in wait-for-inputs for its outputs")
            rc = self.tfjob(found[0], work / name) if name == "tfjob" else self.plain(found, work / name)
            if rc != 0:
                if later:
                    self.say(f"{name}: did not succeed (exit {rc}); {later} would wait for inputs "
                             "that never come: their gates end on <stage>.failed.json, the run "
                             "fails here")
                return rc
        return 0

    def run(self) -> int:
        from baton.k8s.emulator.serving import check_ready
        from baton.k8s.errors import ValidationFailed
        from baton.k8s.validate import validate_documents

        docs = documents(self.root)
        found = validate_documents([(f"{d.get('kind')}/{(d.get('metadata') or {}).get('name')}", d)
                                    for d in docs] + [("kustomization", {
                                        "apiVersion": "kustomize.config.k8s.io/v1beta1",
                                        "kind": "Kustomization"})])
        if found:
            raise ValidationFailed(found)
        self.say(f"apply -k {self.root}: " + ", ".join(
            f"{d['kind']}/{d['metadata']['name']}" for d in docs))
        self.say(f"not emulated: {len(_kind(docs, 'NetworkPolicy'))} NetworkPolicies and the "
                 "namespace's Pod Security labels (one machine, one user); claims are "
                 f"{self.opts.volume_dir}")
        if _kind(docs, "Deployment", "superlink"):
            return self.federation(docs)
        rc = self.pipeline(docs)
        if rc != 0:
            return rc
        for dep in _kind(docs, "Deployment", "serving"):
            check = check_ready(dep, self.opts.volume_dir, self.opts.work_dir / "serving",
                                self.root, self.stream, self.opts.serving_timeout)
            if not check.ready:
                self.say(f"serving {dep['metadata']['name']}: {check.message}")
                return 1
        self.say("done: every step succeeded and the model server is Ready")
        return 0

    def federation(self, docs: list[dict]) -> int:
        from baton.k8s.emulator.federation import FederationOptions, emulate_documents

        ordered = sorted((d for d in docs if d.get("kind") in ("Deployment", "Job", "Service")),
                         key=lambda d: 0 if d.get("kind") == "Deployment" else 1)
        return emulate_documents(ordered, FederationOptions(
            volume_dir=self.opts.volume_dir, work_dir=self.opts.work_dir, env=self.opts.env,
            manifests_dir=self.root, grace_seconds=self.opts.grace_seconds, stream=self.stream))


def emulate_directory(root: str | Path, opts: DirOptions) -> int:
    """Validate and run the directory (see the module docstring); the exit code."""
    return _Run(Path(root), opts).run()
