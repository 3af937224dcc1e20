"""Stage `train`: a Keras 3 model trained with a graph-mode loop under a tf.distribute strategy.

One process (one_device / mirrored) trains in-process. A multi-worker topology
(`--workers N`, `--ps M`, or the spec's `cluster:` section) turns this stage into the launcher of
a local cluster: one `baton task` process per task on free 127.0.0.1 ports, each with its own
TF_CONFIG, exactly as the TFJob pods would run on Kubernetes; the chief writes the artifact.

Outputs: `model` (model.keras, history.json, train_info.json, logs/), see docs/artifacts.md.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from pathlib import Path
from typing import Any, Literal

from baton.errors import Preempted, StageError
from baton.graphs.models import BUILDERS as BUILTIN_MODELS  # the table's names (no TF import)
from baton.pipeline.context import StageContext
from baton.strategies.factory import (
    MIRRORED,
    MULTI_WORKER,
    MULTI_WORKER_MIRRORED,
    ONE_DEVICE,
    PARAMETER_SERVER,
    SINGLE_WORKER,
    CommunicationConfig,
    PartitionConfig,
    Strategy,
)
from baton.strategies.job import HISTORY_FILE, MODEL_FILE, TRAIN_INFO_FILE

INPUTS = {"transformed": True, "transform_graph": True}
OUTPUTS = ("model",)
CODE_DEPS = (
    "baton.graphs.models",
    "baton.graphs.model_fn",
    "baton.graphs.objectives",
    "baton.graphs.steps",
    "baton.graphs.user_refs",
    "baton.strategies.callbacks",
    "baton.strategies.trainer",
    "baton.strategies.ps_trainer",
    "baton.strategies.job",
)
CACHEABLE = True
# Whether the loss and metrics fit the task is known once the transform wrote the feature spec:
# checked then (exit 2), before training (check_inputs).
EARLY_INPUTS = ("transform_graph",)


@dataclasses.dataclass(frozen=True)
class Config:
    """Training settings. Topology (strategy, workers, ps) falls back to `baton run` flags, then to
    the spec's `cluster:` section."""

    # a built-in (mlp, wide_deep, cnn) or a model function "module:function" (docs/own-model.md)
    model: str = "mlp"
    model_params: dict[str, Any] = dataclasses.field(default_factory=dict)  # ModelSpec.params
    hidden_units: tuple[int, ...] = (64, 32)
    embedding_dim: int = 8
    dropout: float = 0.0
    categorical: Literal["embedding", "one_hot"] = "embedding"
    image_shape: tuple[int, ...] = ()  # () = the image shape recorded in the data (feature spec)
    filters: tuple[int, ...] = (16, 32)
    epochs: int = 20
    batch_size: int = 32
    eval_batch_size: int = 256
    learning_rate: float = 0.01
    # a Keras identifier, {class_name, config} as keras.optimizers.get takes, or "module:fn"
    optimizer: str | dict[str, Any] = "adam"
    loss: str = ""  # "": softmax cross-entropy on logits (squared error for regression)
    metrics: tuple[str, ...] = ()  # Keras metric identifiers or "module:function", on eval
    callbacks: tuple[Any, ...] = ()  # Keras callback names, {class_name, config}, "module:fn"
    seed: int = 42
    steps_per_execution: int = 20
    backup_every: int = 0
    jit_compile: bool = False
    mixed_precision: Literal["off", "mixed_float16", "mixed_bfloat16"] = "off"
    deterministic: bool = True
    cache: bool = True
    strategy: Strategy | None = None
    # a number, or auto: probe one process and multi-worker mirrored with 2..max_workers
    # workers for `probe_steps` steps each and train with the best for `objective`
    workers: int | Literal["auto"] | None = None
    max_workers: int | None = None  # workers: auto; None: the spec's, else the usable cores
    objective: Literal["speed", "energy"] | None = None  # workers: auto; None: spec's, speed
    probe_steps: int = 30  # timed steps per candidate, after one warm-up chunk
    ps: int | None = None
    # elastic multi-worker mirrored: go on with the workers left while this many remain
    min_workers: int | None = None
    max_restarts: int = 3
    # per-replica batches follow measured speed (strategies.balance); None: off (opt-in,
    # see balance_mode)
    balance: Literal["auto", "off"] | None = None
    communication: CommunicationConfig = dataclasses.field(default_factory=CommunicationConfig)
    partition: PartitionConfig = dataclasses.field(default_factory=PartitionConfig)

    def __post_init__(self) -> None:
        if self.model not in BUILTIN_MODELS and ":" not in self.model:
            import difflib

            hint = difflib.get_close_matches(self.model, BUILTIN_MODELS, n=1)
            mean = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise ValueError(
                f"model must be one of {', '.join(BUILTIN_MODELS)} or a model function "
                f"'module:function'{mean}. Received: model={self.model!r}"
            )
        for name in ("epochs", "batch_size", "eval_batch_size", "steps_per_execution",
                     "probe_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1. Received: {name}={getattr(self, name)}")
        if self.learning_rate <= 0:
            raise ValueError(
                f"learning_rate must be > 0. Received: learning_rate={self.learning_rate}"
            )
        if isinstance(self.workers, int) and self.workers < 1:
            raise ValueError(f"workers must be >= 1 (or auto). Received: workers={self.workers}")
        if self.max_workers is not None and self.max_workers < 1:
            raise ValueError(f"max_workers must be >= 1. Received: max_workers={self.max_workers}")
        if self.ps is not None and self.ps < 0:
            raise ValueError(f"ps must be >= 0. Received: ps={self.ps}")
        if self.min_workers is not None and self.min_workers < 1:
            raise ValueError(f"min_workers must be >= 1. Received: min_workers={self.min_workers}")
        if self.backup_every < 0 or self.max_restarts < 0:
            raise ValueError(
                "backup_every and max_restarts must be >= 0. Received: "
                f"backup_every={self.backup_every}, max_restarts={self.max_restarts}"
            )

    def model_config(self) -> dict[str, Any]:
        """The model function's `spec.params`: `model_params` as written for an own model; for
        a built-in, its settings from this config, overridden by `model_params`."""
        if self.model not in BUILTIN_MODELS:
            return dict(self.model_params)
        if self.model == "cnn":
            out: dict[str, Any] = {
                "image_shape": list(self.image_shape),
                "filters": list(self.filters),
                "dense_units": self.hidden_units[0],
            }
        else:
            out = {
                "hidden_units": list(self.hidden_units),
                "embedding_dim": self.embedding_dim,
                "dropout": self.dropout,
            }
        if self.model == "mlp":
            out["categorical"] = self.categorical
        return {**out, **self.model_params}

    def user_refs(self) -> list[str]:
        """Every "module:function" this config names (model, loss, metrics, optimizer,
        callbacks): the user code whose source is part of the stage's identity."""
        refs: list[Any] = [self.model, self.loss, *self.metrics, self.optimizer]
        for cb in self.callbacks:
            refs.append(cb.get("class_name") if isinstance(cb, dict) else cb)
        return [r for r in refs if isinstance(r, str) and ":" in r]


