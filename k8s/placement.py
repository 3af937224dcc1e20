"""Placement inside a pod, from the resources its manifest asks for.

A pod's inventory (strategies.inventory) is what its manifest gives it: its CPU limit is the
cgroup quota the inventory reads as usable cores, its `nvidia.com/gpu` limit the GPUs it sees.
So `baton k8s` can say, before anything is scheduled, what each replica type will derive at
run time (thread pools, Beam workers, replicas, per-replica batch) and refuse a global batch
that does not divide over the GPUs asked for, as the training would fail on it after the pods
started. The inventory of the machine running `baton k8s` plays no part: a laptop's cores say
nothing about the cluster's nodes, so cpu and memory are the spec's (or the defaults').
"""

from __future__ import annotations

import math
import re
from typing import Any

from baton.k8s.errors import ManifestError
from baton.k8s.options import JobOptions, Resources
from baton.strategies import inventory
from baton.strategies.factory import PARAMETER_SERVER

ANNOTATION = "baton.dev/placement"
_MILLI = re.compile(r"^\+?([0-9.]+)m$")


def cpu_cores(quantity: str) -> float:
    """A CPU quantity in cores: `500m` -> 0.5, `2` -> 2.0 (check_quantity has vetted it)."""
    text = str(quantity)
    milli = _MILLI.match(text)
    return float(milli.group(1)) / 1000 if milli else float(text.lstrip("+"))


def pod_node(res: Resources) -> dict[str, Any]:
    """The inventory a pod with `res` will report: its quota's cores (rounded up, as
    `node_inventory` does) and its GPUs."""
    cores = cpu_cores(str(res.cpu))
    return {"cpu_usable": max(1, math.ceil(cores)), "cpu_quota": cores, "gpus": res.gpu}


def replica_placement(res: Resources) -> dict[str, Any]:
    node = pod_node(res)
    intra, inter = inventory.pool_sizes(node["cpu_usable"])
    return {"cpu_usable": node["cpu_usable"], "gpus": res.gpu, "intra_op": intra,
            "inter_op": inter, "beam_workers": inventory.beam_workers(node, 1)}


def annotation(res: Resources) -> str:
    """One line for the replica template's `baton.dev/placement` annotation."""
    p = replica_placement(res)
    return (f"cpu {res.cpu} -> {p['cpu_usable']} usable cores, TF threads {p['intra_op']} "
            f"intra-op / {p['inter_op']} inter-op; {p['gpus']} GPUs")


def training_nodes(opts: JobOptions) -> list[dict[str, Any]]:
    """The pod inventories of the replicas that compute: Workers (and a mirrored Chief)."""
    counts = opts.topology.replica_counts()
    types = ("Worker",) if opts.topology.strategy == PARAMETER_SERVER else ("Chief", "Worker")
    return [pod_node(opts.resources_for(t)) for t in types for _ in range(counts.get(t, 0))]


def check_batch(opts: JobOptions) -> dict[str, Any] | None:
    """The replicas and per-replica batch the training will have; ManifestError naming
    `<train stage>.config.batch_size` when the batch does not divide over them. None without
    a batch."""
    if opts.batch_size is None:
        return None
    nodes = training_nodes(opts)
    try:
        d = inventory.derive_defaults(nodes, opts.batch_size, opts.topology.strategy)
    except ValueError as exc:  # baton.errors.ConfigError: its message names the field
        raise ManifestError(f"{opts.train_stage}.config.batch_size",
                            str(exc).split(": ", 1)[1]) from None
    return {"replicas": d["replicas"], "per_replica_batch_size": d["per_replica_batch_size"]}
