"""Placement from the inventory: Beam workers, replicas and the per-replica batch (faked GPUs)."""

from __future__ import annotations

import pytest

from baton.errors import ConfigError
from baton.strategies import inventory


def test_beam_workers_are_the_tasks_share_of_usable_cores(monkeypatch) -> None:
    monkeypatch.delenv(inventory.TASKS_ON_NODE_ENV, raising=False)
    assert inventory.beam_workers({"cpu_usable": 8}) == 8
    assert inventory.beam_workers({"cpu_usable": 8}, 3) == 2
    assert inventory.beam_workers({"cpu_usable": 1}, 4) == 1
    monkeypatch.setenv(inventory.TASKS_ON_NODE_ENV, "2")  # co-located by a launcher
    assert inventory.beam_workers({"cpu_usable": 8}) == 4


@pytest.mark.parametrize("strategy,gpus,nodes,expected", [
    ("one_device", 4, 1, 1),
    ("mirrored", 4, 1, 4),
    ("mirrored", 0, 1, 1),
    ("multi_worker_mirrored", 2, 3, 6),
    ("multi_worker_mirrored", 0, 3, 3),
    ("parameter_server", 2, 3, 2),  # a worker's step splits over its own GPUs
    (None, 2, 2, 4),
])
def test_replicas_follow_the_gpus(strategy, gpus, nodes, expected) -> None:
    assert inventory.replicas(strategy, [{"cpu_usable": 2, "gpus": gpus}] * nodes) == expected


def test_per_replica_batch_is_global_over_gpus_and_recorded() -> None:
    node = {"cpu_usable": 8, "gpus": 4}
    d = inventory.derive_defaults([node], 256, "mirrored")
    assert (d["replicas"], d["per_replica_batch_size"], d["beam_workers"]) == (4, 64, 8)
    assert "per-replica batch 64" in inventory.describe_defaults(d)
    d = inventory.derive_defaults([node, node], 256, "multi_worker_mirrored")
    assert (d["replicas"], d["per_replica_batch_size"]) == (8, 32)
    cpu = inventory.derive_defaults([{"cpu_usable": 2, "gpus": 0}], 30, "mirrored")
    assert (cpu["replicas"], cpu["per_replica_batch_size"]) == (1, 30)


def test_batch_not_divisible_by_replicas_is_an_error_naming_the_field() -> None:
    with pytest.raises(ConfigError) as err:
        inventory.derive_defaults([{"cpu_usable": 8, "gpus": 4}], 30, "mirrored")
    text = str(err.value)
    assert text.startswith("train.config.batch_size:") and "Received: batch_size=30" in text
    assert "4 replicas" in text and "4 GPUs" in text
    assert err.value.exit_code == 2
    assert inventory.per_replica_batch(30, 3) == 10


def test_pool_sizes_match_the_thread_plan(monkeypatch) -> None:
    for env in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", inventory.TASKS_ON_NODE_ENV):
        monkeypatch.delenv(env, raising=False)
    for cores in (1, 2, 7):
        plan = inventory.thread_plan({"cpu_usable": cores})
        assert inventory.pool_sizes(cores) == (plan["intra_op"], plan["inter_op"])


def test_train_check_refuses_a_batch_the_local_gpus_cannot_split(monkeypatch) -> None:
    """`baton run` exits 2 before any stage when the node's GPUs do not divide the batch."""
    from baton.pipeline.context import RunOptions
    from baton.pipeline.stages import train

    fake = {"host": "h", "cpu_cores": 8, "cpu_usable": 8, "cpu_quota": None, "gpus": 3,
            "memory_bytes": 2**34, "memory_available_bytes": 2**33}
    monkeypatch.setattr(inventory, "node_inventory", lambda: dict(fake))
    stage = type("S", (), {"name": "train"})()
    bad = train.check_options(train.Config(batch_size=32, strategy="mirrored"), RunOptions(),
                              stage, None)
    assert len(bad) == 1 and "config.batch_size" in bad[0] and "batch_size=32" in bad[0]
    assert train.check_options(train.Config(batch_size=33, strategy="mirrored"), RunOptions(),
                               stage, None) == []
    # one_device uses one GPU: any batch
    assert train.check_options(train.Config(batch_size=32), RunOptions(), stage, None) == []


def test_the_node_says_whether_tensorflow_runs_onednn_kernels_and_why() -> None:
    """TensorFlow turns oneDNN on by itself only on CPUs with neural-network features; the
    variable decides where it is set. The node's description carries it."""
    avx2 = "model name\t: AMD EPYC\nflags\t\t: fpu sse avx avx2 fma\n"
    vnni = "model name\t: Intel Xeon\nflags\t\t: avx2 avx512f avx512_vnni\n"
    off = inventory.cpu_kernels(avx2, {})
    assert off["cpu_model"] == "AMD EPYC" and off["onednn"]["on"] is False
    assert "TF_ENABLE_ONEDNN_OPTS=1 turns it on" in off["onednn"]["why"]
    on = inventory.cpu_kernels(vnni, {})
    assert on["onednn"] == {"on": True, "why": "TensorFlow's default on this CPU (avx512_vnni)"}
    assert inventory.cpu_kernels(avx2, {"TF_ENABLE_ONEDNN_OPTS": "1"})["onednn"]["on"] is True
    assert inventory.cpu_kernels(vnni, {"TF_ENABLE_ONEDNN_OPTS": "0"})["onednn"]["on"] is False
    node = {"host": "h", "cpu_cores": 2, "cpu_usable": 2, "cpu_quota": None, "gpus": 0,
            "memory_bytes": 2**30, **off}
    assert "; oneDNN off (TensorFlow's default on a CPU without" in inventory.describe(node)
