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
from pathlib import Path
from typing import Any, Literal

from baton.errors import StageError
from baton.graphs.models import BUILDERS as BUILTIN_MODELS  # the table's names (no TF import)
from baton.pipeline.context import StageContext

# the topology and the ways to run a job live in pipeline.training; these names are the stage's
# (commands.task, commands.k8s and the tests reach them here)
from baton.pipeline.training.execution import (
    backup_dir,
    content_hash,
    examples_trained,
    run_cluster,
    run_in_process,
    spec_cluster,
)
from baton.pipeline.training.execution import (
    task_argv as task_argv,
)
from baton.pipeline.training.topology import (
    BALANCED_STRATEGIES,
    Topology,
    balance_mode,
    resolve,
    task_names,
    topology,
)
from baton.pipeline.training.topology import (
    AutoWorkers as AutoWorkers,
)
from baton.strategies.factory import (
    MULTI_WORKER_MIRRORED,
    ONE_DEVICE,
    PARAMETER_SERVER,
    SINGLE_WORKER,
    CommunicationConfig,
    PartitionConfig,
    Strategy,
)
from baton.strategies.job import HISTORY_FILE, TRAIN_INFO_FILE

INPUTS = {"transformed": True, "transform_graph": True}
OUTPUTS = ("model",)
CODE_DEPS = (
    "baton.graphs.models",
    "baton.graphs.model_fn",
    "baton.graphs.objectives",
    "baton.graphs.model_outputs",
    "baton.graphs.compiled",
    "baton.graphs.metric_records",
    "baton.graphs.nonfinite",
    "baton.strategies.nonfinite_guard",
    "baton.graphs.steps",
    "baton.graphs.user_refs",
    "baton.strategies.callbacks",
    "baton.strategies.trainer",
    "baton.strategies.ps_trainer",
    "baton.strategies.job",
    "baton.pipeline.training.auto_workers",
    "baton.pipeline.training.execution",
    "baton.pipeline.training.topology",
)
CACHEABLE = True
# spec.hyperparameters' own keys (strategies.job.TrainJob.hyperparameters), beside model_params
HYPERPARAMETER_KEYS = frozenset({"learning_rate", "batch_size", "epochs", "steps", "eval_steps",
                                 "seed"})
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
    # handed to the model function as spec.custom_config, as written (TFX's fn_args.custom_config)
    custom_config: dict[str, Any] = dataclasses.field(default_factory=dict)
    hidden_units: tuple[int, ...] = (64, 32)
    embedding_dim: int = 8
    dropout: float = 0.0
    categorical: Literal["embedding", "one_hot"] = "embedding"
    image_shape: tuple[int, ...] = ()  # () = the image shape recorded in the data (feature spec)
    filters: tuple[int, ...] = (16, 32)
    epochs: int = 20
    # TFX's TrainArgs(num_steps) / EvalArgs(num_steps): 0 = by epochs / the whole eval split
    steps: int = 0
    eval_steps: int = 0
    batch_size: int = 32
    eval_batch_size: int = 256
    learning_rate: float = 0.01
    # a Keras identifier, {class_name, config} as keras.optimizers.get takes, or "module:fn";
    # "": the model's compile() optimizer if it has one, else adam
    optimizer: str | dict[str, Any] = ""
    # "": the model's compile() loss if it has one, else softmax cross-entropy (squared error
    # for regression); built for logits, or for probabilities when the model ends in a softmax
    loss: str = ""
    metrics: tuple[str, ...] = ()  # Keras metric identifiers or "module:function", on eval
    callbacks: tuple[Any, ...] = ()  # Keras callback names, {class_name, config}, "module:fn"
    seed: int = 42
    # a non-finite training or eval loss: fail the stage, or restore the last epoch whose
    # losses were finite and end training there (docs/training.md)
    on_nonfinite: Literal["fail", "restore"] = "fail"
    steps_per_execution: int = 20
    backup_every: int = 0
    jit_compile: bool = False
    # TensorFlow's executor for the train and eval graphs (graphs.executor): auto runs small
    # models on one CPU device on the single-threaded one
    executor: Literal["auto", "single_threaded", "default"] = "auto"
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
    # per-replica batches follow measured speed (strategies.balance); None: auto under
    # multi-worker mirrored with 2+ workers, else off (balance_mode says why)
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
        if self.steps < 0 or self.eval_steps < 0:
            raise ValueError(f"steps and eval_steps must be >= 0 (0: by epochs, the whole eval "
                             f"split). Received: steps={self.steps}, eval_steps={self.eval_steps}")
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


