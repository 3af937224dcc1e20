"""The training settings: one object from the spec's `train.config` to the training loop.

`TrainSettings` is the train stage's `Config` (the pipeline builds it from the spec with
`baton.configs.build_config`), the `settings` of every `strategies.job.TrainJob` (the job file a
task reads is this object serialised, read back by the same `build_config`), and what the loops
read their epochs, batches and objectives from. It lives in strategies, not in the stage,
because strategies may not import pipeline while pipeline and k8s may import strategies: so
nothing copies its fields into another dataclass.

Every check of the settings' values is here: ranges in `__post_init__` (raised at once, as a
spec's config is built), contradictions between fields in `problems` (listed together at plan
time). The checks that need more than the settings (the user's code, the feature spec, the
run's flags and topology) stay with the stage (pipeline.stages.train).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any, Literal

from baton.configs import SettingsData
from baton.errors import ConfigError
from baton.graphs.flat_model_keys import FLAT_NAMES, flat_params
from baton.graphs.models import BUILDERS as BUILTIN_MODELS  # the table's names (no TF import)
from baton.graphs.models import builtin_config, unknown_model
from baton.strategies.factory import (
    BALANCED_STRATEGIES,
    MULTI_WORKER_MIRRORED,
    ONE_DEVICE,
    PARAMETER_SERVER,
    SINGLE_WORKER,
    CommunicationConfig,
    PartitionConfig,
    Strategy,
)

# the run settings a model function reads as spec.hyperparameters[...] (TFX's hparams), beside
# model_params: a model_params key of this name would shadow one of them
HYPERPARAMETER_KEYS = ("learning_rate", "batch_size", "epochs", "steps", "eval_steps", "seed")


@dataclasses.dataclass(frozen=True)
class TrainSettings(SettingsData):
    """Training settings. Topology (strategy, workers, ps) falls back to `baton run` flags, then to
    the spec's `cluster:` section."""

    # a built-in (mlp, wide_deep, cnn) or a model function "module:function" (docs/own-model.md)
    model: str = "mlp"
    # the model function's spec.params: a built-in's are the fields of its config class
    # (graphs.models: MLPConfig, WideDeepConfig, CNNConfig), whose defaults fill the rest; an
    # older spec's flat keys (hidden_units: ...) land here (`upgrade_settings`)
    model_params: dict[str, Any] = dataclasses.field(default_factory=dict)
    # handed to the model function as spec.custom_config, as written (TFX's fn_args.custom_config)
    custom_config: dict[str, Any] = dataclasses.field(default_factory=dict)
    epochs: int = 20
    # TFX's TrainArgs(num_steps) / EvalArgs(num_steps): 0 = by epochs / the whole eval split;
    # when > 0, training runs exactly `steps` steps (over as many epochs as that takes) and each
    # evaluation reads the first `eval_steps` batches of the eval split
    steps: int = 0
    eval_steps: int = 0
    batch_size: int = 32  # global: over all replicas
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
    # losses were finite and end training there (docs/training.md, graphs.nonfinite_guard)
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
    # multi-worker mirrored with 2+ workers, else off (pipeline.training.topology.balance_mode)
    balance: Literal["auto", "off"] | None = None
    communication: CommunicationConfig = dataclasses.field(default_factory=CommunicationConfig)
    partition: PartitionConfig = dataclasses.field(default_factory=PartitionConfig)

    def __post_init__(self) -> None:
        for name, choices in _CHOICES.items():  # the spec's are checked already;
            value = getattr(self, name)  # a job built in code is checked here
            if value not in choices:
                raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}. "
                                 f"Received: {name}={value!r}")
        if self.model not in BUILTIN_MODELS and ":" not in self.model:
            raise ValueError(unknown_model(self.model))
        if self.model in BUILTIN_MODELS:  # a built-in's parameters, by its config class
            try:
                builtin_config(self.model, self.model_params)
            except ValueError as exc:
                raise ConfigError("model_params", str(exc)) from None
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


    # ------------------------------------------------------------------ older shapes, the model
    @classmethod
    def upgrade_settings(cls, data: Mapping[str, Any], path: str = "") -> Mapping[str, Any]:
        """`data` with the flat model keys of older train configs (`hidden_units`,
        `embedding_dim`, `dropout`, `categorical`, `image_shape`, `filters`) moved into
        `model_params` (graphs.flat_model_keys.flat_params); a parameter written both ways keeps its
        `model_params` value. A flat key that sets nothing on the model is a ConfigError naming
        it (before, it was ignored).
        """
        flat = {k: data[k] for k in FLAT_NAMES if k in data}
        if not flat:
            return data
        rest = {k: v for k, v in data.items() if k not in flat}
        model, params = data.get("model", cls.model), data.get("model_params") or {}
        if not isinstance(model, str) or not isinstance(params, Mapping):
            return rest  # build_config names the bad model or model_params
        try:
            moved = flat_params(model, flat)
        except ConfigError as exc:
            raise ConfigError(f"{path}.{exc.path}" if path else exc.path,
                              str(exc).split(": ", 1)[1]) from None
        return {**rest, "model_params": {**moved, **params}}

    def hyperparameters(self) -> dict[str, Any]:
        """ModelSpec.hyperparameters: the run's settings a TFX model reads from its `hparams`
        (`fn_args.hyperparameters`), and every model parameter."""
        return {**{k: getattr(self, k) for k in HYPERPARAMETER_KEYS}, **self.model_params}

    def user_refs(self) -> list[str]:
        """Every "module:function" these settings name (model, loss, metrics, optimizer,
        callbacks): the user code whose source is part of the stage's identity."""
        refs: list[Any] = [self.model, self.loss, *self.metrics, self.optimizer]
        for cb in self.callbacks:
            refs.append(cb.get("class_name") if isinstance(cb, dict) else cb)
        return [r for r in refs if isinstance(r, str) and ":" in r]

    # ------------------------------------------------------------------ contradictions
    def problems(self, stage: str = "train") -> list[str]:
        """Contradictions between fields, all of them (`plan` refuses the spec with the list);
        `stage` is the stage's name in the spec, for the messages that name the field's path."""
        problems = []
        clash = sorted(set(self.model_params) & set(HYPERPARAMETER_KEYS))
        if clash:
            problems.append(
                f"{stage}.config.model_params: {', '.join(map(repr, clash))} "
                f"{'is a train setting' if len(clash) == 1 else 'are train settings'} (the "
                "model function reads it as spec.hyperparameters[...]): set it in the stage's "
                f"config. Received: model_params={self.model_params!r}")
        if self.jit_compile and self.strategy == PARAMETER_SERVER:
            problems.append(jit_problem(stage, PARAMETER_SERVER))
        if self.jit_compile and self.deterministic and self.model == "cnn":
            # XLA's max-pooling gradient is not deterministic, and TensorFlow's op determinism
            # refuses it at the first step; a user model with pooling gets that as a stage error
            problems.append(
                f"{stage}.config.jit_compile: true with deterministic: true cannot train the "
                "built-in cnn: XLA has no deterministic max-pooling gradient. Set deterministic: "
                "false (runs are then not bitwise repeatable) or jit_compile: false. Received: "
                "jit_compile=True, deterministic=True, model='cnn'"
            )
        if (self.balance == "auto" and self.strategy is not None
                and self.strategy not in BALANCED_STRATEGIES):
            problems.append(balance_problem(stage, self.strategy))
        if self.ps and self.strategy not in (None, PARAMETER_SERVER):
            problems.append(
                f"config.ps={self.ps} needs strategy parameter_server. "
                f"Received: strategy={self.strategy}"
            )
        if self.max_workers is not None and isinstance(self.workers, int):
            problems.append(
                f"config.max_workers={self.max_workers} needs workers: auto. "
                f"Received: workers={self.workers}"
            )
        if self.workers == "auto" and self.strategy not in (None, ONE_DEVICE,
                                                            MULTI_WORKER_MIRRORED):
            problems.append(
                f"config.workers=auto probes one process and multi-worker mirrored clusters. "
                f"Received: strategy={self.strategy}"
            )
        if self.workers == "auto" and self.min_workers is not None:
            problems.append(
                f"config.workers=auto picks the number of workers; min_workers needs a fixed "
                f"one. Received: min_workers={self.min_workers}"
            )
        if isinstance(self.workers, int) and self.workers > 1 and self.strategy in SINGLE_WORKER:
            problems.append(
                f"config.workers={self.workers} needs a multi-worker strategy. "
                f"Received: strategy={self.strategy}"
            )
        if self.min_workers is not None and self.strategy not in (None, MULTI_WORKER_MIRRORED):
            problems.append(
                f"config.min_workers={self.min_workers} needs strategy multi_worker_mirrored. "
                f"Received: strategy={self.strategy}"
            )
        if (self.min_workers is not None and isinstance(self.workers, int)
                and self.min_workers > self.workers):
            problems.append(
                f"config.min_workers must not exceed config.workers={self.workers}. "
                f"Received: min_workers={self.min_workers}"
            )
        return problems

    def for_replica(self) -> TrainSettings:
        """The settings a TFJob/JobSet/TrainJob replica checks and runs: a replica count there is
        fixed and the operator's restart policy handles a lost pod, so the local launcher's
        `workers: auto`, `min_workers` and `max_workers` go."""
        return dataclasses.replace(self, min_workers=None, max_workers=None,
                                   workers=None if self.workers == "auto" else self.workers)


