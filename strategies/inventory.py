"""Resource inventory: what each node has, and the defaults that follow from it.

Every task reports its node (CPU cores, GPUs, memory) when it starts; the chief records the
cluster's inventory in `train_info.json`. Defaults that depend on hardware (replica count,
per-replica batch size, Beam workers, thread pools) are derived here, in one place, printed and
applied (the data stages' Beam workers: pipeline.dataplane.beam_runner.plan_workers; a batch that
does not divide over the replicas is refused; `baton k8s` derives the same from a pod's limits:
k8s.placement), so a run on a laptop and a run on a GPU pool choose differently for a reason a
person can read.

Usable cores are the fewer of the CPU affinity mask and the cgroup's CPU quota (a Kubernetes
pod's `limits.cpu`, which `os.cpu_count()` and the affinity mask do not show). TensorFlow sizes
its thread pools from the node's cores, so co-located tasks (a local cluster; the TFJob
emulator's pods) or a pod with a quota oversubscribe the cores they share: `thread_plan` gives
each task its share (`BATON_TASKS_ON_NODE`, set by the launchers that co-locate tasks) and
`apply_threads` sets it before TensorFlow starts, unless `TF_NUM_INTRAOP_THREADS` /
`TF_NUM_INTEROP_THREADS` say otherwise.

A thread count alone does not keep a task to its share: TensorFlow's CPU kernels run on the
intra-op pool and on the thread that runs the op, so a task given one intra-op thread still
kept both cores of this 2-core machine busy (a matmul loop: 2.0 CPU seconds per second, as
fast as with two threads). Where the tasks of a local cluster stand for nodes, `core_sets`
deals the usable cores out among them and the launcher pins each task to its set (CPU
affinity, inherited by every thread and child): a task then has its node's cores and no
other's, so a task that stalls leaves its core idle instead of lending it to the others.
"""

from __future__ import annotations

import json
import math
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from baton.strategies.factory import MIRRORED, ONE_DEVICE, PARAMETER_SERVER


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
    quota = cgroup_cpu_quota()
    if quota is not None:
        usable = max(1, min(usable, math.ceil(quota)))
    mem = psutil.virtual_memory()
    return {
        "host": socket.gethostname(),
        "cpu_cores": os.cpu_count() or 1,
        "cpu_usable": usable,
        "cpu_quota": quota,
        "gpus": _gpu_count(),
        "memory_bytes": int(mem.total),
        "memory_available_bytes": int(mem.available),
        **cpu_kernels(),
    }


# CPU features with which TensorFlow turns its oneDNN kernels on by itself (TF 2.9's release
# notes: "CPUs with neural-network-focused hardware features such as AVX512_VNNI, AVX512_BF16,
# and AMX"; AVX_VNNI too in later releases); `/proc/cpuinfo` spelling.
ONEDNN_BY_DEFAULT = ("avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile")