def replica_config(config: Config) -> Config:
    """The config a TFJob replica checks and runs (commands.task, and commands.k8s checking
    for it): a TFJob's replica count is fixed and the operator's restartPolicy handles a lost
    pod, so the local launcher's `workers: auto`, `min_workers` and `max_workers` go."""
    return dataclasses.replace(config, min_workers=None, max_workers=None,
                               workers=None if config.workers == "auto" else config.workers)


def run_settings(config: Config, options: Any, spec: Any) -> dict[str, Any]:
    """What shapes the trained model beyond the config, for the cache key: the topology the
    flags, the config and the spec's `cluster:` section resolve to, the balance mode, and a
    rehearsed fault or slowdown (a run asked to rehearse one runs it). Without it a
    `--workers 2` run after a one-process run was a cache hit of the one-process model."""
    cluster = spec.cluster if spec is not None else None
    topo = topology(config, options, cluster)
    if topo.auto is not None:  # the probe picks the topology at run time
        settings: dict[str, Any] = {"workers": "auto", "max_workers": topo.auto.max_workers,
                                    "objective": topo.auto.objective}
    else:
        settings = {"strategy": topo.strategy, "workers": topo.workers, "ps": topo.ps,
                    "min_workers": topo.min_workers, "balance": balance_mode(config, topo)}
    for flag in ("inject_failure", "inject_slowdown"):
        if getattr(options, flag, None):
            settings[flag] = getattr(options, flag)
    return settings