@dataclasses.dataclass(frozen=True)
class AutoWorkers:
    """`workers: auto` as resolved: where it came from and the probe's settings."""

    source: str  # e.g. "--workers auto", "config.workers=auto", "cluster.workers=auto"
    max_workers: int
    objective: str
    probe_steps: int


@dataclasses.dataclass(frozen=True)
class Topology:
    strategy: str
    workers: int
    ps: int
    min_workers: int | None = None  # elastic when below `workers` (multi-worker mirrored only)
    auto: AutoWorkers | None = None  # workers: auto, not probed yet (`run` picks the topology)

    @property
    def elastic(self) -> bool:
        return self.min_workers is not None and self.min_workers < self.workers

    @property
    def multi_process(self) -> bool:
        return self.strategy == PARAMETER_SERVER or (
            self.strategy == MULTI_WORKER_MIRRORED and self.workers > 1
        )


def topology(config: Config, options: Any, cluster: Any = None) -> Topology:
    """Flags beat the stage config, which beats the spec's cluster section.

    Raises StageError naming the flag (or config field) and value when they contradict each
    other: `--ps M` without the parameter-server strategy, `--workers N>1` with a one-process
    strategy, `parameter_server` without a PS task. See `check_options`, which reports these
    before any stage runs.
    """
    problems, topo, _ = _resolve(config, options, cluster)
    if problems:
        raise StageError("; ".join(problems))
    return topo


def _auto_source(config: Config, options: Any, cluster: Any) -> str:
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
    config: Config, options: Any, cluster: Any, source: str
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
    min_workers, mw_src = _min_workers(config, options, cluster)
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


def _resolve(config: Config, options: Any, cluster: Any) -> tuple[list[str], Topology, str]:
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
    min_workers, mw_src = _min_workers(config, options, cluster)
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


BALANCED_STRATEGIES = (MULTI_WORKER_MIRRORED, MIRRORED)


