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

from pipeline.context import StageContext
from pipeline.errors import StageError
from strategies.factory import CommunicationConfig, PartitionConfig

INPUTS = {"transformed": True, "transform_graph": True}
OUTPUTS = ("model",)
CODE_DEPS = (
    "graphs.models",
    "graphs.steps",
    "strategies.trainer",
    "strategies.ps_trainer",
    "strategies.job",
)
CACHEABLE = True

StrategyName = Literal["one_device", "mirrored", "multi_worker_mirrored", "parameter_server"]


@dataclasses.dataclass(frozen=True)
class Config:
    """Training settings. Topology (strategy, workers, ps) falls back to `baton run` flags, then to
    the spec's `cluster:` section."""

    model: Literal["mlp", "wide_deep", "cnn"] = "mlp"
    hidden_units: tuple[int, ...] = (64, 32)
    embedding_dim: int = 8
    dropout: float = 0.0
    categorical: Literal["embedding", "one_hot"] = "embedding"
    image_shape: tuple[int, ...] = (8, 8, 1)
    filters: tuple[int, ...] = (16, 32)
    epochs: int = 20
    batch_size: int = 32
    eval_batch_size: int = 256
    learning_rate: float = 0.01
    optimizer: Literal["adam", "sgd"] = "adam"
    seed: int = 42
    steps_per_execution: int = 20
    backup_every: int = 0
    jit_compile: bool = False
    mixed_precision: Literal["off", "mixed_float16", "mixed_bfloat16"] = "off"
    deterministic: bool = True
    cache: bool = True
    strategy: StrategyName | None = None
    workers: int | None = None
    ps: int | None = None
    max_restarts: int = 3
    communication: CommunicationConfig = dataclasses.field(default_factory=CommunicationConfig)
    partition: PartitionConfig = dataclasses.field(default_factory=PartitionConfig)

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "eval_batch_size", "steps_per_execution"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1. Received: {name}={getattr(self, name)}")
        if self.learning_rate <= 0:
            raise ValueError(
                f"learning_rate must be > 0. Received: learning_rate={self.learning_rate}"
            )
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"workers must be >= 1. Received: workers={self.workers}")
        if self.ps is not None and self.ps < 0:
            raise ValueError(f"ps must be >= 0. Received: ps={self.ps}")
        if self.backup_every < 0 or self.max_restarts < 0:
            raise ValueError(
                "backup_every and max_restarts must be >= 0. Received: "
                f"backup_every={self.backup_every}, max_restarts={self.max_restarts}"
            )

    def model_config(self) -> dict[str, Any]:
        if self.model == "cnn":
            return {
                "image_shape": list(self.image_shape),
                "filters": list(self.filters),
                "dense_units": self.hidden_units[0],
            }
        out: dict[str, Any] = {
            "hidden_units": list(self.hidden_units),
            "embedding_dim": self.embedding_dim,
            "dropout": self.dropout,
        }
        if self.model == "mlp":
            out["categorical"] = self.categorical
        return out


@dataclasses.dataclass(frozen=True)
class Topology:
    strategy: str
    workers: int
    ps: int

    @property
    def multi_process(self) -> bool:
        return self.strategy == "parameter_server" or (
            self.strategy == "multi_worker_mirrored" and self.workers > 1
        )


def topology(config: Config, options: Any, cluster: Any = None) -> Topology:
    """Flags beat the stage config, which beats the spec's cluster section."""
    workers = options.workers or config.workers or (cluster.workers if cluster else 1)
    ps = (
        options.ps
        if options.ps is not None
        else (config.ps if config.ps is not None else (cluster.ps if cluster else 0))
    )
    strategy = options.strategy or config.strategy
    if strategy is None:
        if ps:
            strategy = "parameter_server"
        elif options.workers and options.workers > 1:
            strategy = "multi_worker_mirrored"
        else:
            strategy = cluster.strategy if cluster else "one_device"
            if strategy == "one_device" and workers > 1:
                strategy = "multi_worker_mirrored"
    if strategy == "parameter_server" and ps < 1:
        raise StageError(f"strategy parameter_server needs at least one ps task. Received: ps={ps}")
    return Topology(strategy, workers, ps if strategy == "parameter_server" else 0)