def cpu_kernels(cpuinfo: str | None = None,
                env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The CPU model and whether TensorFlow on this node runs its oneDNN kernels, and why.

    Not applied, reported: on an AVX2-only CPU TensorFlow leaves oneDNN off, and there Baton's
    CNN trained ~3.5x slower than with `TF_ENABLE_ONEDNN_OPTS=1` (an AMD EPYC node: 0.85 s
    against 0.24 s for a forward and backward pass on 1,024 32x32x3 images, one core), while
    the MLPs ran the same or up to 40 % slower with it (0.26 against 0.18 ms a step at batch
    32). Which is faster depends on the model, so the node says which kernels it runs and the
    user sets the variable for the tasks; two nodes that differ also differ in speed, which
    `balance: auto` measures.
    """
    environ: Mapping[str, str] = os.environ if env is None else env
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:  # not Linux
            cpuinfo = ""
    model, flags = "", set[str]()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and not model:
            model = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = set(value.split())
    nn = [f for f in ONEDNN_BY_DEFAULT if f in flags]
    asked = environ.get("TF_ENABLE_ONEDNN_OPTS", "").strip().lower()
    if asked in ("1", "true"):
        on, why = True, "TF_ENABLE_ONEDNN_OPTS=1"
    elif asked in ("0", "false"):
        on, why = False, "TF_ENABLE_ONEDNN_OPTS=0"
    else:
        on = bool(nn)
        why = (f"TensorFlow's default on this CPU ({', '.join(nn)})" if nn else
               "TensorFlow's default on a CPU without " + "/".join(ONEDNN_BY_DEFAULT)
               + "; TF_ENABLE_ONEDNN_OPTS=1 turns it on")
    return {"cpu_model": model, "onednn": {"on": on, "why": why}}


def cgroup_cpu_quota(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The CPU quota in cores (cgroup v2 `cpu.max`, or v1 `cpu.cfs_quota_us` / `period`);
    None when there is none ("max", -1) or no cgroup file is readable."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass  # no cgroup v2 file here: try cgroup v1's
    try:
        q = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return None if q <= 0 or period_us <= 0 else q / period_us
    except (OSError, ValueError):
        return None


TASKS_ON_NODE_ENV = "BATON_TASKS_ON_NODE"


def thread_plan(node: dict[str, Any], tasks_on_node: int | None = None) -> dict[str, Any]:
    """Intra-op and inter-op threads for one task: its share of the node's usable cores.

    Intra-op (the threads one op such as a matmul splits over) gets the share; inter-op (ops
    run side by side) gets at least 2, because a collective or a tf.data op can block a thread
    while the op it waits for needs another. TensorFlow's own variables win when set.
    """
    if tasks_on_node is None:
        tasks_on_node = int(os.environ.get(TASKS_ON_NODE_ENV, "1") or 1)
    intra, inter = pool_sizes(int(node.get("cpu_usable", 1)) // max(tasks_on_node, 1))
    plan: dict[str, Any] = {"intra_op": intra, "inter_op": inter,
                            "tasks_on_node": tasks_on_node, "source": "inventory"}
    for key, env in (("intra_op", "TF_NUM_INTRAOP_THREADS"), ("inter_op", "TF_NUM_INTEROP_THREADS")):
        if os.environ.get(env, "").strip().isdigit():
            plan[key], plan["source"] = int(os.environ[env]), "environment"
    return plan


def usable_cores() -> list[int]:
    """The cores this process may use: its affinity mask, cut to the cgroup's CPU quota."""
    try:
        cores = sorted(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = list(range(os.cpu_count() or 1))
    quota = cgroup_cpu_quota()
    if quota is not None:
        cores = cores[: max(1, math.floor(quota))]
    return cores


def core_sets(tasks: int, cores: list[int]) -> list[tuple[int, ...]] | None:
    """Each of `tasks` co-located tasks' own cores: `cores` dealt out in equal contiguous
    shares (a remainder stays unassigned, so the shares are equal nodes). None when there are
    fewer cores than tasks: shares would overlap, and the tasks keep sharing every core."""
    if tasks < 1 or len(cores) < tasks:
        return None
    per = len(cores) // tasks
    return [tuple(cores[i * per:(i + 1) * per]) for i in range(tasks)]


def pool_sizes(cores: int) -> tuple[int, int]:
    """(intra-op, inter-op) threads for a task given `cores`: all of them, and at least 2."""
    share = max(1, cores)
    return share, max(2, share)


def apply_threads(plan: dict[str, Any]) -> dict[str, Any]:
    """Set TensorFlow's thread pools to `plan` before its context starts; returns what holds
    (`applied: False` with the reason when TensorFlow had already started in this process)."""
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(plan["intra_op"])
        tf.config.threading.set_inter_op_parallelism_threads(plan["inter_op"])
    except RuntimeError as exc:  # the eager context is initialised: the pools are fixed
        return {**plan, "applied": False, "reason": str(exc).splitlines()[0]}
    return {**plan, "applied": True}


def _gpu_count() -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    gpus = Path("/proc/driver/nvidia/gpus")
    return len(list(gpus.iterdir())) if gpus.is_dir() else 0


def beam_workers(node: dict[str, Any], tasks_on_node: int | None = None) -> int:
    """Beam workers for a data stage on this node: the task's share of the usable cores.

    The same share as `thread_plan`'s intra-op threads: a data stage in a pod with a CPU quota,
    or beside other tasks on one node, gets the cores it may use, not the node's.
    """
    if tasks_on_node is None:
        tasks_on_node = int(os.environ.get(TASKS_ON_NODE_ENV, "1") or 1)
    return max(1, int(node.get("cpu_usable", 1)) // max(tasks_on_node, 1))


def replicas(strategy: str | None, nodes: list[dict[str, Any]]) -> int:
    """Replicas in sync for `strategy` on the training nodes, as tf.distribute counts them.

    `one_device`: 1. `mirrored`: one per GPU of its node (1 on CPU: TensorFlow's CPU device
    uses all cores). `multi_worker_mirrored`: the same summed over the workers.
    `parameter_server`: one per GPU of a worker (each worker runs its steps on its own
    devices; a step's batch is split over them). None: as multi_worker_mirrored (the old
    strategy-blind count).
    """
    per_node = [max(int(n.get("gpus", 0) or 0), 1) for n in nodes] or [1]
    if strategy == ONE_DEVICE:
        return 1
    if strategy in (MIRRORED, PARAMETER_SERVER):
        return per_node[0]
    return sum(per_node)


def per_replica_batch(batch_size: int, n_replicas: int, why: str = "") -> int:
    """`batch_size` (global) split over `n_replicas`: an error (exit 2) naming the field when
    it does not divide, as tf.distribute's `get_per_replica_batch_size` would fail later."""
    from baton.errors import ConfigError

    if n_replicas < 1 or batch_size % n_replicas:
        raise ConfigError(
            "train.config.batch_size",
            f"the global batch must divide evenly over the {n_replicas} replicas{why}; use a "
            f"multiple of {n_replicas}. Received: batch_size={batch_size}",
        )
    return batch_size // n_replicas


def derive_defaults(
    nodes: list[dict[str, Any]], global_batch_size: int, strategy: str | None = None
) -> dict[str, Any]:
    """Replicas, per-replica batch and Beam workers from the inventory of the training nodes.

    One replica per GPU, or one per node on CPU (tf.distribute uses all cores of a CPU device),
    counted for `strategy` (`replicas`); the per-replica batch is the global batch over them
    (an error when it does not divide). Beam workers are the first node's usable cores
    (`beam_workers`), the count the data stages use when their args do not set one.
    """
    n = replicas(strategy, nodes)
    gpus = sum(int(x.get("gpus", 0) or 0) for x in nodes)
    why = f" ({gpus} GPUs on {len(nodes)} node(s), strategy {strategy})" if gpus else ""
    usable = nodes[0].get("cpu_usable", 1) if nodes else 1
    return {
        "replicas": n,
        "per_replica_batch_size": per_replica_batch(global_batch_size, n, why),
        "beam_workers": beam_workers(nodes[0], 1) if nodes else 1,
        "intra_op_threads": usable,
    }


def describe(node: dict[str, Any]) -> str:
    gib = node["memory_bytes"] / 2**30
    quota = node.get("cpu_quota")
    limit = f" (CPU quota {quota:g})" if quota is not None else ""
    threads = node.get("threads")
    pools = (f"; TF threads {threads['intra_op']} intra-op, {threads['inter_op']} inter-op"
             + ("" if threads.get("applied", True) else " (not applied)")
             if threads else "")
    onednn = node.get("onednn")
    kernels = f"; oneDNN {'on' if onednn['on'] else 'off'} ({onednn['why']})" if onednn else ""
    return (
        f"node {node['host']}: {node['cpu_usable']}/{node['cpu_cores']} CPU cores{limit}, "
        f"{node['gpus']} GPUs, {gib:.1f} GiB{pools}{kernels}"
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