def balance_mode(config: Config, topo: Topology) -> str:
    """The resolved `balance`: as written, else off.

    Issue 14 asked for `auto` by default under multi-worker mirrored; measured here
    (bench/training/bench_balance.py, docs/training.md) it cost 3-4 % at equal speeds and did
    not win back a duty-cycle straggler, so it stays opt-in until it does.
    """
    del topo  # the default does not depend on the topology (yet)
    return config.balance or "off"


def _min_workers(config: Config, options: Any, cluster: Any) -> tuple[int | None, str]:
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


def check_options(config: Config, options: Any, stage: Any, spec: Any) -> list[str]:
    """Problems of this stage under the run's flags (`baton run` calls it before any stage runs).

    The topology (flags, then the stage config, then the spec's `cluster:` section) must be
    consistent, XLA must be supported by the resolved strategy, `balance: auto` needs a
    strategy whose replicas share a synchronous step, and a fault to inject must parse and
    name a task of that topology.
    """
    from baton.strategies.faults import FaultSpecError, parse_fault

    cluster = spec.cluster if spec is not None else None
    problems, topo, source = _resolve(config, options, cluster)
    if topo.auto is not None:
        return problems  # each candidate is a consistent topology; faults were refused above
    if not problems and config.jit_compile and topo.strategy == PARAMETER_SERVER:
        problems.append(_jit_problem(stage.name, f"{topo.strategy} ({source})"))
    if not problems and config.balance == "auto" and topo.strategy not in BALANCED_STRATEGIES:
        problems.append(_balance_problem(stage.name, f"{topo.strategy} ({source})"))
    try:
        fault = parse_fault(options.inject_failure)
    except FaultSpecError as exc:
        problems.append(str(exc))
        fault = None
    if fault is not None and fault.lost and not problems and topo.strategy == PARAMETER_SERVER:
        problems.append(
            f"inject-failure ':lost' needs strategy multi_worker_mirrored: a parameter-server "
            f"job restarts a dead worker alone and cannot shrink. Received: "
            f"{options.inject_failure!r}"
        )
    if not problems:
        problems += _batch_problems(config, topo)
    if fault is not None and not problems:
        tasks = _task_names(topo)
        if fault.task.name not in tasks:
            problems.append(
                f"inject-failure names task {fault.task.name}, which the {topo.strategy} "
                f"topology does not have (its tasks: {', '.join(tasks)}). "
                f"Received: {options.inject_failure!r}"
            )
    return problems + _slowdown_problems(options, topo)


def _batch_problems(config: Config, topo: Topology) -> list[str]:
    """The global batch must split evenly over the replicas the strategy will have on this
    node's GPUs (strategies.inventory.replicas); a local cluster's tasks share the node."""
    from baton.errors import ConfigError
    from baton.strategies import inventory

    node = inventory.node_inventory()
    nodes = [node] * max(topo.workers, 1)
    try:
        inventory.derive_defaults(nodes, config.batch_size, topo.strategy)
    except ConfigError as exc:
        return [f"config.batch_size: {str(exc).split(': ', 1)[1]}"]
    return []


def check_spec(config: Config, stage: Any, spec: Any) -> list[str]:
    """Contradictions inside the stage config itself (refused by `plan`, for every command),
    and the user code it names: a model function, loss, metric, optimizer or callback that
    cannot be imported (file:line), an unknown Keras identifier (did you mean), parameters a
    built-in model does not have."""
    problems = _code_problems(config, getattr(spec, "spec_dir", None))
    if config.jit_compile and config.strategy == PARAMETER_SERVER:
        problems.append(_jit_problem(stage.name, PARAMETER_SERVER))
    if (config.balance == "auto" and config.strategy is not None
            and config.strategy not in BALANCED_STRATEGIES):
        problems.append(_balance_problem(stage.name, config.strategy))
    if config.ps and config.strategy not in (None, PARAMETER_SERVER):
        problems.append(
            f"config.ps={config.ps} needs strategy parameter_server. "
            f"Received: strategy={config.strategy}"
        )
    if config.max_workers is not None and isinstance(config.workers, int):
        problems.append(
            f"config.max_workers={config.max_workers} needs workers: auto. "
            f"Received: workers={config.workers}"
        )
    if config.workers == "auto" and config.strategy not in (None, ONE_DEVICE,
                                                             MULTI_WORKER_MIRRORED):
        problems.append(
            f"config.workers=auto probes one process and multi-worker mirrored clusters. "
            f"Received: strategy={config.strategy}"
        )
    if config.workers == "auto" and config.min_workers is not None:
        problems.append(
            f"config.workers=auto picks the number of workers; min_workers needs a fixed one. "
            f"Received: min_workers={config.min_workers}"
        )
    if isinstance(config.workers, int) and config.workers > 1 and config.strategy in SINGLE_WORKER:
        problems.append(
            f"config.workers={config.workers} needs a multi-worker strategy. "
            f"Received: strategy={config.strategy}"
        )
    if config.min_workers is not None and config.strategy not in (None, MULTI_WORKER_MIRRORED):
        problems.append(
            f"config.min_workers={config.min_workers} needs strategy multi_worker_mirrored. "
            f"Received: strategy={config.strategy}"
        )
    if (config.min_workers is not None and isinstance(config.workers, int)
            and config.min_workers > config.workers):
        problems.append(
            f"config.min_workers must not exceed config.workers={config.workers}. "
            f"Received: min_workers={config.min_workers}"
        )
    return problems


