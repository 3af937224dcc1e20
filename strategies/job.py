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
from baton.strategies.objectives import for_job as objectives
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
    model: str = "mlp"  # a built-in (graphs.models.MODELS) or a model function "module:function"
    model_config: dict[str, Any] = dataclasses.field(default_factory=dict)  # ModelSpec.params
    epochs: int = 10
    # TFX's TrainArgs(num_steps) / EvalArgs(num_steps): when > 0, training runs exactly `steps`
    # steps (over as many epochs as that takes) and each evaluation reads the first
    # `eval_steps` batches of the eval split
    steps: int = 0
    eval_steps: int = 0
    batch_size: int = 32  # global: over all replicas
    eval_batch_size: int = 256
    learning_rate: float = 0.01
    # identifier, {class_name, config}, "module:fn"; "": the model's compile() optimizer, else adam
    optimizer: str | dict[str, Any] = ""
    loss: str = ""  # "": the model's compile() loss, else the built-in; an identifier, "module:fn"
    metrics: list[str] = dataclasses.field(default_factory=list)
    callbacks: list[Any] = dataclasses.field(default_factory=list)
    # Where the user's modules are imported from (the spec's directory; on a TFJob pod the
    # mounted ConfigMap beside the spec), and a digest of their source: references travel as
    # strings and every task imports the files itself, nothing is pickled.
    code_dir: str = ""
    code_hash: str = ""
    custom_config: dict[str, Any] = dataclasses.field(default_factory=dict)  # ModelSpec's
    # a non-finite training or eval loss: "fail" the stage, or "restore" the weights of the
    # last epoch whose losses were finite and end training there (strategies.nonfinite_guard)
    on_nonfinite: str = "fail"
    seed: int = 42
    steps_per_execution: int = 20
    backup_every: int = 0
    jit_compile: bool = False
    executor: str = "auto"  # graphs.executor: auto | single_threaded | default
    mixed_precision: str = "off"
    deterministic: bool = True
    cache: bool = True
    strategy: str = ONE_DEVICE
    # "auto": per-replica batches follow measured speed (strategies.balance); "off": equal
    balance: str = "off"
    # The group may shrink or grow mid-run (`min_workers`, strategies.elastic). With balance
    # off, every worker then reads the global batches of one stream and keeps its replicas'
    # equal slices, so a step's examples do not depend on how many workers there are (sharded
    # per worker, a resize changed them).
    elastic: bool = False
    communication: dict[str, Any] = dataclasses.field(default_factory=dict)
    partition: dict[str, Any] = dataclasses.field(default_factory=dict)
    # Content hash of the inputs (set by the train stage). When set, the backup fingerprint uses
    # it instead of `transformed_dir`, so a rerun whose inputs sit in another run directory (the
    # same bytes) still resumes the interrupted run's backup.
    data_hash: str = ""
    # A topology probe (strategies.probe) when > 0: one warm-up chunk of `steps_per_execution`
    # steps, then this many timed steps (the trainer's `info["window"]`), no evaluation; the
    # task reports its window instead of writing a model.
    probe_steps: int = 0

    def __post_init__(self) -> None:
        if self.probe_steps < 0:
            raise ValueError(f"probe_steps must be >= 0. Received: probe_steps={self.probe_steps}")
        if self.balance not in ("auto", "off"):
            raise ValueError(f"balance must be 'auto' or 'off'. Received: balance={self.balance!r}")
        if self.steps < 0 or self.eval_steps < 0:
            raise ValueError(f"steps and eval_steps must be >= 0. Received: steps={self.steps}, "
                             f"eval_steps={self.eval_steps}")
        if self.on_nonfinite not in ("fail", "restore"):
            raise ValueError("on_nonfinite must be 'fail' or 'restore'. Received: "
                             f"on_nonfinite={self.on_nonfinite!r}")

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
        del data["code_dir"]  # where the code is does not either; what it says does (code_hash)
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

    def total_steps(self) -> int:
        """The steps training runs: `steps`, or every step of `epochs` epochs."""
        return self.steps or self.epochs * self.steps_per_epoch()

    def planned_epochs(self) -> int:
        """Epochs the training spans (the last one partial when `steps` ends inside it)."""
        return -(-self.steps // self.steps_per_epoch()) if self.steps else self.epochs

    def hyperparameters(self) -> dict[str, Any]:
        """ModelSpec.hyperparameters: the run's settings a TFX model reads from its `hparams`
        (`fn_args.hyperparameters`), and every `model_params` entry."""
        return {"learning_rate": self.learning_rate, "batch_size": self.batch_size,
                "epochs": self.epochs, "steps": self.steps, "eval_steps": self.eval_steps,
                "seed": self.seed, **self.model_config}


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

    The model is the job's model function (a built-in or the user's, graphs.model_fn) called on
    a ModelSpec whose params are `job.model_config`. With `num_ps` > 1 parameter servers and
    partitioning on, a built-in's large embedding tables are built as row shards
    (graphs.sharded_embedding) that the strategy spreads over the PS tasks.
    """
    import keras

    from baton.errors import StageError
    from baton.graphs import model_fn, models
    from baton.graphs.compiled import read as read_compiled
    from baton.graphs.objectives import make_optimizer
    from baton.graphs.user_refs import RefError

    params = dict(job.model_config)
    part = job.partition
    if job.model in models.MODELS:
        if num_ps > 1 and job.model != "cnn" and part.get("mode", "min_size") != "none":
            params["embedding_shards"] = part.get("num_shards") or num_ps
            if part.get("mode", "min_size") == "min_size":
                params["shard_min_bytes"] = part.get("min_shard_bytes", 256 << 10)
        models.builtin_config(job.model, params)  # a bad parameter fails here, before any task
    search_dir = job.code_dir or None

    def build() -> tuple[Any, Any]:
        model = model_fn.build(job.model, job.spec(), params, seed=job.seed, search_dir=search_dir,
                               custom_config=job.custom_config,
                               hyperparameters=job.hyperparameters())
        compiled = read_compiled(model, model_fn.describe(job.model))
        try:
            if not job.optimizer and compiled is not None and compiled.optimizer is not None:
                opt = compiled.optimizer  # compile()'s, made in this strategy scope
            else:
                opt = make_optimizer(job.optimizer or "adam", job.learning_rate, search_dir)
        except RefError as exc:
            raise StageError(f"train.config.optimizer: {exc}") from None
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


def row_table(job: TrainJob) -> Any:
    """Under `balance: auto`, the train split held in memory (graphs.row_table), or None.

    Used when the split fits the table's share of the memory available; every task then draws
    the same global batches of row indices and gathers only its own rows. A split that does
    not fit is streamed whole on every task instead (see `dataset_fns`).
    """
    from baton.graphs import row_table as rt

    rows = job.num_train_examples if job.transformed_dir else job.synthetic_examples
    if job.balance != "auto" or not rt.fits(rows, job.spec()):
        return None
    if job.transformed_dir:
        from baton.graphs.input_pipeline import read_chunks

        return rt.RowTable(lambda: read_chunks(job.transformed_dir, "train", job.spec()))
    return rt.RowTable(lambda: _make_dataset(job, "train", 4096, shuffle=False,
                                             input_context=None, cache=False))


def dataset_fns(job: TrainJob, table: Any = None) -> tuple[Any, Any]:
    """(train_dataset(skip, input_context), eval_dataset()) for the trainer.

    Training reads one endless, seeded stream; with op determinism on (which also makes tf.data
    deterministic) a resumed task that skips `skip` batches sees exactly what it would have seen.
    With `balance: off` each task reads its own shard of it, except in an elastic job
    (`elastic`: the slices of the global batches, `sliced_ds`). With `balance: auto` no task
    shards it: every task reads the whole stream in global batches
    (each local replica gets its own copy of each batch) and the step takes each replica's
    rows out of it (graphs.steps.make_train_chunk(balance=True)). With a `table` (`row_table`)
    the stream is of row indices and the step gathers its rows from the table; otherwise the
    stream carries the rows and the step slices them.
    """
    import tensorflow as tf

    def balanced_ds(skip: int, ctx: Any) -> Any:
        if table is not None:
            ds = table.index_stream(job.batch_size, job.seed, skip)
        else:
            ds = _make_dataset(job, "train", job.batch_size, shuffle=True, input_context=None,
                               seed=job.seed, repeat=True)
            ds = ds.skip(skip) if skip else ds
        local = ctx.num_replicas_in_sync // ctx.num_input_pipelines if ctx is not None else 1
        if local > 1:  # replicas of one task take consecutive elements: give each the batch
            ds = ds.flat_map(
                lambda *element: tf.data.Dataset.from_tensors(element if len(element) > 1
                                                              else element[0]).repeat(local))
        if ctx is not None:
            options = tf.data.Options()
            options.experimental_distribute.auto_shard_policy = (
                tf.data.experimental.AutoShardPolicy.OFF)
            ds = ds.with_options(options)
        return ds

    def train_ds(skip: int, ctx: Any) -> Any:
        batch = (
            ctx.get_per_replica_batch_size(job.batch_size) if ctx is not None else job.batch_size
        )
        ds = _make_dataset(
            job, "train", batch, shuffle=True, input_context=ctx, seed=job.seed, repeat=True
        )
        return ds.skip(skip) if skip else ds

    def sliced_ds(skip: int, ctx: Any) -> Any:
        """The global batches of one stream (as `balanced_ds` reads it), each cut into equal
        per-replica slices of which this task keeps its replicas' (in their order: a task's
        local replicas take consecutive elements)."""
        ds = _make_dataset(job, "train", job.batch_size, shuffle=True, input_context=None,
                           seed=job.seed, repeat=True)
        ds = ds.skip(skip) if skip else ds
        if ctx is None:
            return ds
        per = ctx.get_per_replica_batch_size(job.batch_size)
        local = ctx.num_replicas_in_sync // ctx.num_input_pipelines
        first = ctx.input_pipeline_id * local

        def cut(features: Any, labels: Any, r: int) -> Any:
            from baton.graphs.feature_spec import slice_rows

            lo, hi = r * per, (r + 1) * per
            return {k: slice_rows(v, lo, hi) for k, v in features.items()}, labels[lo:hi]

        def mine(features: Any, labels: Any) -> Any:
            out = tf.data.Dataset.from_tensors(cut(features, labels, first))
            for r in range(first + 1, first + local):
                out = out.concatenate(tf.data.Dataset.from_tensors(cut(features, labels, r)))
            return out

        ds = ds.map(lambda f, y: cut(f, y, first)) if local == 1 else ds.flat_map(mine)
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.OFF)
        return ds.with_options(options)

    def eval_ds() -> Any:
        ds = _make_dataset(job, "eval", job.eval_batch_size, shuffle=False, input_context=None)
        return ds.take(job.eval_steps) if job.eval_steps else ds

    if job.balance == "auto":
        return balanced_ds, eval_ds
    return (sliced_ds if job.elastic else train_ds), eval_ds


def finite_split(job: TrainJob, split: str) -> Any:
    """One pass over a split in file order, in training batches: where the non-finite guard
    looks for the first non-finite feature (strategies.nonfinite_guard)."""
    return _make_dataset(job, split, job.batch_size, shuffle=False, input_context=None,
                         cache=False)


def _make_dataset(
    job: TrainJob,
    split: str,
    batch: int,
    *,
    shuffle: bool,
    input_context: Any,
    seed: int = 0,
    repeat: bool = False,
    cache: bool | None = None,
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
            cache=job.cache if cache is None else cache,
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
            strategy, job, role, lambda: build_fn(job, num_ps)(), train_ds, eval_ds,
            objectives(job), finite_split=lambda split: finite_split(job, split),
        )
        result.info.setdefault("planned_steps", job.total_steps())
        return result
    strategy = factory.make_strategy(job.strategy, tf_config, communication=comm)
    if role.after_strategy is not None:
        role.after_strategy()
    job = with_example_count(job)
    role.fingerprint = role.fingerprint or job.fingerprint()
    plan = trainer.TrainPlan(
        epochs=job.planned_epochs(),
        steps_per_epoch=job.steps_per_epoch(),
        global_batch_size=job.batch_size,
        steps_per_execution=job.steps_per_execution,
        backup_every=job.backup_every,
        balance=job.balance == "auto",
        max_steps=job.steps_per_execution + job.probe_steps if job.probe_steps else job.steps,
        measure_after=job.steps_per_execution if job.probe_steps else 0,
        on_nonfinite=job.on_nonfinite,
    )
    table = row_table(job) if plan.balance else None
    train_ds, eval_ds = dataset_fns(job, table)
    if job.probe_steps:
        eval_ds = None  # a probe times training only
    options = StepOptions(jit_compile=job.jit_compile, fp16_allreduce=comm.fp16_allreduce,
                          executor=job.executor)
    result = trainer.train(
        strategy, build_fn(job), job.spec(), train_ds, eval_ds, plan, role, options,
        objectives(job), take_rows=table.take if table is not None else None,
        finite_split=lambda split: finite_split(job, split),
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
    if job.model in models.MODELS:
        merge_into(result.model, clean)  # by layer name; sharded tables concatenated
    else:
        _copy_weights(result.model, clean, job.model)
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
        # what `model.keras` needs imported to load (its custom layers): release stages import
        # these from the spec's directory first (pipeline/release/data.load_model)
        "user_modules": user_modules(job),
        "code_dir": job.code_dir,
        "global_batch_size": job.batch_size,
        "epochs": job.planned_epochs(),
        **({"steps_planned": job.steps} if job.steps else {}),
        **({"eval_steps": job.eval_steps} if job.eval_steps else {}),
        "written_at": time.time(),
        **result.info,
        **info,
    }
    (out / TRAIN_INFO_FILE).write_text(json.dumps(info, indent=2, default=str) + "\n")


def user_modules(job: TrainJob) -> list[str]:
    """Modules of the job's user references (model, loss, metrics, optimizer, callbacks)."""
    from baton.graphs.user_refs import modules_of

    refs: list[Any] = [job.model, job.loss, *job.metrics, job.optimizer]
    for cb in job.callbacks:
        refs.append(cb.get("class_name") if isinstance(cb, dict) else cb)
    return modules_of(refs)


def _copy_weights(trained: Any, clean: Any, name: str) -> None:
    """Weights of the trained model into the rebuilt one, in order (a user model's own layers
    may be auto-named differently in the second build, so names cannot be matched)."""
    import numpy as np

    from baton.errors import StageError

    values = [np.asarray(w.numpy()) for w in trained.weights]
    if len(values) != len(clean.weights):
        raise StageError(
            f"model function {name!r} built a model with {len(clean.weights)} weights the second "
            f"time it was called and {len(values)} the first; it must build the same model "
            "every time (the artifact is rebuilt outside the training strategy)"
        )
    clean.set_weights(values)
