"""One training task, from a plain job description: the body every process of a cluster runs.

A `TrainJob` holds plain values only (it is JSON on the command line of each task and the same
thing in-process), so the local launcher, `baton task` on a TFJob pod and the in-process train
stage all run exactly this code. TF_CONFIG arrives already parsed; nothing here reads the
environment.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from baton.strategies.cluster import TFConfig
from baton.strategies.factory import ONE_DEVICE, PARAMETER_SERVER
from baton.strategies.trainer import TaskRole, TrainResult

# The `model` artifact `write_model_artifact` writes (the train stage's output).
MODEL_FILE = "model.keras"
HISTORY_FILE = "history.json"
TRAIN_INFO_FILE = "train_info.json"


@dataclasses.dataclass(frozen=True)
class TrainJob:
    """Everything a task needs to train, as plain JSON-able values."""

    feature_spec: dict[str, Any]
    transformed_dir: str = ""  # empty: synthetic data of `synthetic_examples` rows
    synthetic_examples: int = 0
    num_train_examples: int = 0  # counted once by the launcher so every task agrees
    model: str = "mlp"
    model_config: dict[str, Any] = dataclasses.field(default_factory=dict)
    epochs: int = 10
    batch_size: int = 32  # global: over all replicas
    eval_batch_size: int = 256
    learning_rate: float = 0.01
    optimizer: str = "adam"
    seed: int = 42
    steps_per_execution: int = 20
    backup_every: int = 0
    jit_compile: bool = False
    mixed_precision: str = "off"
    deterministic: bool = True
    cache: bool = True
    strategy: str = ONE_DEVICE
    communication: dict[str, Any] = dataclasses.field(default_factory=dict)
    partition: dict[str, Any] = dataclasses.field(default_factory=dict)
    # Content hash of the inputs (set by the train stage). When set, the backup fingerprint uses
    # it instead of `transformed_dir`, so a rerun whose inputs sit in another run directory (the
    # same bytes) still resumes the interrupted run's backup.
    data_hash: str = ""

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TrainJob:
        data = json.loads(text)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown train job field(s) {unknown}. Received keys: {sorted(data)}")
        return cls(**data)

    def fingerprint(self) -> str:
        """A digest of everything that shapes the weights (other jobs' backups are not resumed)."""
        import hashlib

        data = dataclasses.asdict(self)
        if self.data_hash:
            del data["transformed_dir"]  # where the bytes are does not shape the weights
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

    def spec(self) -> Any:
        from baton.graphs.feature_spec import FeatureSpec

        return FeatureSpec.from_dict(self.feature_spec)

    def steps_per_epoch(self) -> int:
        n = self.num_train_examples or self.synthetic_examples
        if n < self.batch_size:
            raise ValueError(
                f"batch_size must not exceed the training examples ({n}). "
                f"Received: batch_size={self.batch_size}"
            )
        return n // self.batch_size


def count_examples(job: TrainJob, split: str = "train") -> int:
    """Rows in a split of the transformed data (one pass; done once, before tasks start)."""
    import tensorflow as tf

    if not job.transformed_dir:
        return job.synthetic_examples
    ds = _make_dataset(job, split, 1024, shuffle=False, input_context=None)
    return int(
        ds.reduce(tf.constant(0, tf.int64), lambda n, b: n + tf.shape(b[1], out_type=tf.int64)[0])
    )


def with_example_count(job: TrainJob) -> TrainJob:
    """`job` with `num_train_examples` filled in, counting the rows if nobody has yet.

    The local launcher counts once, in its own process, before any task starts. A TFJob replica
    (`baton task SPEC --run-dir DIR`) cannot count at its edge: counting runs tf.data ops, which
    initialise TensorFlow's eager context, and a multi-worker strategy must configure collective
    ops before that ("Collective ops must be configured at program startup"). `run_task`
    therefore calls this after the strategy exists; every replica reads the same files, so all
    of them get the same count.
    """
    if job.num_train_examples or not job.transformed_dir:
        return job
    return dataclasses.replace(job, num_train_examples=count_examples(job))


def build_fn(job: TrainJob, num_ps: int = 0) -> Any:
    """A zero-argument builder of (model, optimizer), called inside the strategy scope.

    With `num_ps` > 1 parameter servers and partitioning on, large embedding tables are built as
    row shards (graphs.sharded_embedding) that the strategy spreads over the PS tasks.
    """
    import keras

    from baton.graphs import models

    cfg_cls = {"mlp": models.MLPConfig, "wide_deep": models.WideDeepConfig, "cnn": models.CNNConfig}
    if job.model not in cfg_cls:
        raise ValueError(
            f"model must be one of {', '.join(cfg_cls)}. Received: model={job.model!r}"
        )
    kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in job.model_config.items()}
    part = job.partition
    if num_ps > 1 and job.model != "cnn" and part.get("mode", "min_size") != "none":
        kwargs["embedding_shards"] = part.get("num_shards") or num_ps
        if part.get("mode", "min_size") == "min_size":
            kwargs["shard_min_bytes"] = part.get("min_shard_bytes", 256 << 10)
    config = cfg_cls[job.model](**kwargs)

    def build() -> tuple[Any, Any]:
        model = models.build_model(job.model, job.spec(), config, seed=job.seed)
        if job.optimizer == "sgd":
            opt: Any = keras.optimizers.SGD(job.learning_rate, momentum=0.9)
        elif job.optimizer == "adam":
            opt = keras.optimizers.Adam(job.learning_rate)
        else:
            raise ValueError(
                f"optimizer must be 'adam' or 'sgd'. Received: optimizer={job.optimizer!r}"
            )
        if job.mixed_precision == "mixed_float16":
            opt = keras.optimizers.LossScaleOptimizer(opt)
        return model, opt

    return build