def _code_problems(config: Config, spec_dir: Path | None) -> list[str]:
    from baton.graphs.user_refs import RefError, import_ref

    problems = []
    if config.model in BUILTIN_MODELS:
        from baton.graphs.models import builtin_config

        try:
            builtin_config(config.model, config.model_config())
        except (TypeError, ValueError) as exc:
            problems.append(f"config.model_params: {exc}")
    else:
        try:
            fn = import_ref(config.model, spec_dir, what="model function")
        except RefError as exc:
            problems.append(f"config.model: {exc}")
        else:
            if not callable(fn):
                problems.append(f"config.model: {config.model!r} is not a function. "
                                f"Received: {type(fn).__name__}")
    if not (config.loss or config.metrics or config.callbacks or config.optimizer not in (
            "adam", "sgd")):
        return problems  # the defaults: no Keras import at plan time
    from baton.graphs import objectives
    from baton.strategies.callbacks import check_callbacks

    problems += [f"config.loss: {p}" for p in objectives.check_loss(config.loss, spec_dir)]
    problems += [f"config.metrics{p}" for p in objectives.check_metrics(config.metrics, spec_dir)]
    problems += [
        f"config.optimizer: {p}" for p in objectives.check_optimizer(config.optimizer, spec_dir)
    ]
    problems += [f"config.callbacks{p}" for p in check_callbacks(config.callbacks, spec_dir)]
    return problems


def check_inputs(config: Config, inputs: dict[str, Path]) -> list[str]:
    """Once the feature spec exists (before training): Keras losses and metrics that do not fit
    its task (`accuracy` on a regression label, `mse` on classes)."""
    if not (config.loss or config.metrics) or "transform_graph" not in inputs:
        return []
    from baton.graphs.feature_spec import FeatureSpec
    from baton.graphs.objectives import task_problems

    try:
        task = FeatureSpec.load(inputs["transform_graph"]).label.task
    except (OSError, KeyError, ValueError):
        return []  # the stage itself reports an unreadable feature spec
    return [f"config.{p}" for p in task_problems(config.loss, config.metrics, task)]


def external_inputs(config: Config, spec_dir: Path | None) -> list[Path]:
    """The user's code (the modules the config names and those they import from the spec's
    directory): its bytes join the cache key, so editing a helper module reruns train."""
    refs = config.user_refs()
    if not refs:
        return []
    from baton.pipeline.user_code import user_code_files

    return user_code_files(refs, spec_dir)


def code_hash(config: Config, spec_dir: Path | None) -> str:
    """A digest of the user code's source (part of the backup key through the job)."""
    import hashlib

    files = external_inputs(config, spec_dir)
    if not files:
        return ""
    h = hashlib.sha256()
    root = spec_dir.resolve() if spec_dir is not None else None
    for f in files:
        name = str(f.relative_to(root)) if root is not None and f.is_relative_to(root) else f.name
        h.update(name.encode() + b"\0" + f.read_bytes() + b"\n")
    return h.hexdigest()[:16]


def _jit_problem(stage_name: str, strategy: str) -> str:
    return (
        f"{stage_name}.config.jit_compile: true is not supported with strategy {strategy}: "
        "XLA cannot compile a step whose variables live on the PS tasks. It works with "
        "one_device, mirrored and multi_worker_mirrored. Received: jit_compile=True, "
        f"strategy={strategy}"
    )


def _slowdown_problems(options: Any, topo: Topology) -> list[str]:
    from baton.strategies.slowdown import SlowdownSpecError, parse_slowdown

    text = getattr(options, "inject_slowdown", None)
    try:
        slow = parse_slowdown(text)
    except SlowdownSpecError as exc:
        return [str(exc)]
    if slow is None:
        return []
    tasks = _task_names(topo) if topo.multi_process else []
    if slow.task.name not in tasks:
        return [
            f"--inject-slowdown names task {slow.task.name}, which is not a process of this "
            f"{topo.strategy} topology (a local cluster's tasks: {', '.join(tasks) or 'none'}, "
            f"workers={topo.workers}). Received: {text!r}"
        ]
    return []


