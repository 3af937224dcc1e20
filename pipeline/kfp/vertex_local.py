"""A Vertex AI CustomJob's worker pools run on this machine (`baton kfp --run-local`).

Each replica of each pool is a process running the pool's container command with the
environment Vertex AI would give it: TF_CONFIG in Vertex AI's format (TensorFlow's task names,
`environment: cloud`, the job spec under `job`), addresses on 127.0.0.1. As on Vertex AI the job
succeeds when the chief (pool 0) exits 0 and fails when any replica fails; what is still running
then (the parameter servers, which never exit on their own) is stopped.
"""

from __future__ import annotations

import os
from typing import Any

from baton.pipeline.kfp.vertex import POOLS, tf_config

GRACE_SECONDS = 30.0


def run_pools(body: dict[str, Any]) -> tuple[int, list[str]]:
    """Run the pools of CustomJob `body`; (exit code, the last lines of the replicas)."""
    from baton.k8s.emulator.pods import project_path
    from baton.strategies.cluster import free_ports
    from baton.strategies.inventory import TASKS_ON_NODE_ENV
    from baton.strategies.supervisor import Command, ProcessGroup

    specs = body["jobSpec"]["workerPoolSpecs"]
    replicas = [(POOLS[i], j, spec) for i, spec in enumerate(specs) if spec
                for j in range(int(spec["replicaCount"]))]
    ports = iter(free_ports(len(replicas)))
    addresses: dict[str, list[str]] = {}
    for task, _, _ in replicas:
        addresses.setdefault(task, []).append(f"127.0.0.1:{next(ports)}")
    tail: list[str] = []

    def echo(name: str, line: str) -> None:
        line = f"[{name}] {line.rstrip()}"
        print(line, flush=True)
        tail.append(line)
        del tail[:-200]

    group = ProcessGroup(grace=GRACE_SECONDS, echo=echo, die_with_parent=True,
                         exec_failure_exit=127)
    print(f"baton kfp: CustomJob {body['displayName']} run on this machine (kfp.local: no "
          f"Vertex AI): {', '.join(f'{t} x{len(a)}' for t, a in addresses.items())}", flush=True)
    try:
        for task, index, spec in replicas:
            container = spec["containerSpec"]
            env = {**os.environ, **{e["name"]: e["value"] for e in container.get("env", [])},
                   "TF_CONFIG": tf_config(body, addresses, task, index),
                   "PATH": project_path(), TASKS_ON_NODE_ENV: str(len(replicas))}
            env.pop("BATON_LOG_FORMAT", None)  # this step's log is read by a person
            group.start(f"{task}:{index}", Command(
                [*container["command"], *container["args"]], env=env))
        while True:
            for ended in group.wait(timeout=1.0):
                if ended.name == "chief:0" and ended.code == 0:
                    return 0, tail
                if ended.code == 0:  # a worker done with its part: the chief decides
                    continue
                print(f"baton kfp: replica {ended.name} exited {ended.code}: the CustomJob "
                      "fails", flush=True)
                return 1, tail
    finally:
        group.close()