def setup_runtime(job: TrainJob) -> None:
    """Process-wide switches, set before any op runs: determinism, seeds, precision policy."""
    import keras
    import tensorflow as tf

    if job.deterministic:
        tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(job.seed)
    if job.mixed_precision not in ("off", "mixed_float16", "mixed_bfloat16"):
        raise ValueError(
            "mixed_precision must be 'off', 'mixed_float16' or 'mixed_bfloat16'. "
            f"Received: mixed_precision={job.mixed_precision!r}"
        )
    keras.mixed_precision.set_dtype_policy(
        "float32" if job.mixed_precision == "off" else job.mixed_precision
    )


def dataset_fns(job: TrainJob) -> tuple[Any, Any]:
    """(train_dataset(skip, input_context), eval_dataset()) for the trainer.

    Training reads one endless, seeded stream; with op determinism on (which also makes tf.data
    deterministic) a resumed task that skips `skip` batches sees exactly what it would have seen.
    """

    def train_ds(skip: int, ctx: Any) -> Any:
        batch = (
            ctx.get_per_replica_batch_size(job.batch_size) if ctx is not None else job.batch_size
        )
        ds = _make_dataset(
            job, "train", batch, shuffle=True, input_context=ctx, seed=job.seed, repeat=True
        )
        return ds.skip(skip) if skip else ds

    def eval_ds() -> Any:
        return _make_dataset(job, "eval", job.eval_batch_size, shuffle=False, input_context=None)

    return train_ds, eval_ds