def make_job(config: Config, inputs: dict[str, Path], strategy: str, count: bool = True) -> Any:
    """The plain TrainJob every task runs (counts the training rows once, here).

    `count=False` leaves `num_train_examples` at 0 and runs no TensorFlow op: `baton task` on a
    TFJob replica must create its multi-worker strategy first, and counts afterwards
    (`strategies.job.with_example_count`).
    """
    from graphs.feature_spec import FeatureSpec
    from strategies.job import TrainJob, count_examples

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
        seed=config.seed,
        steps_per_execution=config.steps_per_execution,
        backup_every=config.backup_every,
        jit_compile=config.jit_compile,
        mixed_precision=config.mixed_precision,
        deterministic=config.deterministic,
        cache=config.cache,
        strategy=strategy,
        communication=dataclasses.asdict(config.communication),
        partition=dataclasses.asdict(config.partition),
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
    from strategies import inventory

    topo = topology(config, ctx.options, _spec_cluster(ctx))
    job = make_job(config, dict(ctx.inputs), topo.strategy)
    out = ctx.output("model")
    node = inventory.node_inventory()
    defaults = inventory.derive_defaults([node] * max(topo.workers, 1), job.batch_size)
    ctx.log(
        f"strategy {topo.strategy}, workers {topo.workers}, ps {topo.ps}; "
        f"{inventory.describe(node)}; "
        f"{inventory.describe_defaults(defaults)}"
    )
    if topo.multi_process:
        _run_cluster(ctx, config, job, topo, out)
    else:
        _run_in_process(ctx, job, out, node, defaults)
    info = json.loads((out / "train_info.json").read_text())
    history = json.loads((out / "history.json").read_text())
    last = history[-1] if history else {}
    ctx.record(
        steps=info["steps"],
        examples_per_sec=info["examples_per_sec"],
        strategy=info["strategy"],
        **{k: round(v, 4) for k, v in last.items() if k.startswith(("eval_", "train_"))},
    )


def _run_in_process(ctx: StageContext, job: Any, out: Path, node: dict, defaults: dict) -> None:
    from strategies import faults
    from strategies.job import run_task, write_model_artifact
    from strategies.trainer import TaskRole

    bar = ctx.progress(job.epochs * job.steps_per_epoch(), "steps", label=ctx.stage)

    def on_progress(step: int, total: int, metrics: dict[str, float]) -> None:
        bar.set(step)

    role = TaskRole(
        is_chief=True,
        task_name="worker:0",
        backup_dir=ctx.work_dir / "backup",
        logs_dir=out / "logs",
        fault=faults.parse_fault(ctx.options.inject_failure),
        on_progress=on_progress,
    )
    result = run_task(job, None, role)
    bar.close()
    assert result is not None
    write_model_artifact(
        out,
        job,
        result,
        {"cluster": {"workers": 1, "ps": 0}, "inventory": [node], "defaults": defaults},
    )
    shutil.rmtree(ctx.work_dir / "backup", ignore_errors=True)


def task_argv(job_file: Path, out: Path, backup_dir: Path) -> list[str]:
    """The command of one local task: `baton task` in its explicit form (a counted job file)."""
    return [sys.executable, "-m", "pipeline.commands.task", "--job", str(job_file),
            "--out", str(out), "--backup-dir", str(backup_dir)]


def _run_cluster(ctx: StageContext, config: Config, job: Any, topo: Topology, out: Path) -> None:
    from strategies import faults, launcher

    job_file = ctx.work_dir / "job.json"
    job_file.write_text(job.to_json())
    fault = faults.parse_fault(ctx.options.inject_failure)
    cluster_out = ctx.work_dir / "cluster"

    def command(task: Any) -> list[str]:
        return task_argv(job_file, cluster_out, ctx.work_dir / "backup")

    bar = ctx.progress(job.epochs * job.steps_per_epoch(), "steps", label=ctx.stage)
    result = launcher.launch(
        launcher.LaunchConfig(
            workers=topo.workers,
            ps=topo.ps,
            strategy=topo.strategy,
            max_restarts=config.max_restarts,
            fault=fault,
            state_dir=ctx.work_dir / "launcher",
        ),
        command,
        stream=ctx.stream,
        quiet=ctx.options.quiet,
        on_step=bar.set,
    )
    bar.close()
    if not result.ok:
        raise StageError(f"training cluster failed: {result.error}")
    produced = cluster_out / "model"
    if not (produced / "model.keras").is_file():
        raise StageError(f"the chief finished but wrote no model into {produced}")
    shutil.rmtree(out)
    produced.replace(out)
    info = json.loads((out / "train_info.json").read_text())
    info["restarts"] = result.restarts
    info["launcher"] = result.summary()
    (out / "train_info.json").write_text(json.dumps(info, indent=2, default=str) + "\n")
    shutil.rmtree(ctx.work_dir / "backup", ignore_errors=True)


def _spec_cluster(ctx: StageContext) -> Any:
    from pipeline.spec import load_spec

    try:
        return load_spec(ctx.spec_path).cluster if ctx.spec_path else None
    except Exception:  # noqa: BLE001 - the cluster section is optional context here
        return None