def _choices(cls: type) -> dict[str, tuple[Any, ...]]:
    """The fields whose annotation is a Literal (or Literal | None) and the values they take."""
    out = {}
    for name, tp in typing.get_type_hints(cls).items():
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if typing.get_origin(tp) is Literal:
            out[name] = typing.get_args(tp)
        elif len(args) == 1 and typing.get_origin(args[0]) is Literal:
            out[name] = (*typing.get_args(args[0]), None)
    return out


_CHOICES = _choices(TrainSettings)


def jit_problem(stage: str, strategy: str) -> str:
    """XLA under a strategy whose variables live on PS tasks (also a resolved topology's)."""
    return (
        f"{stage}.config.jit_compile: true is not supported with strategy {strategy}: "
        "XLA cannot compile a step whose variables live on the PS tasks. It works with "
        "one_device, mirrored and multi_worker_mirrored. Received: jit_compile=True, "
        f"strategy={strategy}"
    )


def balance_problem(stage: str, strategy: str) -> str:
    """`balance: auto` under a strategy whose replicas share no synchronous step."""
    return (
        f"{stage}.config.balance: auto is not supported with strategy {strategy}: it "
        "sizes the batches of replicas that share one synchronous step (multi_worker_mirrored, "
        "mirrored). one_device has one replica; parameter_server workers already go at their "
        "own pace (each pulls its next step when done). Received: balance='auto', "
        f"strategy={strategy}"
    )
