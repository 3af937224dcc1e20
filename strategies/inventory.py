"""Resource inventory: what each node has, and the defaults that follow from it.

Every task reports its node (CPU cores, GPUs, memory) when it starts; the chief records the
cluster's inventory in `train_info.json`. Defaults that depend on hardware (replica count,
per-replica batch size, Beam workers) are derived here, in one place, and printed, so a run on a
laptop and a run on a GPU pool choose differently for a reason a person can read.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any


def node_inventory() -> dict[str, Any]:
    """This node's CPUs (logical and usable by this process), GPUs and memory.

    GPUs are counted from `CUDA_VISIBLE_DEVICES`/`/proc/driver/nvidia` rather than by starting
    TensorFlow, so the inventory is cheap enough for `baton --help`-speed commands.
    """
    import psutil

    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        usable = os.cpu_count() or 1
    mem = psutil.virtual_memory()
    return {
        "host": socket.gethostname(),
        "cpu_cores": os.cpu_count() or 1,
        "cpu_usable": usable,
        "gpus": _gpu_count(),
        "memory_bytes": int(mem.total),
        "memory_available_bytes": int(mem.available),
    }


def _gpu_count() -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    gpus = Path("/proc/driver/nvidia/gpus")
    return len(list(gpus.iterdir())) if gpus.is_dir() else 0


def derive_defaults(nodes: list[dict[str, Any]], global_batch_size: int) -> dict[str, Any]:
    """Replicas, per-replica batch and Beam workers from the inventory of the training nodes.

    One replica per GPU, or one per node on CPU (tf.distribute uses all cores of a CPU device);
    Beam gets one worker per usable core of the first node, leaving one for the coordinator.
    """
    replicas = sum(max(n.get("gpus", 0), 1) for n in nodes) or 1
    usable = nodes[0].get("cpu_usable", 1) if nodes else 1
    return {
        "replicas": replicas,
        "per_replica_batch_size": max(global_batch_size // replicas, 1),
        "beam_workers": max(usable - 1, 1),
        "intra_op_threads": usable,
    }


def describe(node: dict[str, Any]) -> str:
    gib = node["memory_bytes"] / 2**30
    return (
        f"node {node['host']}: {node['cpu_usable']}/{node['cpu_cores']} CPU cores, "
        f"{node['gpus']} GPUs, {gib:.1f} GiB"
    )


def describe_defaults(defaults: dict[str, Any]) -> str:
    return (
        f"defaults: {defaults['replicas']} replicas, per-replica batch "
        f"{defaults['per_replica_batch_size']}, {defaults['beam_workers']} Beam workers"
    )


def write_report(directory: Path, task_name: str, node: dict[str, Any]) -> Path:
    """Each task's inventory as `<directory>/<task>.json` (atomic); the chief gathers them."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{task_name.replace(':', '-')}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"task": task_name, **node}))
    tmp.replace(path)
    return path


def gather(directory: Path) -> list[dict[str, Any]]:
    if not directory.is_dir():
        return []
    return [json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))]