def _balance_problem(stage_name: str, strategy: str) -> str:
    return (
        f"{stage_name}.config.balance: auto is not supported with strategy {strategy}: it "
        "sizes the batches of replicas that share one synchronous step (multi_worker_mirrored, "
        "mirrored). one_device has one replica; parameter_server workers already go at their "
        "own pace (each pulls its next step when done). Received: balance='auto', "
        f"strategy={strategy}"
    )


def _task_names(topo: Topology) -> list[str]:
    if not topo.multi_process:
        return ["worker:0"]
    if topo.strategy == PARAMETER_SERVER:
        return ["chief:0"] + [f"worker:{i}" for i in range(topo.workers)] + [
            f"ps:{i}" for i in range(topo.ps)
        ]
    return [f"worker:{i}" for i in range(topo.workers)]


def make_job(
    config: Config,
    inputs: dict[str, Path],
    strategy: str,
    count: bool = True,
    data_hash: str = "",
    code_dir: Path | None = None,
    balance: str = "off",
) -> Any:
    """The plain TrainJob every task runs (counts the training rows once, here).

    `count=False` leaves `num_train_examples` at 0 and runs no TensorFlow op: `baton task` on a
    TFJob replica must create its multi-worker strategy first, and counts afterwards
    (`strategies.job.with_example_count`). `data_hash` (the inputs' content hashes) makes the
    backup fingerprint independent of the run directory the inputs sit in. `code_dir` (the
    spec's directory) is where every task imports the user's modules from.
    """
    from baton.graphs.feature_spec import FeatureSpec
    from baton.graphs.user_refs import RefError
    from baton.strategies.job import TrainJob, count_examples

    try:
        hash_of_code = code_hash(config, code_dir)
    except RefError as exc:
        raise StageError(f"train.config: {exc}") from None
    spec_path = inputs["transform_graph"]
    try:
        spec = FeatureSpec.load(spec_path)
    except (OSError, KeyError, ValueError) as exc:
        raise StageError(f"cannot read the feature spec in {spec_path}: {exc}") from None
    job = TrainJob(
        feature_spec=spec.to_dict(),
        transformed_dir=str(inputs["transformed"]),
        model=config.model,
        model_config=config.model_config(),
        epochs=config.epochs,
        batch_size=config.batch_size,
        eval_batch_size=config.eval_batch_size,
        learning_rate=config.learning_rate,
        optimizer=config.optimizer,
        loss=config.loss,
        metrics=list(config.metrics),
        callbacks=list(config.callbacks),
        code_dir=str(code_dir) if code_dir is not None and config.user_refs() else "",
        code_hash=hash_of_code,
        seed=config.seed,
        steps_per_execution=config.steps_per_execution,
        backup_every=config.backup_every,
        jit_compile=config.jit_compile,
        mixed_precision=config.mixed_precision,
        deterministic=config.deterministic,
        cache=config.cache,
        strategy=strategy,
        balance=balance,
        communication=dataclasses.asdict(config.communication),
        partition=dataclasses.asdict(config.partition),
        data_hash=data_hash,
    )
    if not count:
        return job
    n = count_examples(job)
    if n < config.batch_size:
        raise StageError(
            f"batch_size must not exceed the {n} training examples. "
            f"Received: batch_size={config.batch_size}"
        )
    return dataclasses.replace(job, num_train_examples=n)


def backup_dir(ctx: StageContext, job: Any) -> Path:
    """Where this stage's training backups live: stable across pids and run ids.

    `runs/<pipeline>/.backups/<stage>-<key>`, outside the stage's pid-named temporary directory
    (which the runner discards on failure or interruption). The key digests what determines
    the training, like the runner's cache key but over what training actually reads: the job
    (config, feature spec, row count; `TrainJob.fingerprint`, which includes the content hash
    of the transformed data and not its path) and the stage's code version. It leaves out the
    transform graph's SavedModel bytes, which differ between two transforms of the same data.
    So a rerun of the same spec on the same data, in the same run (`--run-id`) or a new one,
    finds the interrupted run's backup; a changed config, data or code starts afresh. The
    directory is removed once the model is written.
    """
    import hashlib

    from baton.pipeline import cache, registry

    code = cache.code_version(registry.resolve(ctx.stage_type).code_files())
    key = hashlib.sha256(f"{code}\n{job.fingerprint()}".encode()).hexdigest()[:16]
    return ctx.runs_root / ".backups" / f"{ctx.stage}-{key}"


