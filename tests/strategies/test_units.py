"""Fault specs, strategy options, partitioners, all-reduce accounting and inventory defaults."""

from __future__ import annotations

import pytest

from baton.strategies import factory, faults, inventory
from baton.strategies.cluster import ClusterSpec, TaskId, TFConfig
from tests.strategies.jobs import train_job


def test_parse_fault_forms() -> None:
    f = faults.parse_fault("worker:1@step:40")
    assert f == faults.Fault(TaskId("worker", 1), 40, "kill")
    assert faults.parse_fault("ps@step:3:term") == faults.Fault(TaskId("ps", 0), 3, "term")
    assert faults.parse_fault("") is None and faults.parse_fault(None) is None
    assert str(f) == "worker:1@step:40:kill"


@pytest.mark.parametrize("bad", ["worker:1", "gpu:0@step:3", "worker:1@step:0", "worker@epoch:2"])
def test_bad_fault_specs_are_rejected_with_the_value(bad: str) -> None:
    with pytest.raises(faults.FaultSpecError, match="Received"):
        faults.parse_fault(bad)


def test_chunks_are_cut_at_the_fault_step() -> None:
    f = faults.parse_fault("worker:0@step:13")
    assert faults.clip_chunk(f, 10, 8) == 3
    assert faults.clip_chunk(f, 13, 8) == 8
    assert faults.clip_chunk(None, 10, 8) == 8


def test_communication_config_maps_to_tf_options() -> None:
    import tensorflow as tf

    opts = factory.communication_options(
        factory.CommunicationConfig(
            implementation="ring", bytes_per_pack=1 << 20, timeout_seconds=30
        )
    )
    assert opts.implementation == tf.distribute.experimental.CommunicationImplementation.RING
    assert opts.bytes_per_pack == 1 << 20 and opts.timeout_seconds == 30
    with pytest.raises(ValueError, match="Received: implementation='mpi'"):
        factory.CommunicationConfig(implementation="mpi")  # type: ignore[arg-type]


def test_partitioner_shards_large_variables_only_across_ps() -> None:
    import tensorflow as tf

    p = factory.variable_partitioner(factory.PartitionConfig(min_shard_bytes=1024), num_ps=2)
    assert p(tf.TensorShape([10_000, 16]), tf.float32) == [2, 1]
    assert p(tf.TensorShape([4, 4]), tf.float32) == [1, 1]
    assert factory.variable_partitioner(factory.PartitionConfig(), num_ps=1) is None
    fixed = factory.variable_partitioner(factory.PartitionConfig(mode="fixed"), num_ps=3)
    assert fixed(tf.TensorShape([9, 2]), tf.float32) == [3, 1]


def test_fp16_allreduce_halves_bytes_on_the_wire() -> None:
    full = factory.allreduce_bytes_per_step(1000, fp16=False, num_workers=2)
    assert full == 4000
    assert factory.allreduce_bytes_per_step(1000, fp16=True, num_workers=2) * 2 == full
    assert factory.allreduce_bytes_per_step(1000, fp16=False, num_workers=1) == 0


def test_parameter_server_without_ps_is_refused() -> None:
    cfg = TFConfig(ClusterSpec(worker=("127.0.0.1:1",)), TaskId("worker", 0))
    with pytest.raises(ValueError, match="at least one ps"):
        factory.make_strategy("parameter_server", cfg)
    with pytest.raises(ValueError, match="Received: strategy='horovod'"):
        factory.make_strategy("horovod")


def test_inventory_and_derived_defaults() -> None:
    node = inventory.node_inventory()
    assert node["cpu_cores"] >= 1 and node["memory_bytes"] > 0 and node["gpus"] >= 0
    d = inventory.derive_defaults([{**node, "gpus": 0}, {**node, "gpus": 0}], 256)
    assert d["replicas"] == 2 and d["per_replica_batch_size"] == 128
    d = inventory.derive_defaults([{**node, "gpus": 4}], 256)
    assert d["replicas"] == 4 and d["per_replica_batch_size"] == 64
    assert "replicas" in inventory.describe_defaults(d)


def test_inventory_reports_round_trip(tmp_path) -> None:
    inventory.write_report(tmp_path, "worker:1", {"cpu_cores": 2})
    inventory.write_report(tmp_path, "chief:0", {"cpu_cores": 4})
    assert [n["task"] for n in inventory.gather(tmp_path)] == ["chief:0", "worker:1"]


def test_mixed_bfloat16_trains_and_exports_a_float32_model(tmp_path) -> None:
    import keras

    from baton.graphs.synthetic import synthetic_spec
    from baton.strategies.loop import TaskRole
    from baton.strategies.task import run_task, write_model_artifact

    job = train_job(
        feature_spec=synthetic_spec(4, (3,), 3).to_dict(),
        synthetic_examples=512,
        epochs=2,
        batch_size=32,
        mixed_precision="mixed_bfloat16",
    )
    try:
        result = run_task(job, None, TaskRole(backup_dir=tmp_path / "backup"))
        assert result is not None
        assert result.model.get_layer("dense_0").compute_dtype == "bfloat16"
        write_model_artifact(tmp_path / "out", job, result, {})
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    model = keras.models.load_model(tmp_path / "out" / "model.keras")
    assert model.get_layer("dense_0").compute_dtype == "float32"
    assert result.history[-1]["eval_accuracy"] > 0.8


