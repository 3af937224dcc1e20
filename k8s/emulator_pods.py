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

import dataclasses
import os
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from baton.errors import EXIT_USAGE, BatonError


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


def find_configmaps(manifests_dir: Path | None) -> dict[str, dict[str, str]]:
    """ConfigMap name -> data, from every YAML file in `manifests_dir`."""
    import yaml

    out: dict[str, dict[str, str]] = {}
    if manifests_dir is None or not manifests_dir.is_dir():
        return out
    for f in sorted(manifests_dir.rglob("*.y*ml")):
        try:
            docs = list(yaml.safe_load_all(f.read_text()))
        except yaml.YAMLError:
            continue
        for d in docs:
            if isinstance(d, dict) and d.get("kind") == "ConfigMap":
                out[d["metadata"]["name"]] = {k: str(v) for k, v in (d.get("data") or {}).items()}
    return out


def _mount_dirs(pod: Mapping, container: Mapping, pod_name: str, volume_dir: Path,
                work_dir: Path, configmaps: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """mountPath -> local directory for each volumeMount of `container`."""
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    out: dict[str, str] = {}
    for m in container.get("volumeMounts") or []:
        vol = volumes.get(m["name"])
        if vol is None:
            raise EmulationError(f"volumeMount {m['name']!r} of pod {pod_name} names no volume")
        if "persistentVolumeClaim" in vol:
            local = volume_dir
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
                target.write_text(data[item["key"]])
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


def _literal(value: str) -> Callable[[re.Match[str]], str]:
    """A re.sub replacement inserting `value` verbatim (no backslash-escape processing)."""
    return lambda _m: value


def rewrite(text: str, mounts: Mapping[str, str]) -> str:
    """Replace container paths under a mountPath with the local directory (longest first)."""
    for mount in sorted(mounts, key=len, reverse=True):
        pattern = r"(?<![\w.-])" + re.escape(mount) + r"(?=/|$|[^\w.-])"
        text = re.sub(pattern, _literal(mounts[mount]), text)
    return text


def _container_env(container: Mapping, pod_name: str, namespace: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for e in container.get("env") or []:
        if "value" in e:
            env[e["name"]] = str(e["value"])
        elif "valueFrom" in e:
            ref = (e["valueFrom"].get("fieldRef") or {}).get("fieldPath")
            if ref == "metadata.name":
                env[e["name"]] = pod_name
            elif ref == "metadata.namespace":
                env[e["name"]] = namespace
        else:
            env[e["name"]] = ""
    return env


def project_path() -> str:
    """PATH with this interpreter's bin directory first (the project's environment)."""
    bin_dir = os.path.dirname(sys.executable)
    return os.pathsep.join([bin_dir, os.environ.get("PATH", "")])


# Set by the operator (or by us, standing in for it), never inherited from this machine.
_OPERATOR_ENV = ("TF_CONFIG", "BATON_OPERATOR_TF_CONFIG")


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
    pod_dir = work_dir / "pods" / pod_name
    pod_dir.mkdir(parents=True, exist_ok=True)
    steps = []
    containers = [(c, False) for c in pod.get("initContainers") or []]
    containers += [(c, True) for c in pod["containers"] if c.get("name") == "tensorflow"]
    for container, is_main in containers:
        mounts = _mount_dirs(pod, container, pod_name, volume_dir, work_dir, configmaps)
        argv = [*(container.get("command") or []), *(container.get("args") or [])]
        if is_main and command_override:
            argv = list(command_override)
        if not argv:
            raise EmulationError(
                f"container {container['name']!r} of pod {pod_name} has no command: without the "
                "image's entrypoint the emulator cannot know what to run (set command/args)"
            )
        env = {k: v for k, v in os.environ.items() if k not in _OPERATOR_ENV}
        env.update({"PATH": project_path(), "HOSTNAME": pod_name})
        env.update({k: rewrite(v, mounts) for k, v in _container_env(container, pod_name, ns).items()})
        if is_main and operator_tf_config is not None and local_tf_config is not None:
            env["TF_CONFIG"] = local_tf_config
            env["BATON_OPERATOR_TF_CONFIG"] = operator_tf_config
        env.update(extra_env or {})
        cwd = rewrite(container["workingDir"], mounts) if container.get("workingDir") else str(pod_dir)
        Path(cwd).mkdir(parents=True, exist_ok=True)
        steps.append(Step(container["name"], [rewrite(a, mounts) for a in argv], env, cwd))
    grace = float(pod.get("terminationGracePeriodSeconds", 30))
    return PodPlan(pod_name, rtype, index, tuple(steps), operator_tf_config, local_tf_config, grace)
