"""Turn one replica of a TFJob into local process plans, as the kubelet would start the pod.

What a pod gets, and what the emulator gives instead:

* TF_CONFIG: the operator's bytes, with every `<job>-<type>-<i>.<ns>.svc:<port>` replaced by
  `127.0.0.1:<free port>` (one port per replica, kept across restarts as a Service name is).
  Local processes cannot resolve the operator's names, and every replica would want port 2222
  on the same host. The exact operator string is passed as `BATON_OPERATOR_TF_CONFIG` and
  written to `tf_config.json` with the mapping, so nothing about the format is hidden. Only the
  `tensorflow` container of a distributed job gets it (`k8s.tfconfig.is_distributed`); a
  TF_CONFIG in this machine's environment is never passed on.
* volumes: a PersistentVolumeClaim is the `--volume-dir`, a ConfigMap is materialised from the
  manifests beside the TFJob (its `items` put keys at their paths, as the kubelet does), an emptyDir is a fresh directory. Paths under a mountPath that
  appear in command, args, env values or workingDir are rewritten to the local directory.
* command: the container's `command` + `args` run as written (no image: the project's
  environment comes first on PATH, so `baton` and `python` are this checkout's).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from baton.errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PREEMPTED,
    EXIT_USAGE,
    BatonError,
)

LOCAL_TMP = "/tmp"  # noqa: S108 - the mount path pods write temporary files to


class EmulationError(BatonError, ValueError):
    """A TFJob the emulator cannot run locally (unsupported volume, missing ConfigMap...)."""

    exit_code = EXIT_USAGE


@dataclasses.dataclass(frozen=True)
class Step:
    """One container of the pod: init containers first, then the `tensorflow` container."""

    name: str
    argv: list[str]
    env: dict[str, str]
    cwd: str


@dataclasses.dataclass(frozen=True)
class PodPlan:
    name: str
    rtype: str
    index: int
    steps: tuple[Step, ...]
    operator_tf_config: str | None  # None: not distributed, no TF_CONFIG
    local_tf_config: str | None
    grace_seconds: float


def find_documents(manifests_dir: Path | None, kind: str) -> list[dict[str, Any]]:
    """Every document of `kind` in the YAML files of `manifests_dir` (unreadable files skipped)."""
    import yaml

    out: list[dict[str, Any]] = []
    if manifests_dir is None or not manifests_dir.is_dir():
        return out
    for f in sorted(manifests_dir.rglob("*.y*ml")):
        try:
            docs = list(yaml.safe_load_all(f.read_text()))
        except yaml.YAMLError:
            continue
        out += [d for d in docs if isinstance(d, dict) and d.get("kind") == kind]
    return out


def find_configmaps(manifests_dir: Path | None) -> dict[str, dict[str, str]]:
    """ConfigMap name -> data, from every YAML file in `manifests_dir`."""
    return {d["metadata"]["name"]: {k: str(v) for k, v in (d.get("data") or {}).items()}
            for d in find_documents(manifests_dir, "ConfigMap")}


def read_only_mounts(pod: Mapping, container: Mapping) -> list[str]:
    """The container's mountPaths that the manifest makes read-only (at the mount or the claim)."""
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    out = []
    for m in container.get("volumeMounts") or []:
        claim = (volumes.get(m["name"]) or {}).get("persistentVolumeClaim") or {}
        if m.get("readOnly") or claim.get("readOnly"):
            out.append(m["mountPath"].rstrip("/") or "/")
    return out


