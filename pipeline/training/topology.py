"""Which topology a training run gets: strategy, workers, ps, min_workers, `workers: auto`.

The topology itself (strategies.topology.Topology) is what the run follows; here is where it
comes from.

Flags beat the stage config, which beats the spec's `cluster:` section. Every contradiction is
reported with its source and value (`resolve`), so `baton run` refuses it with exit 2 before
any stage runs, and the stage raises the same text.
"""

from __future__ import annotations

from typing import Any

from baton.errors import StageError
from baton.strategies.factory import (
    MULTI_WORKER,
    MULTI_WORKER_MIRRORED,
    ONE_DEVICE,
    PARAMETER_SERVER,
)
from baton.strategies.settings import TrainSettings
from baton.strategies.topology import AutoWorkers, Topology
from baton.strategies.topology import balance_mode as balance_mode
from baton.strategies.topology import task_names as task_names


def topology(config: TrainSettings, options: Any, cluster: Any = None) -> Topology:
    """Flags beat the stage config, which beats the spec's cluster section.

    Raises StageError naming the flag (or config field) and value when they contradict each
    other: `--ps M` without the parameter-server strategy, `--workers N>1` with a one-process
    strategy, `parameter_server` without a PS task. See `check_options`, which reports these
    before any stage runs.
    """
    problems, topo, _ = resolve(config, options, cluster)
    if problems:
        raise StageError("; ".join(problems))
    return topo


def _auto_source(config: TrainSettings, options: Any, cluster: Any) -> str:
    """Where `workers: auto` comes from ("" when the workers are a number): a number given by
    a flag or the stage config beats an auto below it, and the other way round."""
    if options.workers:
        return ""
    if getattr(options, "workers_auto", False):
        return "--workers auto"
    if config.workers is not None:
        return "config.workers=auto" if config.workers == "auto" else ""
    return "cluster.workers=auto" if getattr(cluster, "workers", 1) == "auto" else ""


def _resolve_auto(
    config: TrainSettings, options: Any, cluster: Any, source: str
) -> tuple[list[str], Topology, str]:
    """`workers: auto`: the probe's settings, and what contradicts them (named with values)."""
    from baton.strategies.inventory import node_inventory

    from_spec = source.startswith("cluster.")
    if config.max_workers is not None:
        max_workers, m_src = config.max_workers, f"config.max_workers={config.max_workers}"
    elif getattr(cluster, "max_workers", None) is not None:
        max_workers, m_src = cluster.max_workers, f"cluster.max_workers={cluster.max_workers}"
    else:
        max_workers, m_src = max(1, int(node_inventory()["cpu_usable"])), "the usable cores"
    objective = config.objective or (getattr(cluster, "objective", None) if cluster else None)
    problems = []
    strategy = options.strategy or config.strategy or (
        cluster.strategy if from_spec and cluster is not None else None)
    if strategy not in (None, ONE_DEVICE, MULTI_WORKER_MIRRORED):
        s_src = (f"--strategy {options.strategy}" if options.strategy else
                 f"config.strategy={config.strategy}" if config.strategy else
                 f"cluster.strategy={strategy}")
        problems.append(
            f"{source} probes one process (one_device) and multi-worker mirrored clusters, "
            f"so it cannot be combined with strategy {strategy}: drop the strategy or give a "
            f"number of workers. Received: {s_src}")
    ps = options.ps if options.ps is not None else config.ps
    if ps:
        ps_src = f"--ps {options.ps}" if options.ps is not None else f"config.ps={config.ps}"
        problems.append(f"{source} cannot be combined with parameter-server tasks. "
                        f"Received: {ps_src}")
    min_workers, mw_src = resolve_min_workers(config, options, cluster)
    if min_workers is not None and not (mw_src.startswith("cluster.") and not from_spec):
        problems.append(
            f"{source} picks the number of workers; min_workers (elastic) needs a fixed one: "
            f"give workers: N with it. Received: {mw_src}")
    if max_workers < 1:
        problems.append(f"max_workers must be >= 1. Received: {m_src}")
    for flag, value in (("--inject-failure", options.inject_failure),
                        ("--inject-slowdown", getattr(options, "inject_slowdown", None))):
        if value:
            problems.append(f"{flag} rehearses a fixed topology; {source} picks one at run "
                            f"time: give --workers N. Received: {flag} {value}")
    auto = AutoWorkers(source, max_workers, objective or "speed", config.probe_steps)
    return problems, Topology(ONE_DEVICE, 1, 0, auto=auto), source


