"""A small real training task for emulator tests: one replica of a TFJob, TF_CONFIG from the env.

Stands in for `baton task SPEC --stage train --run-dir DIR` until that exists (see
`EMULATED_COMMAND` in test_emulator_tf.py). Usage: `python train_task.py OUT_DIR [STEPS]`.

* multi_worker_mirrored (no `ps` in the cluster): a graph-mode custom loop (`tf.function`,
  `strategy.run`, `strategy.reduce`; Keras 3 `fit` fails under this strategy here) that
  checkpoints every step with a CheckpointManager and resumes from it after a restart;
* parameter_server: the chief coordinates with `ClusterCoordinator.schedule`; workers and PS
  run a `tf.distribute.Server` until the job's cleanPodPolicy stops them.

The chief writes OUT_DIR/result.json (final step, loss, how many times it started). A SIGTERM
saves a checkpoint and exits 143, the retryable code.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

out_dir = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 20
cfg = json.loads(os.environ["TF_CONFIG"])
task = cfg["task"]
is_chief = task["type"] == "chief" or ("chief" not in cfg["cluster"] and task == {"type": "worker", "index": 0})
tf.config.threading.set_inter_op_parallelism_threads(1)
tf.config.threading.set_intra_op_parallelism_threads(1)


def data() -> tuple[tf.Tensor, tf.Tensor]:
    x = tf.random.stateless_normal((64, 4), seed=(1, 2))
    return x, tf.reduce_sum(x * tf.constant([1.0, -2.0, 3.0, 0.5]), axis=1, keepdims=True)


def write_result(step: int, loss: float) -> None:
    os.makedirs(out_dir, exist_ok=True)
    starts_file = os.path.join(out_dir, "starts")
    starts = int(Path(starts_file).read_text()) if os.path.exists(starts_file) else 0
    with open(os.path.join(out_dir, "result.json"), "w") as f:
        json.dump({"step": step, "loss": loss, "starts": starts,
                   "operator_tf_config": os.environ.get("BATON_OPERATOR_TF_CONFIG")}, f)


def count_start() -> None:
    if is_chief:
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, "starts")
        n = int(Path(path).read_text()) if os.path.exists(path) else 0
        Path(path).write_text(str(n + 1))


def mirrored() -> None:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        w = tf.Variable(tf.zeros((4, 1)))
        step = tf.Variable(0, dtype=tf.int64)
    ckpt = tf.train.Checkpoint(w=w, step=step)
    ckpt_dir = os.path.join(out_dir, "ckpt" if is_chief else f"ckpt-tmp-{task['type']}-{task['index']}")
    manager = tf.train.CheckpointManager(ckpt, ckpt_dir, max_to_keep=2)
    if is_chief:
        ckpt.restore(manager.latest_checkpoint)
    else:  # every worker restores the chief's backup: all replicas resume at the same step
        ckpt.restore(tf.train.latest_checkpoint(os.path.join(out_dir, "ckpt")))
    x, y = data()

    @tf.function
    def train_step() -> tf.Tensor:
        def replica_step() -> tf.Tensor:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
            grad = tape.gradient(loss, w)
            ctx = tf.distribute.get_replica_context()
            grad = ctx.all_reduce(tf.distribute.ReduceOp.MEAN, grad)
            w.assign_sub(0.1 * grad)
            return loss

        losses = strategy.run(replica_step)
        return strategy.reduce(tf.distribute.ReduceOp.MEAN, losses, axis=None)

    def on_term(*_: object) -> None:
        manager.save(checkpoint_number=int(step.numpy()))
        sys.exit(143)

    signal.signal(signal.SIGTERM, on_term)
    loss = tf.constant(0.0)
    while int(step.numpy()) < steps:
        loss = train_step()
        step.assign_add(1)
        manager.save(checkpoint_number=int(step.numpy()))
    if is_chief:
        write_result(int(step.numpy()), float(loss))


def parameter_server() -> None:
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if task["type"] in ("worker", "ps"):
        server = tf.distribute.Server(resolver.cluster_spec(), job_name=task["type"],
                                      task_index=task["index"], protocol="grpc", start=True)
        server.join()
        return
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        w = tf.Variable(tf.zeros((4, 1)))
    x, y = data()

    @tf.function
    def train_step() -> tf.Tensor:
        def replica_step() -> tf.Tensor:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
            w.assign_sub(0.1 * tape.gradient(loss, w))
            return loss

        return strategy.run(replica_step)

    result = None
    for _ in range(steps):
        result = coordinator.schedule(train_step)
    coordinator.join()
    write_result(steps, float(result.fetch()))


count_start()
try:
    if "ps" in cfg["cluster"]:
        parameter_server()
    else:
        mirrored()
except (tf.errors.AbortedError, tf.errors.UnavailableError, tf.errors.CancelledError,
        tf.errors.DeadlineExceededError) as exc:
    # A peer died or restarted: the collective group is broken. Exit with a retryable code so
    # the operator (restartPolicy ExitCode) restarts this replica too; all resume from the
    # chief's checkpoint. os._exit: TF's threads must not block interpreter shutdown.
    print(f"peer failure, exiting for a restart: {type(exc).__name__}", flush=True)
    os._exit(143)
