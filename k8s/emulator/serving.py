"""The serving Deployment's readiness, checked on this machine: what `kubectl rollout status`
would wait for once the pipeline has pushed a model.

The Deployment runs `tensorflow_model_server`, which does not run here; `baton serve` takes the
same flags and speaks the same REST API, so the emulator runs it with the container's own
arguments (`--model_base_path=/artifacts/models/<pipeline>` and the batching and monitoring
files rewritten to the local volume and ConfigMaps, the gRPC and REST ports to free local ports)
and polls the container's readiness probe (`httpGet` on the REST port: the model status
endpoint, 200 only once a version is loaded) until it answers 200, the server exits, or
`timeout` seconds pass. One replica is checked; the server is stopped after.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from baton.k8s.emulator.pods import EmulationError, find_configmaps, plan_steps
from baton.strategies.supervisor import Command, ProcessGroup


@dataclasses.dataclass
class ServingCheck:
    ready: bool
    message: str
    seconds: float


def _port_of(container: Mapping[str, Any], port: Any) -> int | None:
    if isinstance(port, int):
        return port
    return next((p["containerPort"] for p in container.get("ports") or [] if p.get("name") == port), None)


def check_ready(deployment: Mapping[str, Any], volume_dir: Path, work_dir: Path,
                manifests_dir: Path | None, stream: TextIO | None = None,
                timeout: float = 120.0) -> ServingCheck:
    """Start the Deployment's server as `baton serve` and wait for its readiness probe."""
    from baton.strategies.cluster import free_ports

    meta = deployment.get("metadata") or {}
    name, ns = f"{meta.get('name')}-0", meta.get("namespace") or "default"
    pod = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    container = (pod.get("containers") or [None])[0]
    if not container:
        raise EmulationError(f"Deployment {meta.get('name')}: no container")
    probe = (container.get("readinessProbe") or {}).get("httpGet")
    if not probe:
        raise EmulationError(f"Deployment {meta.get('name')}: no httpGet readiness probe to check")
    declared = [p["containerPort"] for p in container.get("ports") or []]
    local = dict(zip(declared, free_ports(len(declared)), strict=True))
    args = []
    for a in container.get("args") or []:  # --port=8500, --rest_api_port=8501 -> local ports
        m = re.match(r"^(--(?:port|rest_api_port)=)(\d+)$", a)
        args.append(f"{m.group(1)}{local.get(int(m.group(2)), m.group(2))}" if m else a)
    steps = plan_steps(pod, [(container, True)], name, ns, volume_dir, work_dir,
                       find_configmaps(manifests_dir),
                       command_override=[sys.executable, "-m", "baton", "serve", *args])
    rest = local[_port_of(container, probe.get("port"))]
    url = f"http://127.0.0.1:{rest}{probe.get('path', '/')}"

    def say(text: str) -> None:
        if stream is not None:
            stream.write(f"serving {name}: {text}\n")
            stream.flush()

    group = ProcessGroup(grace=5.0, die_with_parent=True, exec_failure_exit=127)
    log = work_dir / "logs" / f"{name}.log"
    step = steps[0]
    started = time.monotonic()
    group.start(name, Command(step.argv, step.env, step.cwd, log=log, label=step.name))
    say(f"started `baton serve` standing in for {container.get('command', ['?'])[0]} "
        f"(gRPC {local.get(declared[0]) if declared else '?'}, REST {rest}); readiness: GET {url}")
    try:
        last = ""
        while time.monotonic() - started < timeout:
            ended = group.wait(0.5)
            if ended:
                return ServingCheck(False, f"the server exited with {ended[0].code} before it was "
                                    f"Ready (log: {log})", time.monotonic() - started)
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:  # noqa: S310 - our own server
                    body = resp.read().decode(errors="replace")
                say(f"Ready: {url} -> {resp.status} {body.strip()[:200]}")
                return ServingCheck(True, body, time.monotonic() - started)
            except urllib.error.HTTPError as exc:
                now = f"not Ready yet: {exc.code}"
            except OSError as exc:
                now = f"not Ready yet: {type(exc).__name__}"
            if now != last:
                say(now)
                last = now
        return ServingCheck(False, f"not Ready within {timeout:.0f} s ({last}; log: {log})",
                            time.monotonic() - started)
    finally:
        group.close(grace=5.0)
