"""The strategy factory: a name, a parsed TF_CONFIG and options in, a tf.distribute strategy out.

TF_CONFIG is never read here: the caller parses it once at the edge (`TFConfig.from_env`) and
passes it down, and the cluster is handed to TensorFlow through a `SimpleClusterResolver`, so a
test can build any task's strategy without touching `os.environ`.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Literal

from baton.strategies.cluster import ClusterSpecError, TFConfig

# The one definition of the strategy names: the spec's `cluster.strategy`, the train stage's
# `strategy`, `baton run/k8s --strategy` and the k8s job options all take these.
Strategy = Literal["one_device", "mirrored", "multi_worker_mirrored", "parameter_server"]
STRATEGIES: tuple[Strategy, ...] = typing.get_args(Strategy)
ONE_DEVICE, MIRRORED, MULTI_WORKER_MIRRORED, PARAMETER_SERVER = STRATEGIES
MULTI_WORKER: tuple[Strategy, ...] = (MULTI_WORKER_MIRRORED, PARAMETER_SERVER)  # several tasks
SINGLE_WORKER: tuple[Strategy, ...] = (ONE_DEVICE, MIRRORED)  # one process
# strategies whose replicas share one synchronous step: `balance: auto` sizes their batches
BALANCED_STRATEGIES: tuple[Strategy, ...] = (MULTI_WORKER_MIRRORED, MIRRORED)

Implementation = Literal["auto", "ring", "nccl"]
Partitioning = Literal["none", "min_size", "fixed"]


@dataclasses.dataclass(frozen=True)
class CommunicationConfig:
    """How gradients travel between workers (multi-worker mirrored).

    `implementation` picks the collective: RING (gRPC, CPU), NCCL (GPUs) or AUTO.
    `bytes_per_pack` splits gradients into packs of about this size so that all-reduce of early
    packs overlaps with backprop of later layers (0: TensorFlow decides). `timeout_seconds` makes a
    collective fail instead of hanging forever when a peer is gone (None: no timeout).
    `fp16_allreduce` sums gradients in float16: half the bytes on the wire.
    """

    implementation: Implementation = "auto"
    bytes_per_pack: int = 0
    timeout_seconds: float | None = None
    fp16_allreduce: bool = False

    def __post_init__(self) -> None:
        if self.implementation not in ("auto", "ring", "nccl"):
            raise ValueError(
                "implementation must be one of 'auto', 'ring', 'nccl'. "
                f"Received: implementation={self.implementation!r}"
            )
        if self.bytes_per_pack < 0:
            raise ValueError(
                f"bytes_per_pack must be >= 0. Received: bytes_per_pack={self.bytes_per_pack}"
            )
        if self.timeout_seconds is not None and self.timeout_seconds <= 0:
            raise ValueError(
                "timeout_seconds must be > 0 or null. "
                f"Received: timeout_seconds={self.timeout_seconds}"
            )


@dataclasses.dataclass(frozen=True)
class PartitionConfig:
    """How embedding tables are sharded across PS tasks under the parameter-server strategy.

    `min_size`: tables of at least `min_shard_bytes` get one row shard per PS (smaller tables stay
    whole). `fixed`: every table in `num_shards` shards (0: one per PS). `none`: no sharding.
    The model applies it (graphs.sharded_embedding); `variable_partitioner` gives TensorFlow's
    equivalent partitioner for non-Keras variables.
    """

    mode: Partitioning = "min_size"
    min_shard_bytes: int = 256 << 10
    num_shards: int = 0

    def __post_init__(self) -> None:
        if self.mode not in ("none", "min_size", "fixed"):
            raise ValueError(
                "partitioning mode must be 'none', 'min_size' or 'fixed'. "
                f"Received: mode={self.mode!r}"
            )
        if self.min_shard_bytes < 1 or self.num_shards < 0:
            raise ValueError(
                "min_shard_bytes must be >= 1 and num_shards >= 0. Received: "
                f"min_shard_bytes={self.min_shard_bytes}, num_shards={self.num_shards}"
            )


def communication_options(config: CommunicationConfig) -> Any:
    """`tf.distribute.experimental.CommunicationOptions` for `config`."""
    import tensorflow as tf

    impl = tf.distribute.experimental.CommunicationImplementation
    return tf.distribute.experimental.CommunicationOptions(
        bytes_per_pack=config.bytes_per_pack,
        timeout_seconds=config.timeout_seconds,
        implementation={"auto": impl.AUTO, "ring": impl.RING, "nccl": impl.NCCL}[
            config.implementation
        ],
    )


def variable_partitioner(config: PartitionConfig, num_ps: int) -> Any:
    """A tf.distribute partitioner for `num_ps` parameter servers, or None for no sharding."""
    import tensorflow as tf

    partitioners = tf.distribute.experimental.partitioners
    if config.mode == "none" or num_ps < 2:
        return None
    if config.mode == "fixed":
        return partitioners.FixedShardsPartitioner(config.num_shards or num_ps)
    return partitioners.MinSizePartitioner(
        min_shard_bytes=config.min_shard_bytes, max_shards=num_ps
    )


def cluster_resolver(tf_config: TFConfig) -> Any:
    """A resolver for `tf_config`, built from the parsed value (TF_CONFIG is not re-read)."""
    import tensorflow as tf

    return tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(tf_config.cluster.as_dict()),
        task_type=tf_config.task.type,
        task_id=tf_config.task.index,
        rpc_layer="grpc",
    )


def make_strategy(
    name: str,
    tf_config: TFConfig | None = None,
    communication: CommunicationConfig | None = None,
    partition: PartitionConfig | None = None,
) -> Any:
    """The tf.distribute strategy `name` for this task.

    Args:
        name: one of one_device, mirrored, multi_worker_mirrored, parameter_server.
        tf_config: this task's parsed TF_CONFIG (needed by the two multi-task strategies; with
            None, multi_worker_mirrored runs as a single worker).
        communication: collective options for multi_worker_mirrored.
        partition: variable sharding for parameter_server.
    """
    import tensorflow as tf

    if name not in STRATEGIES:
        raise ValueError(
            f"strategy must be one of {', '.join(STRATEGIES)}. Received: strategy={name!r}"
        )
    if name == ONE_DEVICE:
        gpus = tf.config.list_logical_devices("GPU")
        if gpus:
            return tf.distribute.OneDeviceStrategy(gpus[0].name)  # input prefetched to the GPU
        # CPU only: TensorFlow's default strategy, as Keras' fit runs. OneDeviceStrategy's
        # distributed iterator and per-step wrappers cost ~30% of a small model's examples/s
        # on CPU (bench/training) and buy nothing with one device.
        return tf.distribute.get_strategy()
    if name == MIRRORED:
        return tf.distribute.MirroredStrategy()
    if name == MULTI_WORKER_MIRRORED:
        options = communication_options(communication or CommunicationConfig())
        if tf_config is None:
            return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
        return tf.distribute.MultiWorkerMirroredStrategy(
            cluster_resolver=cluster_resolver(tf_config), communication_options=options
        )
    if tf_config is None or not tf_config.cluster.ps:
        raise ClusterSpecError(
            "strategy parameter_server needs a cluster with at least one ps task. "
            f"Received: cluster={tf_config.cluster.as_dict() if tf_config else None}"
        )
    # No variable_partitioner: TF's ShardedVariable cannot be updated by Keras 3 optimizers.
    # Large embedding tables are sharded by the model instead (graphs.sharded_embedding), as
    # separate variables that the strategy places round-robin over the PS tasks.
    del partition
    return tf.distribute.experimental.ParameterServerStrategy(cluster_resolver(tf_config))


def start_server(tf_config: TFConfig) -> Any:
    """Start the in-process gRPC server of a PS or worker task (parameter-server strategy).

    Such tasks run no Python training code: they serve variables (ps) or execute the functions
    the coordinator schedules (worker) until they are killed.
    """
    import tensorflow as tf

    return tf.distribute.Server(
        tf.train.ClusterSpec(tf_config.cluster.as_dict()),
        job_name=tf_config.task.type,
        task_index=tf_config.task.index,
        protocol="grpc",
        start=True,
    )


def allreduce_bytes_per_step(num_params: int, fp16: bool, num_workers: int) -> int:
    """Bytes each worker sends per step in a ring all-reduce of `num_params` gradients.

    A ring all-reduce sends 2 (n-1)/n of the buffer per worker; float32 is 4 bytes, float16 2.
    """
    if num_workers < 2:
        return 0
    width = 2 if fp16 else 4
    return int(2 * (num_workers - 1) / num_workers * num_params * width)