def resolve(config: TrainSettings, options: Any, cluster: Any) -> tuple[list[str], Topology, str]:
    """(problems, topology, where the strategy came from); problems name their sources."""
    auto_source = _auto_source(config, options, cluster)
    if auto_source:
        return _resolve_auto(config, options, cluster, auto_source)
    if config.max_workers is not None and not options.workers:
        return ([f"config.max_workers={config.max_workers} needs workers: auto (the stage's "
                 "workers, the spec's cluster.workers or --workers auto). Received: workers="
                 f"{config.workers if config.workers is not None else _cw(cluster)}"],
                Topology(ONE_DEVICE, 1, 0), "")
    if options.workers:
        workers, w_src = options.workers, f"--workers {options.workers}"
    elif isinstance(config.workers, int):
        workers, w_src = config.workers, f"config.workers={config.workers}"
    else:
        workers = _cw(cluster)
        w_src = f"cluster.workers={workers}"
    if options.ps is not None:
        ps, ps_src = options.ps, f"--ps {options.ps}"
    elif config.ps is not None:
        ps, ps_src = config.ps, f"config.ps={config.ps}"
    else:
        ps, ps_src = (cluster.ps if cluster else 0), ""  # the spec's section: a default only
    strategy = options.strategy or config.strategy
    s_src = (
        f"--strategy {options.strategy}"
        if options.strategy
        else (f"config.strategy={config.strategy}" if config.strategy else "")
    )
    if strategy is None:
        if ps:
            strategy = PARAMETER_SERVER
            if ps_src:
                s_src = f"implied by {ps_src}"
            elif cluster is not None and cluster.strategy == PARAMETER_SERVER:
                s_src = "cluster.strategy=parameter_server"
            else:
                s_src = f"implied by cluster.ps={ps}"
        elif options.workers and options.workers > 1:
            strategy, s_src = MULTI_WORKER_MIRRORED, f"implied by {w_src}"
        else:
            strategy = cluster.strategy if cluster else ONE_DEVICE
            s_src = f"cluster.strategy={strategy}" if cluster else "the default"
            if strategy == ONE_DEVICE and workers > 1:
                strategy, s_src = MULTI_WORKER_MIRRORED, f"implied by {w_src}"
    problems = []
    if strategy == PARAMETER_SERVER and ps < 1:
        given = ps_src or "no --ps"
        problems.append(
            f"strategy parameter_server ({s_src}) needs at least one ps task: pass --ps M "
            f"(M >= 1). Received: {given}"
        )
    if strategy != PARAMETER_SERVER and ps and ps_src:
        problems.append(
            f"{ps_src} needs strategy parameter_server, but the strategy is {strategy} "
            f"({s_src}); drop the ps tasks or use --strategy parameter_server. "
            f"Received: {ps_src}"
        )
    if strategy not in MULTI_WORKER and workers > 1:
        problems.append(
            f"{w_src} needs a multi-worker strategy (multi_worker_mirrored or parameter_server), "
            f"but the strategy is {strategy} ({s_src}), which trains in one process. "
            f"Received: {w_src}"
        )
    min_workers, mw_src = resolve_min_workers(config, options, cluster)
    overridden = options.workers or options.strategy or config.workers or config.strategy
    if mw_src.startswith("cluster.") and overridden and (
        strategy != MULTI_WORKER_MIRRORED or min_workers > workers  # type: ignore[operator]
    ):
        min_workers = None  # the spec's section is a default: it does not fit this topology
    if min_workers is not None and strategy != MULTI_WORKER_MIRRORED:
        problems.append(
            f"{mw_src} needs strategy multi_worker_mirrored (an elastic job goes on with fewer "
            f"synchronous workers), but the strategy is {strategy} ({s_src}). Received: {mw_src}"
        )
    elif min_workers is not None and not 1 <= min_workers <= workers:
        problems.append(
            f"min_workers must be between 1 and the number of workers ({w_src}). "
            f"Received: {mw_src}"
        )
    topo = Topology(strategy, workers, ps if strategy == PARAMETER_SERVER else 0,
                    min_workers if not problems else None)
    return problems, topo, s_src


def _cw(cluster: Any) -> int:
    """The spec's cluster.workers as a number (auto there is overridden when this is asked)."""
    workers = cluster.workers if cluster is not None else 1
    return workers if isinstance(workers, int) else 1


def resolve_min_workers(
    config: TrainSettings, options: Any, cluster: Any
) -> tuple[int | None, str]:
    """min_workers and where it came from: --min-workers, config.min_workers, the spec's
    cluster.min_workers (None: every worker is needed)."""
    flag = getattr(options, "min_workers", None)
    if flag is not None:
        return flag, f"--min-workers {flag}"
    if config.min_workers is not None:
        return config.min_workers, f"config.min_workers={config.min_workers}"
    spec_value = getattr(cluster, "min_workers", None) if cluster is not None else None
    if spec_value is not None:
        return spec_value, f"cluster.min_workers={spec_value}"
    return None, ""