def _content_hash(path: Path) -> str:
    """An input's content hash: from its producer's lineage record, else hashed here."""
    from baton.pipeline import lineage, store

    rec = lineage.read(path.parent) or {}
    out = rec.get("outputs", {}).get(path.name, {})
    return str(out.get("hash") or store.hash_path(path))


def run(ctx: StageContext, config: Config) -> None:
    from baton.strategies import inventory

    topo = topology(config, ctx.options, _spec_cluster(ctx))
    data_hash = _content_hash(Path(ctx.inputs["transformed"]))
    job = make_job(config, dict(ctx.inputs), topo.strategy, data_hash=data_hash,
                   code_dir=ctx.spec_dir, balance=balance_mode(config, topo))
    node = inventory.node_inventory()
    probe_info: dict[str, Any] | None = None
    if topo.auto is not None:
        topo, job, probe_info = _pick_topology(ctx, config, job, topo.auto, node)
    backups = backup_dir(ctx, job)
    out = ctx.output("model")
    if not topo.multi_process and "threads" not in node:  # a task sets its own (commands.task)
        node["threads"] = inventory.apply_threads(inventory.thread_plan(node, 1))
    defaults = inventory.derive_defaults([node] * max(topo.workers, 1), job.batch_size,
                                         topo.strategy)
    ctx.log(
        f"strategy {topo.strategy}, workers {topo.workers}, ps {topo.ps}; "
        f"{inventory.describe(node)}; "
        f"{inventory.describe_defaults(defaults)}"
    )
    found = " (holds a backup: resuming from it)" if (backups / "checkpoint").is_file() else ""
    ctx.log(f"backups in {backups}{found}")
    if topo.multi_process:
        _run_cluster(ctx, config, job, topo, out, backups)
    else:
        _run_in_process(ctx, job, out, node, defaults, backups)
    info = json.loads((out / TRAIN_INFO_FILE).read_text())
    history = json.loads((out / HISTORY_FILE).read_text())
    last = history[-1] if history else {}
    from baton.strategies.elastic import describe_segments

    resized = {"elastic_ex_s": describe_segments(info["segments"])} if info.get("elastic") else {}
    if probe_info is not None:  # the probe's table and choice, beside the run they chose
        info["topology_probe"] = probe_info
        (out / TRAIN_INFO_FILE).write_text(json.dumps(info, indent=2, default=str) + "\n")
        resized.update(auto_workers=probe_info["chosen"]["workers"],
                       probe_ex_s=">".join(f"{c['workers']}:{c['examples_per_sec']:.0f}"
                                           for c in probe_info["candidates"]),
                       probe_s=round(probe_info["seconds"], 2))
    ctx.record(
        steps=info["steps"],
        **resized,  # examples/s of each group size, e.g. "2:5120>1:2980" (the table shows it)
        examples_per_sec=info["examples_per_sec"],
        strategy=info["strategy"],
        replicas=info.get("num_replicas", defaults["replicas"]),
        per_replica_batch_size=defaults["per_replica_batch_size"],
        # this run's examples (a resumed run counts from its backup): the runner divides the
        # stage's energy by it (usage.j_per_example)
        examples_trained=(info["steps"] - info.get("resumed_from_step", 0)) * job.batch_size,
        **{k: round(v, 4) for k, v in last.items() if k.startswith(("eval_", "train_"))},
    )


def _candidate_job(config: Config, job: Any, cand: Any) -> Any:
    """The real job with a candidate's strategy (and the balance that strategy would get)."""
    topo = Topology(cand.strategy, cand.workers, 0)
    balance = "off" if cand.strategy == ONE_DEVICE else balance_mode(config, topo)
    return dataclasses.replace(job, strategy=cand.strategy, balance=balance)


