"""Stage `train`: a Keras 3 model trained with a graph-mode loop under a tf.distribute strategy.

One process (one_device / mirrored) trains in-process. A multi-worker topology
(`--workers N`, `--ps M`, or the spec's `cluster:` section) turns this stage into the launcher of
a local cluster: one `baton task` process per task on free 127.0.0.1 ports, each with its own
TF_CONFIG, exactly as the TFJob pods would run on Kubernetes; the chief writes the artifact.

Outputs: `model` (model.keras, history.json, train_info.json, logs/), see docs/artifacts.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from baton.errors import StageError
from baton.graphs.models import BUILDERS as BUILTIN_MODELS  # the table's names (no TF import)
from baton.pipeline.context import StageContext

# where the topology comes from and what the stage lends its job's run live in
# pipeline.training; these names are the stage's (commands.task, commands.k8s and the tests
# reach them here)
from baton.pipeline.training.execution import (
    content_hash,
    examples_trained,
    host,
    spec_cluster,
)
from baton.pipeline.training.execution import (
    task_argv as task_argv,
)
from baton.pipeline.training.topology import (
    AutoWorkers as AutoWorkers,
)
from baton.pipeline.training.topology import (
    Topology,
    balance_mode,
    resolve,
    task_names,
    topology,
)
from baton.strategies.factory import BALANCED_STRATEGIES, PARAMETER_SERVER
from baton.strategies.job import HISTORY_FILE, TRAIN_INFO_FILE
from baton.strategies.settings import (
    TrainSettings,
    balance_problem,
    jit_problem,
)

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
    "baton.graphs.nonfinite_guard",
    "baton.graphs.steps",
    "baton.graphs.user_refs",
    "baton.strategies.callbacks",
    "baton.strategies.loop",
    "baton.strategies.trainer",
    "baton.strategies.ps_trainer",
    "baton.strategies.job",
    "baton.strategies.task",
    "baton.strategies.settings",
    "baton.strategies.topology",
    "baton.strategies.auto_workers",
    "baton.strategies.run",
    "baton.pipeline.training.execution",
    "baton.pipeline.training.topology",
)
CACHEABLE = True
# Whether the loss and metrics fit the task is known once the transform wrote the feature spec:
# checked then (exit 2), before training (check_inputs).
EARLY_INPUTS = ("transform_graph",)

# The stage's config is the training settings themselves: the same object goes, unchanged, into
# the job every task runs (strategies.job.TrainJob.settings) and so to the training loop.
Config = TrainSettings


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
        problems.append(jit_problem(stage.name, f"{topo.strategy} ({source})"))
    if not problems and config.balance == "auto" and topo.strategy not in BALANCED_STRATEGIES:
        problems.append(balance_problem(stage.name, f"{topo.strategy} ({source})"))
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
    cannot be imported (file:line), an unknown Keras identifier (did you mean). (A built-in
    model's parameters are checked as the settings are built: TrainSettings.)"""
    problems = _code_problems(config, getattr(spec, "spec_dir", None))
    written = getattr(stage, "config", None) or {}
    if config.steps and "epochs" in written:
        problems.append(
            f"{stage.name}.config: give steps (training runs that many steps, as TFX's "
            "TrainArgs(num_steps)) or epochs, not both. Received: "
            f"steps={config.steps}, epochs={config.epochs}")
    return problems + config.problems(stage.name)


def _code_problems(config: Config, spec_dir: Path | None) -> list[str]:
    from baton.graphs.user_refs import RefError, import_ref

    problems = []
    if config.model not in BUILTIN_MODELS:  # a built-in's model_params: checked by the settings
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
    from baton.graphs import objective_checks as checks
    from baton.strategies.callbacks import check_callbacks

    problems += [f"config.loss: {p}" for p in checks.check_loss(config.loss, spec_dir)]
    problems += [f"config.metrics{p}" for p in checks.check_metrics(config.metrics, spec_dir)]
    problems += [
        f"config.optimizer: {p}" for p in checks.check_optimizer(config.optimizer, spec_dir)
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
    from baton.graphs.objective_checks import task_problems

    try:
        spec = FeatureSpec.load(inputs["transform_graph"])
    except (OSError, KeyError, ValueError):
        return []  # the stage itself reports an unreadable feature spec
    problems = [f"config.{p}" for p in task_problems(config.loss, config.metrics, spec.label.task)]
    if config.model in ("mlp", "wide_deep"):
        problems += [f"config.model: the built-in {config.model} cannot take {p}"
                     for p in unusable(spec)]
    return problems


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
    from baton.strategies.job import TrainJob, counted

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
        settings=config,
        transformed_dir=str(inputs["transformed"]),
        code_dir=str(code_dir) if code_dir is not None and config.user_refs() else "",
        code_hash=hash_of_code,
        strategy=strategy,
        balance=balance,
        elastic=elastic,
        data_hash=data_hash,
    )
    if not count:
        return job
    return counted(job)


def run(ctx: StageContext, config: Config) -> None:
    """Train: the topology from the flags, the config and the spec, the job from the inputs,
    then one call hands both to the run (strategies.run), which writes the `model` output."""
    from baton.strategies import run as training

    topo = topology(config, ctx.options, spec_cluster(ctx))
    data_hash = content_hash(Path(ctx.inputs["transformed"]))
    job = make_job(config, dict(ctx.inputs), topo.strategy, count=False, data_hash=data_hash,
                   code_dir=ctx.spec_dir)
    training.train(job, topo, host(ctx))
    _record(ctx)


def _record(ctx: StageContext) -> None:
    """The stage's log notes and records, from the artifact the run wrote (its train_info holds
    the node's `defaults` and the `workers: auto` probe's table as well)."""
    from baton.strategies.elastic import describe_segments

    out = ctx.output("model")
    info = json.loads((out / TRAIN_INFO_FILE).read_text())
    for line in _model_notes(info):
        ctx.log(line)
    history = json.loads((out / HISTORY_FILE).read_text())
    last = history[-1] if history else {}
    resized = {"elastic_ex_s": describe_segments(info["segments"])} if info.get("elastic") else {}
    probe_info, defaults = info.get("topology_probe"), info["defaults"]
    if probe_info is not None:  # the probe's table and choice (also in train_info)
        resized.update(auto_workers=probe_info["chosen"]["workers"],
                       probe_ex_s=">".join(f"{c['workers']}:{c['examples_per_sec']:.0f}"
                                           for c in probe_info["candidates"]),
                       probe_s=round(probe_info["seconds"], 2))
    batch_size = info["global_batch_size"]
    ctx.record(
        steps=info["steps"],
        **resized,  # examples/s of each group size, e.g. "2:5120>1:2980" (the table shows it)
        examples_per_sec=info["examples_per_sec"],
        strategy=info["strategy"],
        replicas=info.get("num_replicas", defaults["replicas"]),
        per_replica_batch_size=defaults["per_replica_batch_size"],
        # the runner divides the stage's energy by it (usage.j_per_example)
        examples_trained=examples_trained(info, batch_size),
        **{k: round(v, 4) for k, v in last.items() if k.startswith(("eval_", "train_"))},
    )


def _model_notes(info: dict[str, Any]) -> list[str]:
    """What training decided about the model, for the stage's log: the transformed outputs a
    built-in left out (the cnn's non-image ones), probabilities at its end,
    what its compile() gave, a non-finite loss that ended training at a restored epoch."""
    lines = list(info.get("ignored_outputs", []))
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