def _make_dataset(
    job: TrainJob,
    split: str,
    batch: int,
    *,
    shuffle: bool,
    input_context: Any,
    seed: int = 0,
    repeat: bool = False,
) -> Any:
    if job.transformed_dir:
        from baton.graphs.input_pipeline import make_dataset

        return make_dataset(
            job.transformed_dir,
            split,
            job.spec(),
            batch,
            shuffle=shuffle,
            repeat=repeat,
            seed=seed,
            input_context=input_context,
            cache=job.cache,
        )
    from baton.graphs.synthetic import synthetic_dataset

    n = job.synthetic_examples if split == "train" else max(job.synthetic_examples // 4, 1)
    return synthetic_dataset(
        job.spec(), n, batch, seed=seed, shuffle=shuffle, repeat=repeat, input_context=input_context
    )


def run_task(job: TrainJob, tf_config: TFConfig | None, role: TaskRole) -> TrainResult | None:
    """Run this task's part of the job. Returns the result on the task that trained (else None).

    Parameter-server workers and PS tasks serve until killed; the chief coordinates.
    The strategy is created before any TensorFlow op runs (a multi-worker strategy must
    configure collective ops first); rows not yet counted are counted after it, and the
    planned step count goes to `result.info["planned_steps"]`.
    """
    from baton.graphs.steps import StepOptions
    from baton.strategies import factory, trainer

    setup_runtime(job)
    comm = factory.CommunicationConfig(**job.communication)
    result: TrainResult
    if job.strategy == PARAMETER_SERVER:
        assert tf_config is not None, "parameter_server needs TF_CONFIG"
        if tf_config.task.type in ("ps", "worker"):
            factory.start_server(tf_config).join()
            return None
        from baton.strategies import ps_trainer

        strategy = factory.make_strategy(
            job.strategy, tf_config, partition=factory.PartitionConfig(**job.partition)
        )
        if role.after_strategy is not None:
            role.after_strategy()
        job = with_example_count(job)
        role.fingerprint = role.fingerprint or job.fingerprint()
        num_ps = len(tf_config.cluster.ps)
        train_ds, eval_ds = dataset_fns(job)
        # the builder runs inside the strategy scope, after ps_trainer's own checks
        result = ps_trainer.train(
            strategy, job, role, lambda: build_fn(job, num_ps)(), train_ds, eval_ds
        )
        result.info.setdefault("planned_steps", job.epochs * job.steps_per_epoch())
        return result
    strategy = factory.make_strategy(job.strategy, tf_config, communication=comm)
    if role.after_strategy is not None:
        role.after_strategy()
    job = with_example_count(job)
    role.fingerprint = role.fingerprint or job.fingerprint()
    plan = trainer.TrainPlan(
        epochs=job.epochs,
        steps_per_epoch=job.steps_per_epoch(),
        global_batch_size=job.batch_size,
        steps_per_execution=job.steps_per_execution,
        backup_every=job.backup_every,
    )
    train_ds, eval_ds = dataset_fns(job)
    options = StepOptions(jit_compile=job.jit_compile, fp16_allreduce=comm.fp16_allreduce)
    result = trainer.train(
        strategy, build_fn(job), job.spec(), train_ds, eval_ds, plan, role, options
    )
    result.info.setdefault("planned_steps", plan.total_steps)
    return result


def write_model_artifact(
    out: Path, job: TrainJob, result: TrainResult, info: dict[str, Any]
) -> None:
    """model.keras, history.json and train_info.json into `out` (the chief only calls this).

    The model is rebuilt outside any strategy and given the trained weights, so `model.keras`
    holds plain variables whatever strategy trained it (mirrored, sharded on PS...).
    """
    import keras

    from baton.graphs import models
    from baton.graphs.sharded_embedding import merge_into

    out.mkdir(parents=True, exist_ok=True)
    keras.mixed_precision.set_dtype_policy("float32")
    clean = build_fn(dataclasses.replace(job, mixed_precision="off"))()[0]
    merge_into(result.model, clean)
    clean.save(out / MODEL_FILE)
    (out / HISTORY_FILE).write_text(json.dumps(result.history, indent=2) + "\n")
    info = {
        "steps": result.steps,
        "resumed_from_step": result.resumed_from,
        "examples_per_sec": round(result.examples_per_sec, 1),
        "steps_per_sec": round(result.steps_per_sec, 2),
        "seconds": round(result.seconds, 3),
        "num_replicas": result.num_replicas,
        "strategy": job.strategy,
        "model": job.model,
        "params": models.count_params(clean),
        "global_batch_size": job.batch_size,
        "epochs": job.epochs,
        "written_at": time.time(),
        **result.info,
        **info,
    }
    (out / TRAIN_INFO_FILE).write_text(json.dumps(info, indent=2, default=str) + "\n")