def test_cgroup_cpu_quota_v2_v1_and_none(tmp_path) -> None:
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cpu.max").write_text("150000 100000\n")
    assert inventory.cgroup_cpu_quota(v2) == 1.5
    (v2 / "cpu.max").write_text("max 100000\n")
    assert inventory.cgroup_cpu_quota(v2) is None
    v1 = tmp_path / "v1" / "cpu"
    v1.mkdir(parents=True)
    (v1 / "cpu.cfs_quota_us").write_text("50000\n")
    (v1 / "cpu.cfs_period_us").write_text("100000\n")
    assert inventory.cgroup_cpu_quota(tmp_path / "v1") == 0.5
    (v1 / "cpu.cfs_quota_us").write_text("-1\n")
    assert inventory.cgroup_cpu_quota(tmp_path / "v1") is None
    assert inventory.cgroup_cpu_quota(tmp_path / "absent") is None


def test_thread_plan_shares_the_usable_cores_and_yields_to_tf_variables(monkeypatch) -> None:
    monkeypatch.delenv("TF_NUM_INTRAOP_THREADS", raising=False)
    monkeypatch.delenv("TF_NUM_INTEROP_THREADS", raising=False)
    monkeypatch.delenv(inventory.TASKS_ON_NODE_ENV, raising=False)
    node = {"cpu_usable": 8}
    assert inventory.thread_plan(node)["intra_op"] == 8  # alone on the node
    assert inventory.thread_plan(node, 3)["intra_op"] == 2
    one = inventory.thread_plan({"cpu_usable": 2}, 3)
    assert (one["intra_op"], one["inter_op"]) == (1, 2)  # never 0; inter-op at least 2
    monkeypatch.setenv(inventory.TASKS_ON_NODE_ENV, "4")
    assert inventory.thread_plan(node)["intra_op"] == 2
    monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "5")
    plan = inventory.thread_plan(node)
    assert (plan["intra_op"], plan["source"]) == (5, "environment")


def test_apply_threads_before_and_after_tensorflow_starts() -> None:
    import subprocess
    import sys

    code = (
        "import json, tensorflow as tf\n"
        "from baton.strategies import inventory\n"
        "before = inventory.apply_threads({'intra_op': 1, 'inter_op': 3})\n"
        "tf.constant(1.0) + 1\n"
        "after = inventory.apply_threads({'intra_op': 2, 'inter_op': 2})\n"
        "print(json.dumps([before['applied'], after['applied'], after.get('reason', ''),\n"
        "    tf.config.threading.get_intra_op_parallelism_threads(),\n"
        "    tf.config.threading.get_inter_op_parallelism_threads()]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    import json

    applied, again, reason, intra, inter = json.loads(out.stdout.strip().splitlines()[-1])
    assert (applied, again, intra, inter) == (True, False, 1, 3)
    assert "initialization" in reason


def test_planned_saves_count_epoch_ends_and_backup_steps_left() -> None:
    from baton.strategies.trainer import TrainPlan, planned_saves

    plan = TrainPlan(epochs=20, steps_per_epoch=64, global_batch_size=256)
    assert planned_saves(plan, 0) == 20
    assert planned_saves(plan, 64 * 19 + 3) == 1  # resumed inside the last epoch
    every = TrainPlan(epochs=2, steps_per_epoch=100, global_batch_size=8, backup_every=40)
    assert planned_saves(every, 0) == 2 + 4  # 40, 80, 120, 160 (200 is an epoch end)
    probe = TrainPlan(epochs=5, steps_per_epoch=100, global_batch_size=8, max_steps=50)
    assert planned_saves(probe, 0) == 1  # the partial epoch ends too


def test_a_step_xla_cannot_compile_is_a_stage_error_naming_the_op_and_setting() -> None:
    """TensorFlow's message is dozens of lines without `jit_compile`; the loop's is one."""
    import keras
    import tensorflow as tf

    from baton.errors import StageError
    from baton.graphs.step_options import StepOptions
    from baton.graphs.synthetic import synthetic_dataset, synthetic_spec
    from baton.strategies.loop import TaskRole
    from baton.strategies.trainer import TrainPlan, train

    spec = synthetic_spec(2, (), 3)

    class StringRoundTrip(keras.layers.Layer):  # string ops have no XLA kernel
        def call(self, x):
            return tf.strings.to_number(tf.strings.as_string(x))

    def build():
        inputs = {f.name: keras.Input((), name=f.name) for f in spec.features}
        x = keras.layers.Concatenate()([keras.layers.Reshape((1,))(v) for v in inputs.values()])
        model = keras.Model(inputs, keras.layers.Dense(3)(StringRoundTrip()(x)))
        return model, keras.optimizers.SGD(0.1)

    plan = TrainPlan(epochs=1, steps_per_epoch=4, global_batch_size=16, steps_per_execution=4)
    with pytest.raises(StageError, match=r"^train.config.jit_compile: true: XLA has no kernel "
                                         r"for the op AsString on XLA_CPU_JIT \(node .*AsString\)"):
        train(tf.distribute.get_strategy(), build, spec,
              lambda skip, ctx: synthetic_dataset(spec, 64, 16, repeat=True), None, plan,
              TaskRole(), StepOptions(jit_compile=True))
