"""One training task: the body every process of a cluster runs, from a `TrainJob`.

The local launcher's tasks, `baton task` on a TFJob/JobSet/TrainJob pod and the in-process train
stage all call `run_task`. TF_CONFIG arrives already parsed; nothing here reads the environment.
The chief then writes the `model` artifact (`write_model_artifact`).
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from baton.strategies.cluster import TFConfig
from baton.strategies.factory import PARAMETER_SERVER
from baton.strategies.job import (
    HISTORY_FILE,
    MODEL_FILE,
    TRAIN_INFO_FILE,
    TrainJob,
    with_example_count,
)
from baton.strategies.loop import TaskRole, TrainResult
from baton.strategies.objectives import for_job as objectives


def build_fn(job: TrainJob, num_ps: int = 0) -> Any:
    """A zero-argument builder of (model, optimizer), called inside the strategy scope.

    The model is the job's model function (a built-in or the user's, graphs.model_fn) called on
    a ModelSpec whose params are `job.settings.model_params` (a built-in's config class fills in
    its defaults, graphs.models). With `num_ps` > 1 parameter servers and
    partitioning on, a built-in's large embedding tables are built as row shards
    (graphs.sharded_embedding) that the strategy spreads over the PS tasks.
    """
    import keras

    from baton.errors import StageError
    from baton.graphs import model_fn, models
    from baton.graphs.compiled import read as read_compiled
    from baton.graphs.objectives import make_optimizer
    from baton.graphs.user_refs import RefError

    spec = job.spec()
    params = dict(job.settings.model_params)
    part = job.settings.partition
    # a built-in's parameters were checked as the settings were built (TrainSettings); the
    # sharding of its embedding tables over the PS tasks is added here
    sharded = (num_ps > 1 and job.settings.model in models.MODELS and job.settings.model != "cnn"
               and part.mode != "none")
    if sharded:
        params["embedding_shards"] = part.num_shards or num_ps
        if part.mode == "min_size":
            params["shard_min_bytes"] = part.min_shard_bytes
    search_dir = job.code_dir or None

    def build() -> tuple[Any, Any]:
        model = model_fn.build(job.settings.model, spec, params, seed=job.settings.seed, search_dir=search_dir,
                               custom_config=job.settings.custom_config,
                               hyperparameters=job.settings.hyperparameters())
        compiled = read_compiled(model, model_fn.describe(job.settings.model))
        try:
            if not job.settings.optimizer and compiled is not None and compiled.optimizer is not None:
                opt = compiled.optimizer  # compile()'s, made in this strategy scope
            else:
                opt = make_optimizer(job.settings.optimizer or "adam", job.settings.learning_rate, search_dir)
        except RefError as exc:
            raise StageError(f"train.config.optimizer: {exc}") from None
        if job.settings.mixed_precision == "mixed_float16":
            opt = keras.optimizers.LossScaleOptimizer(opt)
        return model, opt

    return build


def setup_runtime(job: TrainJob) -> None:
    """Process-wide switches, set before any op runs: determinism, seeds, precision policy."""
    import keras
    import tensorflow as tf

    if job.settings.deterministic:
        tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(job.settings.seed)
    keras.mixed_precision.set_dtype_policy(
        "float32" if job.settings.mixed_precision == "off" else job.settings.mixed_precision
    )


def run_task(job: TrainJob, tf_config: TFConfig | None, role: TaskRole) -> TrainResult | None:
    """Run this task's part of the job. Returns the result on the task that trained (else None).

    Parameter-server workers and PS tasks serve until killed; the chief coordinates
    (strategies.ps_trainer); every other strategy trains in lockstep (strategies.trainer).
    The strategy is created before any TensorFlow op runs (a multi-worker strategy must
    configure collective ops first); rows not yet counted are counted after it, and the
    planned step count goes to `result.info["planned_steps"]`. Both drivers get the same
    pieces: the model builder, the job's data (its streams, built once on the graph side,
    `TrainJob.data`) and the spec's objectives.
    """
    from baton.graphs.step_options import StepOptions
    from baton.strategies import factory, ps_trainer, trainer

    setup_runtime(job)
    on_ps = job.strategy == PARAMETER_SERVER
    if on_ps:
        assert tf_config is not None, "parameter_server needs TF_CONFIG"
        if tf_config.task.type in ("ps", "worker"):
            factory.start_server(tf_config).join()
            return None
    strategy = factory.make_strategy(job.strategy, tf_config,
                                     communication=job.settings.communication,
                                     partition=job.settings.partition)
    if role.after_strategy is not None:
        role.after_strategy()
    job = with_example_count(job)
    role.fingerprint = role.fingerprint or job.fingerprint()
    plan = trainer.TrainPlan(
        epochs=job.planned_epochs(),
        steps_per_epoch=job.steps_per_epoch(),
        global_batch_size=job.settings.batch_size,
        steps_per_execution=job.settings.steps_per_execution,
        backup_every=job.settings.backup_every,
        balance=job.balance == "auto",
        max_steps=job.settings.steps_per_execution + job.probe_steps if job.probe_steps else job.settings.steps,
        measure_after=job.settings.steps_per_execution if job.probe_steps else 0,
        on_nonfinite=job.settings.on_nonfinite,
    )
    options = StepOptions(jit_compile=job.settings.jit_compile,
                          fp16_allreduce=job.settings.communication.fp16_allreduce,
                          executor=job.settings.executor)
    build = build_fn(job, len(tf_config.cluster.ps) if on_ps and tf_config is not None else 0)
    data = job.data()
    table = data.row_table()
    train_ds, eval_ds = data.dataset_fns(table)
    if on_ps:
        # the builder runs inside the strategy scope, after ps_trainer's own checks
        result = ps_trainer.train(strategy, job, role, build, train_ds, eval_ds, objectives(job),
                                  finite_split=data.finite_split)
        result.info.setdefault("planned_steps", job.total_steps())
        return result
    result = trainer.train(
        strategy, build, job.spec(), train_ds, None if job.probe_steps else eval_ds, plan, role,
        options, objectives(job), take_rows=table.take if table is not None else None,
        finite_split=data.finite_split,
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

    from baton.graphs.model_fn import exported
    from baton.graphs.user_refs import modules_of

    out.mkdir(parents=True, exist_ok=True)
    refs, model_params = job.settings.user_refs(), job.settings.model_params
    keras.mixed_precision.set_dtype_policy("float32")
    clean = build_fn(dataclasses.replace(
        job, settings=dataclasses.replace(job.settings, mixed_precision="off")))()[0]
    model_info = exported(result.model, clean, job.settings.model, job.feature_spec, model_params)
    modules = modules_of(refs)
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
        "model": job.settings.model,
        **model_info,  # params, and ignored_outputs when a built-in leaves some out
        # what `model.keras` needs imported to load (its custom layers): release stages import
        # these from the spec's directory first (pipeline/release/data.load_model)
        "user_modules": modules,
        "code_dir": job.code_dir,
        "global_batch_size": job.settings.batch_size,
        "epochs": job.planned_epochs(),
        **({"steps_planned": job.settings.steps} if job.settings.steps else {}),
        **({"eval_steps": job.settings.eval_steps} if job.settings.eval_steps else {}),
        "written_at": time.time(),
        **result.info,
        **info,
    }
    (out / TRAIN_INFO_FILE).write_text(json.dumps(info, indent=2, default=str) + "\n")