def _pick_topology(
    ctx: StageContext, config: Config, job: Any, auto: AutoWorkers, node: dict
) -> tuple[Topology, Any, dict[str, Any]]:
    """`workers: auto`: probe every candidate on this job, pick one, say why.

    A candidate whose backup is on disk (an interrupted auto run) is taken without probing, so
    the rerun resumes it. Otherwise each is probed for one warm-up chunk plus `probe_steps`
    timed steps: one process in this process, clusters through the launcher with the same job
    (user callbacks left out: their side effects belong to the real run). Probes write their
    backups (a cluster's tasks need a directory) under this stage's work directory, removed
    after each probe: the real run starts from step 0.
    """
    import time

    from baton import energy
    from baton.strategies import inventory
    from baton.strategies import probe as probing

    cands = probing.candidates(auto.max_workers)
    for cand in cands:
        cand_job = _candidate_job(config, job, cand)
        if (backup_dir(ctx, cand_job) / "checkpoint").is_file():
            reason = f"picked {cand.label}: its backup is on disk (resuming it, no probe)"
            ctx.log(f"workers auto ({auto.source}): {reason}")
            info = {"source": auto.source, "objective": auto.objective, "candidates": [],
                    "chosen": {"strategy": cand.strategy, "workers": cand.workers},
                    "reason": reason, "seconds": 0.0, "max_workers": auto.max_workers}
            return Topology(cand.strategy, cand.workers, 0), cand_job, info
    energy_config = _spec_energy(ctx)
    counter = energy.open_counter(energy_config)
    total = job.epochs * job.steps_per_epoch()
    probe_len = job.steps_per_execution + auto.probe_steps
    ctx.log(
        f"workers auto ({auto.source}): probing {', '.join(c.label for c in cands)} for "
        f"{job.steps_per_execution} warm-up + {auto.probe_steps} timed steps each "
        f"(objective {auto.objective}, energy {energy.RAPL if counter else energy.ESTIMATE})"
        + (f"; the job has only {total} steps, each probe runs as long as training"
           if total <= probe_len else ""))
    # this process's thread pools, set before TensorFlow starts (the one-process probe and a
    # one-process real run both train here)
    node["threads"] = inventory.apply_threads(inventory.thread_plan(node, 1))
    measured = []
    started = time.monotonic()
    sampler = probing.RaplSampler(counter) if counter is not None else None
    with sampler if sampler is not None else _nothing():
        for i, cand in enumerate(cands):
            probe_job = dataclasses.replace(
                _candidate_job(config, job, cand), probe_steps=auto.probe_steps, callbacks=[])
            t0 = time.monotonic()
            try:
                windows = (_probe_in_process(probe_job) if cand.workers == 1 else
                           _probe_cluster(ctx, probe_job, cand, ctx.work_dir / f"probe-{i}"))
                error = ""
            except Exception as exc:  # noqa: BLE001 - a failed candidate is reported, not fatal
                windows, error = [], f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            rapl_j = (sampler.joules_between(windows[0]["started_at"], windows[0]["ended_at"])
                      if sampler is not None and windows and windows[0].get("steps") else None)
            m = probing.measure(cand, windows, job.batch_size, energy_config.pue, rapl_j,
                                wall_s=time.monotonic() - t0)
            if error:
                m = dataclasses.replace(m, error=error)
            measured.append(m)
    try:
        chosen, reason = probing.choose(measured, auto.objective)
    except ValueError as exc:
        raise StageError(f"workers auto: {exc}") from None
    for line in probing.table(measured, chosen):
        ctx.log(f"  {line}")
    ctx.log(f"workers auto: {reason}")
    cand = chosen.candidate
    info = {
        "source": auto.source, "objective": auto.objective, "max_workers": auto.max_workers,
        "probe_steps": auto.probe_steps, "warmup_steps": job.steps_per_execution,
        "energy_method": energy.RAPL if counter else energy.ESTIMATE,
        "candidates": [m.as_dict() for m in measured],
        "chosen": {"strategy": cand.strategy, "workers": cand.workers},
        "reason": reason, "seconds": round(time.monotonic() - started, 2),
    }
    return Topology(cand.strategy, cand.workers, 0), _candidate_job(config, job, cand), info


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _probe_in_process(job: Any) -> list[dict[str, Any]]:
    from baton.strategies import trainer
    from baton.strategies.job import run_task

    result = run_task(job, None, trainer.TaskRole(is_chief=True, backup_dir=None))
    assert result is not None
    return [result.info.get("window", {})]


def _probe_cluster(ctx: StageContext, job: Any, cand: Any, work: Path) -> list[dict[str, Any]]:
    from baton.strategies import launcher

    work.mkdir(parents=True, exist_ok=True)
    job_file = work / "job.json"
    job_file.write_text(job.to_json())
    try:
        result = launcher.launch(
            launcher.LaunchConfig(workers=cand.workers, strategy=cand.strategy, max_restarts=0,
                                  state_dir=work / "launcher", global_batch_size=job.batch_size),
            lambda task: task_argv(job_file, work / "out", work / "backup"),
            stream=ctx.stream, quiet=True,
        )
        if not result.ok:
            raise StageError(f"probe cluster failed: {result.error}")
        reports = sorted((work / "out" / "probe").glob("*.json"),
                         key=lambda p: int(p.stem.rpartition("-")[2]))  # worker-0 first
        return [json.loads(p.read_text()) for p in reports]
    finally:
        shutil.rmtree(work, ignore_errors=True)  # its backups with it