def mount_dirs(pod: Mapping, container: Mapping, pod_name: str, volume_dir: Path,
                work_dir: Path, configmaps: Mapping[str, Mapping[str, str]],
                claim_dirs: Mapping[str, Path] | None = None) -> dict[str, str]:
    """mountPath -> local directory for each volumeMount of `container`: a claim named in
    `claim_dirs` is its directory there, any other claim `volume_dir`.

    A mounted ConfigMap's files are written with the claims' mount paths in their text
    rewritten too (the spec's `serving_base: /artifacts/models/...`): what a pod reads under a
    claim's mount must be the local directory here, or a step would write outside the volume.
    """
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    out: dict[str, str] = {}
    claims: dict[str, str] = {}
    for m in container.get("volumeMounts") or []:
        claim = (volumes.get(m["name"]) or {}).get("persistentVolumeClaim")
        if claim:
            local_claim = (claim_dirs or {}).get(claim["claimName"], volume_dir)
            claims[m["mountPath"].rstrip("/") or "/"] = str(
                local_claim / m["subPath"] if m.get("subPath") else local_claim)
    for m in container.get("volumeMounts") or []:
        vol = volumes.get(m["name"])
        if vol is None:
            raise EmulationError(f"volumeMount {m['name']!r} of pod {pod_name} names no volume")
        if "persistentVolumeClaim" in vol:
            local = (claim_dirs or {}).get(vol["persistentVolumeClaim"]["claimName"], volume_dir)
        elif "configMap" in vol:
            cm = vol["configMap"]["name"]
            if cm not in configmaps:
                raise EmulationError(
                    f"pod {pod_name} mounts ConfigMap {cm!r}, which is not in the manifests beside "
                    "the TFJob (pass --manifests-dir)"
                )
            local = work_dir / "configmaps" / cm
            local.mkdir(parents=True, exist_ok=True)
            data = configmaps[cm]
            # `items` (the kubelet's key -> path projection) or every key as a file
            items = vol["configMap"].get("items") or [{"key": k, "path": k} for k in data]
            for item in items:
                if item["key"] not in data:
                    raise EmulationError(
                        f"pod {pod_name} mounts key {item['key']!r} of ConfigMap {cm!r}, "
                        f"which has no such key (its keys: {', '.join(sorted(data))})"
                    )
                target = local / item["path"]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(rewrite(data[item["key"]], claims))
        elif "emptyDir" in vol:
            local = work_dir / "pods" / pod_name / m["name"]
        elif "hostPath" in vol:
            local = Path(vol["hostPath"]["path"])
        else:
            kinds = sorted(set(vol) - {"name"})
            raise EmulationError(f"volume {m['name']!r} of pod {pod_name}: {kinds} is not emulated")
        if m.get("subPath"):
            local = local / m["subPath"]
        local.mkdir(parents=True, exist_ok=True)
        out[m["mountPath"].rstrip("/") or "/"] = str(local)
    return out


def rewrite(text: str, mounts: Mapping[str, str]) -> str:
    """Replace container paths under a mountPath with the local directory (longest first), in
    one pass: a local directory put in is never rewritten again (a local path under /tmp with a
    `/tmp` emptyDir mounted)."""
    if not mounts:
        return text
    ordered = sorted(mounts, key=len, reverse=True)
    pattern = r"(?<![\w.-])(" + "|".join(re.escape(m) for m in ordered) + r")(?=/|$|[^\w.-])"
    return re.sub(pattern, lambda m: mounts[m.group(1)], text)


_FIELD = re.compile(r"^metadata\.(labels|annotations)\['([^']+)'\]$")