def check_options(config: Config, options: Any, stage: Any, spec: Any) -> list[str]:
    """Problems of this stage under the run's flags (`baton run` calls it before any stage runs).

    The topology (flags, then the stage config, then the spec's `cluster:` section) must be
    consistent, XLA must be supported by the resolved strategy, `balance: auto` needs a
    strategy whose replicas share a synchronous step, and a fault to inject must parse and
    name a task of that topology.
    """
    from baton.strategies.faults import FaultSpecError, parse_fault

    cluster = spec.cluster if spec is not None else None
    problems, topo, source = resolve(config, options, cluster)
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
        tasks = task_names(topo)
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
    written = getattr(stage, "config", None) or {}
    if config.steps and "epochs" in written:
        problems.append(
            f"{stage.name}.config: give steps (training runs that many steps, as TFX's "
            "TrainArgs(num_steps)) or epochs, not both. Received: "
            f"steps={config.steps}, epochs={config.epochs}")
    clash = sorted(set(config.model_params) & HYPERPARAMETER_KEYS)
    if clash:
        problems.append(
            f"{stage.name}.config.model_params: {', '.join(map(repr, clash))} "
            f"{'is a train setting' if len(clash) == 1 else 'are train settings'} (the model "
            "function reads it as spec.hyperparameters[...]): set it in the stage's config. "
            f"Received: model_params={config.model_params!r}")
    if config.jit_compile and config.strategy == PARAMETER_SERVER:
        problems.append(_jit_problem(stage.name, PARAMETER_SERVER))
    if config.jit_compile and config.deterministic and config.model == "cnn":
        # XLA's max-pooling gradient is not deterministic, and TensorFlow's op determinism
        # refuses it at the first step; a user model with pooling gets that as a stage error
        problems.append(
            f"{stage.name}.config.jit_compile: true with deterministic: true cannot train the "
            "built-in cnn: XLA has no deterministic max-pooling gradient. Set deterministic: "
            "false (runs are then not bitwise repeatable) or jit_compile: false. Received: "
            "jit_compile=True, deterministic=True, model='cnn'"
        )
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
            "", "adam", "sgd")):
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
    its task (`accuracy` on a regression label, `mse` on classes); transformed features the
    built-in mlp or wide_deep cannot take (a string, int64 without an id range, ragged or
    sparse), each named with its fix."""
    if "transform_graph" not in inputs or not (
            config.loss or config.metrics or config.model in ("mlp", "wide_deep")):
        return []
    from baton.graphs.feature_spec import FeatureSpec
    from baton.graphs.models import unusable
    from baton.graphs.objectives import task_problems

    try:
        spec = FeatureSpec.load(inputs["transform_graph"])
    except (OSError, KeyError, ValueError):
        return []  # the stage itself reports an unreadable feature spec
    problems = [f"config.{p}" for p in task_problems(config.loss, config.metrics, spec.label.task)]
    if config.model in ("mlp", "wide_deep"):
        problems += [f"config.model: the built-in {config.model} cannot take {p}"
                     for p in unusable(spec)]
    return problems


def ignored_outputs(job: Any) -> list[str]:
    """Warnings for the transformed features a built-in model leaves out (the cnn's non-image
    outputs), each named."""
    from baton.graphs.feature_spec import FeatureSpec
    from baton.graphs.models import ignored

    if job.model not in BUILTIN_MODELS:
        return []
    return ignored(job.model, FeatureSpec.from_dict(job.feature_spec), job.model_config)


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
    tasks = task_names(topo) if topo.multi_process else []
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


def make_job(
    config: Config,
    inputs: dict[str, Path],
    strategy: str,
    count: bool = True,
    data_hash: str = "",
    code_dir: Path | None = None,
    balance: str = "off",
    elastic: bool = False,
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
        steps=config.steps,
        eval_steps=config.eval_steps,
        batch_size=config.batch_size,
        eval_batch_size=config.eval_batch_size,
        learning_rate=config.learning_rate,
        optimizer=config.optimizer,
        loss=config.loss,
        metrics=list(config.metrics),
        callbacks=list(config.callbacks),
        code_dir=str(code_dir) if code_dir is not None and config.user_refs() else "",
        code_hash=hash_of_code,
        custom_config=dict(config.custom_config),
        on_nonfinite=config.on_nonfinite,
        seed=config.seed,
        steps_per_execution=config.steps_per_execution,
        backup_every=config.backup_every,
        jit_compile=config.jit_compile,
        executor=config.executor,
        mixed_precision=config.mixed_precision,
        deterministic=config.deterministic,
        cache=config.cache,
        strategy=strategy,
        balance=balance,
        elastic=elastic,
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


def run(ctx: StageContext, config: Config) -> None:
    from baton.strategies import inventory

    topo = topology(config, ctx.options, spec_cluster(ctx))
    data_hash = content_hash(Path(ctx.inputs["transformed"]))
    job = make_job(config, dict(ctx.inputs), topo.strategy, data_hash=data_hash,
                   code_dir=ctx.spec_dir, balance=balance_mode(config, topo),
                   elastic=topo.elastic)
    node = inventory.node_inventory()
    probe_info: dict[str, Any] | None = None
    if topo.auto is not None:
        from baton.pipeline.training.auto_workers import pick_topology

        topo, job, probe_info = pick_topology(ctx, config, job, topo.auto, node)
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
    for line in ignored_outputs(job):
        ctx.log(line)
    found = " (holds a backup: resuming from it)" if (backups / "checkpoint").is_file() else ""
    ctx.log(f"backups in {backups}{found}")
    if topo.multi_process:
        run_cluster(ctx, config.max_restarts, job, topo, out, backups)
    else:
        run_in_process(ctx, job, out, node, defaults, backups)
    info = json.loads((out / TRAIN_INFO_FILE).read_text())
    for line in _model_notes(info):
        ctx.log(line)
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
        # the runner divides the stage's energy by it (usage.j_per_example)
        examples_trained=examples_trained(info, job.batch_size),
        **{k: round(v, 4) for k, v in last.items() if k.startswith(("eval_", "train_"))},
    )




def _model_notes(info: dict[str, Any]) -> list[str]:
    """What training decided about the model, for the stage's log: probabilities at its end,
    what its compile() gave, a non-finite loss that ended training at a restored epoch."""
    lines = []
    outputs = info.get("outputs") or {}
    if outputs.get("kind") == "probabilities":
        lines.append(f"the model outputs probabilities ({outputs.get('reason')}): trained with "
                     "the loss and metrics on probabilities (from_logits=False) and served as "
                     "they are")
    compiled = info.get("compile")
    if compiled:
        used = ", ".join(compiled.get("used", [])) or "nothing"
        replaced = compiled.get("replaced_by_spec")
        lines.append(f"the model function compiled the model (loss {compiled.get('loss')!r}, "
                     f"optimizer {compiled.get('optimizer')}, metrics {compiled.get('metrics')}): "
                     f"used its {used}" + (f"; the spec's {', '.join(replaced)} replaced "
                                           "compile()'s" if replaced else ""))
    bad = info.get("nonfinite")
    if bad:
        what = bad.get("what") or f"the {bad['loss']} loss was not finite in epoch {bad['epoch']}"
        lines.append(f"warning: {what} ({bad['cause']}); on_nonfinite: restore put back the "
                     f"weights of epoch {bad.get('restored_epoch')} and ended training there")
    return lines