def _spec_energy(ctx: StageContext) -> Any:
    from baton.energy import EnergyConfig
    from baton.pipeline.spec import load_spec

    try:
        return load_spec(ctx.spec_path).energy if ctx.spec_path else EnergyConfig()
    except Exception:  # noqa: BLE001 - the energy section is optional context here
        return EnergyConfig()


def _run_in_process(
    ctx: StageContext, job: Any, out: Path, node: dict, defaults: dict, backups: Path
) -> None:
    from baton.strategies import faults, trainer
    from baton.strategies.job import run_task, write_model_artifact
    from baton.strategies.preemption import stop_on_sigterm

    bar = ctx.progress(job.epochs * job.steps_per_epoch(), "steps", label=ctx.stage)

    def on_progress(step: int, total: int, metrics: dict[str, float]) -> None:
        bar.set(step)

    role = trainer.TaskRole(
        is_chief=True,
        task_name="worker:0",
        backup_dir=backups,
        logs_dir=out / "logs",
        fault=faults.parse_fault(ctx.options.inject_failure),
        on_progress=on_progress,
    )
    # SIGTERM: stop at the next chunk boundary, save, exit 143 (not a death without a backup).
    with stop_on_sigterm(role.stop.set) as sigterm:
        role.after_strategy = sigterm.install  # a multi-worker strategy installs its own
        try:
            result = run_task(job, None, role)
        except Preempted as exc:
            bar.close()
            raise Preempted(f"training {exc} in {backups}; rerun to resume", step=exc.step) from None
    bar.close()
    assert result is not None
    write_model_artifact(
        out,
        job,
        result,
        {"cluster": {"workers": 1, "ps": 0}, "inventory": [node], "defaults": defaults},
    )
    if sigterm.seen:  # it came after the last chunk: the final backup stands, resume is instant
        raise Preempted(f"SIGTERM after training finished; backup in {backups}")
    shutil.rmtree(backups, ignore_errors=True)


def task_argv(job_file: Path, out: Path, backup_dir: Path) -> list[str]:
    """The command of one local task: `baton task` in its explicit form (a counted job file)."""
    return [sys.executable, "-m", "baton.pipeline.commands.task", "--job", str(job_file),
            "--out", str(out), "--backup-dir", str(backup_dir)]


def _run_cluster(
    ctx: StageContext, config: Config, job: Any, topo: Topology, out: Path, backups: Path
) -> None:
    from baton.strategies import faults, launcher
    from baton.strategies.slowdown import parse_slowdown

    job_file = ctx.work_dir / "job.json"
    job_file.write_text(job.to_json())
    fault = faults.parse_fault(ctx.options.inject_failure)
    cluster_out = ctx.work_dir / "cluster"

    def command(task: Any) -> list[str]:
        return task_argv(job_file, cluster_out, backups)

    bar = ctx.progress(job.epochs * job.steps_per_epoch(), "steps", label=ctx.stage)
    result = launcher.launch(
        launcher.LaunchConfig(
            workers=topo.workers,
            ps=topo.ps,
            strategy=topo.strategy,
            max_restarts=config.max_restarts,
            fault=fault,
            state_dir=ctx.work_dir / "launcher",
            slowdown=parse_slowdown(getattr(ctx.options, "inject_slowdown", None)),
            min_workers=topo.min_workers if topo.strategy == MULTI_WORKER_MIRRORED else None,
            global_batch_size=job.batch_size,
        ),
        command,
        stream=ctx.stream,
        quiet=ctx.options.quiet,
        on_step=bar.set,
    )
    bar.close()
    if result.preempted:
        raise Preempted(f"training cluster {result.error}; backup in {backups}; rerun to resume")
    if not result.ok:
        raise StageError(f"training cluster failed: {result.error}")
    produced = cluster_out / "model"
    if not (produced / MODEL_FILE).is_file():
        raise StageError(f"the chief finished but wrote no model into {produced}")
    shutil.rmtree(out)
    produced.replace(out)
    info = json.loads((out / TRAIN_INFO_FILE).read_text())
    info["restarts"] = result.restarts
    info["launcher"] = result.summary()
    if topo.elastic or result.elastic:
        # strategies/elastic.py: each resize and the speed of each group size
        info["min_workers"] = topo.min_workers
        info["elastic"] = result.elastic
        info["segments"] = result.segments
    (out / TRAIN_INFO_FILE).write_text(json.dumps(info, indent=2, default=str) + "\n")
    shutil.rmtree(backups, ignore_errors=True)


def _spec_cluster(ctx: StageContext) -> Any:
    from baton.pipeline.spec import load_spec

    try:
        return load_spec(ctx.spec_path).cluster if ctx.spec_path else None
    except Exception:  # noqa: BLE001 - the cluster section is optional context here
        return None