def _container_env(container: Mapping, pod_name: str, namespace: str,
                   meta: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The container's env as the kubelet resolves it: values, and the downward API's
    `metadata.name`, `metadata.namespace`, `metadata.labels['k']`, `metadata.annotations['k']`
    from the pod's `meta` (a missing label or annotation is the empty string, as there)."""
    env: dict[str, str] = {}
    for e in container.get("env") or []:
        if "value" in e:
            env[e["name"]] = str(e["value"])
        elif "valueFrom" in e:
            ref = (e["valueFrom"].get("fieldRef") or {}).get("fieldPath") or ""
            field = _FIELD.match(ref)
            if ref == "metadata.name":
                env[e["name"]] = pod_name
            elif ref == "metadata.namespace":
                env[e["name"]] = namespace
            elif field:
                env[e["name"]] = str(((meta or {}).get(field.group(1)) or {}).get(field.group(2), ""))
        else:
            env[e["name"]] = ""
    return env


def project_path() -> str:
    """PATH with this interpreter's bin directory first (the project's environment)."""
    bin_dir = os.path.dirname(sys.executable)
    return os.pathsep.join([bin_dir, os.environ.get("PATH", "")])


# Set by the operator (or by us, standing in for it), never inherited from this machine.
_OPERATOR_ENV = ("TF_CONFIG", "BATON_OPERATOR_TF_CONFIG")


def plan_steps(pod: Mapping, containers: list[tuple[Mapping, bool]], pod_name: str, namespace: str,
               volume_dir: Path, work_dir: Path, configmaps: Mapping[str, Mapping[str, str]], *,
               extra_env: Mapping[str, str] | None = None, main_env: Mapping[str, str] | None = None,
               command_override: list[str] | None = None,
               claim_dirs: Mapping[str, Path] | None = None,
               translate: Callable[[Mapping, str], str] | None = None,
               meta: Mapping[str, Any] | None = None) -> tuple[Step, ...]:
    """The pod's containers (`(container, is_main)`, init containers first) as local Steps.

    Each gets this machine's environment (less the operator's variables), PATH with the project
    first, the container's env, then `main_env` (main containers only) and `extra_env`; paths
    under its mounts are rewritten to the local directories, and `translate(container, text)`,
    if given, rewrites what else a pod sees differently (addresses, ports) in argv and env.
    """
    pod_dir = work_dir / "pods" / pod_name
    pod_dir.mkdir(parents=True, exist_ok=True)
    steps = []
    for container, is_main in containers:
        mounts = mount_dirs(pod, container, pod_name, volume_dir, work_dir, configmaps, claim_dirs)
        # a pod's /tmp emptyDir stays this machine's /tmp: rewriting it would send the paths a
        # caller gives under /tmp (a --command script, a pytest tmp_path) into the pod's dir
        mounts.pop(LOCAL_TMP, None)
        argv = [*(container.get("command") or []), *(container.get("args") or [])]
        if is_main and command_override:
            argv = list(command_override)
        if not argv:
            raise EmulationError(
                f"container {container['name']!r} of pod {pod_name} has no command: without the "
                "image's entrypoint the emulator cannot know what to run (set command/args)"
            )

        def local(text: str, c: Mapping = container, m: Mapping[str, str] = mounts) -> str:
            text = rewrite(text, m)
            return translate(c, text) if translate is not None else text

        env = {k: v for k, v in os.environ.items() if k not in _OPERATOR_ENV}
        env.update({"PATH": project_path(), "HOSTNAME": pod_name})
        env.update({k: local(v) for k, v in
                    _container_env(container, pod_name, namespace, meta).items()})
        if is_main:
            env.update(main_env or {})
        env.update(extra_env or {})
        cwd = rewrite(container["workingDir"], mounts) if container.get("workingDir") else str(pod_dir)
        Path(cwd).mkdir(parents=True, exist_ok=True)
        steps.append(Step(container["name"], [local(a) for a in argv], env, cwd))
    return tuple(steps)


def plan_pod(tfjob: Mapping, rtype: str, index: int, operator_tf_config: str | None,
             local_tf_config: str | None,
             volume_dir: Path, work_dir: Path, configmaps: Mapping[str, Mapping[str, str]],
             command_override: list[str] | None = None, extra_env: Mapping[str, str] | None = None,
             ) -> PodPlan:
    meta = tfjob["metadata"]
    job, ns = meta["name"], meta.get("namespace") or "default"
    rspec = tfjob["spec"]["tfReplicaSpecs"][rtype]
    pod: dict[str, Any] = rspec["template"]["spec"]
    pod_name = f"{job}-{rtype.lower()}-{index}"
    containers = [(c, False) for c in pod.get("initContainers") or []]
    containers += [(c, True) for c in pod["containers"] if c.get("name") == "tensorflow"]
    tf_env = ({"TF_CONFIG": local_tf_config, "BATON_OPERATOR_TF_CONFIG": operator_tf_config}
              if operator_tf_config is not None and local_tf_config is not None else {})
    steps = plan_steps(pod, containers, pod_name, ns, volume_dir, work_dir, configmaps,
                       extra_env=extra_env, main_env=tf_env, command_override=command_override)
    grace = float(pod.get("terminationGracePeriodSeconds", 30))
    return PodPlan(pod_name, rtype, index, steps, operator_tf_config, local_tf_config, grace)


@contextlib.contextmanager
def deleted_on_signals(callback: Callable[[int], None]) -> Iterator[None]:
    """While inside, SIGTERM and SIGINT call `callback(signum)` (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signums = (signal.SIGTERM, signal.SIGINT)
    previous = {s: signal.signal(s, lambda signum, frame: callback(signum)) for s in signums}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def controller_exit(result: str, signalled: int | None, ok: bool = True) -> int:
    """An emulation's exit code from how it ended: "Deleted" by SIGTERM (143) or SIGINT (130),
    "Succeeded" (0 when `ok`), anything else failed (1)."""
    if result == "Deleted":
        assert signalled is not None
        return EXIT_PREEMPTED if signalled == signal.SIGTERM else EXIT_INTERRUPTED
    return EXIT_OK if result == "Succeeded" and ok else EXIT_FAILED


class InitWatch:
    """What a running init container says it waits for, on the console once per change.

    A pod held by its `wait-for-inputs` gate printed 'waiting for inputs: ...' only into its
    log file, so the console of `baton k8s emulate tfjob.yaml` on a fresh volume said 'Running'
    and nothing else while every pod waited (issue 37). The controllers call `news` for each pod
    whose init container runs; it returns the last complete line the pod's log gained since the
    last look (at most one look a second per pod), when it differs from the last one said.
    """

    def __init__(self, every: float = 1.0) -> None:
        self.every = every
        self._offsets: dict[Path, int] = {}
        self._said: dict[str, str] = {}
        self._looked: dict[str, float] = {}

    def news(self, pod: str, log: Path, now: float) -> str | None:
        if now - self._looked.get(pod, -self.every) < self.every:
            return None
        self._looked[pod] = now
        start = self._offsets.get(log, 0)
        try:
            with open(log, "rb") as f:
                f.seek(start)
                data = f.read(1 << 16)
        except OSError:
            return None
        end = data.rfind(b"\n")
        if end < 0:
            return None
        self._offsets[log] = start + end + 1
        lines = [ln.strip() for ln in data[:end].decode(errors="replace").splitlines()
                 if ln.strip() and not ln.startswith("===== ")]
        if not lines or self._said.get(pod) == lines[-1][:300]:
            return None
        self._said[pod] = lines[-1][:300]
        return self._said[pod]
