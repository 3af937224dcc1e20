"""fp16 gradient all-reduce and uneven (balanced) per-replica batches under a 2-replica
MirroredStrategy (one CPU split into two devices).

The logical-device split must happen before TensorFlow initialises, so the check runs in a fresh
interpreter.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import json, numpy as np, tensorflow as tf, keras
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from baton.graphs import models
from baton.graphs.step_options import StepOptions
from baton.graphs.steps import make_train_chunk
from baton.graphs.synthetic import synthetic_dataset, synthetic_spec

spec = synthetic_spec(4, (3,), 3)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
out = {}
for fp16 in (False, True):
    with strategy.scope():
        model = models.build_model("mlp", spec, seed=5)
        opt = keras.optimizers.SGD(0.1)
        opt.build(model.trainable_variables)
    chunk = make_train_chunk(model, opt, spec, 64, strategy, StepOptions(fp16_allreduce=fp16))
    data = synthetic_dataset(spec, 512, 64, repeat=True)
    it = iter(strategy.experimental_distribute_dataset(data))
    totals = chunk(it, tf.constant(10), tf.constant(0.0)).numpy()
    out[str(fp16)] = [w.tolist() for w in model.get_weights()]
    out["examples_" + str(fp16)] = float(totals[2])
    out["replicas"] = strategy.num_replicas_in_sync

# balance: each replica gets the whole global batch and trains on its rows [b[r], b[r+1]).
with strategy.scope():
    model = models.build_model("mlp", spec, seed=5)
    opt = keras.optimizers.SGD(0.1)
    opt.build(model.trainable_variables)
chunk = make_train_chunk(model, opt, spec, 64, strategy, StepOptions(), balance=True)
data = synthetic_dataset(spec, 512, 64, repeat=True).flat_map(
    lambda f, l: tf.data.Dataset.from_tensors((f, l)).repeat(2))
it = iter(strategy.distribute_datasets_from_function(lambda ctx: data))
totals = chunk(it, tf.constant(10), tf.constant(0.0), tf.constant([0, 48, 64])).numpy()
out["balanced"] = [w.tolist() for w in model.get_weights()]
out["balanced_totals"] = totals.tolist()

# the same, the rows gathered from an in-memory table by a global batch of row indices
# (graphs.row_table, balance: auto's input when the split fits in memory)
from baton.graphs.row_table import RowTable
table = RowTable(lambda: synthetic_dataset(spec, 512, 64))
with strategy.scope():
    model = models.build_model("mlp", spec, seed=5)
    opt = keras.optimizers.SGD(0.1)
    opt.build(model.trainable_variables)
chunk = make_train_chunk(model, opt, spec, 64, strategy, StepOptions(), balance=True,
                         take_rows=table.take)
order = tf.data.Dataset.range(512).map(lambda i: tf.cast(i, tf.int32)).batch(64).repeat()
order = order.flat_map(lambda i: tf.data.Dataset.from_tensors(i).repeat(2))
it = iter(strategy.distribute_datasets_from_function(lambda ctx: order))
totals = chunk(it, tf.constant(10), tf.constant(0.0), tf.constant([0, 16, 64])).numpy()
out["gathered"] = [w.tolist() for w in model.get_weights()]
out["gathered_totals"] = totals.tolist()
print("RESULT" + json.dumps(out))
"""


@pytest.fixture(scope="module")
def out() -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT")), None)
    assert line is not None, proc.stderr[-3000:]
    return json.loads(line[len("RESULT") :])


@pytest.mark.slow
def test_fp16_allreduce_is_close_to_fp32_but_not_identical(out: dict) -> None:
    import numpy as np

    assert out["replicas"] == 2 and out["examples_True"] == 640
    fp32 = [np.array(w) for w in out["False"]]
    fp16 = [np.array(w) for w in out["True"]]
    assert any(not np.array_equal(a, b) for a, b in zip(fp32, fp16, strict=True))  # fp16 active
    for a, b in zip(fp32, fp16, strict=True):
        np.testing.assert_allclose(a, b, atol=2e-3)


@pytest.mark.slow
def test_uneven_replica_batches_make_the_even_update(out: dict) -> None:
    """Replicas on 48 and 16 rows of each global batch of 64: the all-reduced gradient is the
    global-batch mean, so 10 SGD steps land where 32 + 32 rows do (up to float sum order)."""
    import numpy as np

    even = [np.array(w) for w in out["False"]]
    uneven = [np.array(w) for w in out["balanced"]]
    for a, b in zip(even, uneven, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    totals = out["balanced_totals"]  # loss, correct, examples, stop, seconds[2], rows[2]
    assert totals[2] == 640 and totals[6:8] == [480.0, 160.0], totals
    assert totals[4] > 0 and totals[5] > 0, totals  # each replica timed its own pass


@pytest.mark.slow
def test_rows_gathered_from_the_table_by_index_make_the_even_update(out: dict) -> None:
    """The table path: each replica gathers its rows (16 and 48 of 64) by index from the
    in-memory split; indices in the stream's order land where the streamed rows do."""
    import numpy as np

    even = [np.array(w) for w in out["False"]]
    gathered = [np.array(w) for w in out["gathered"]]
    for a, b in zip(even, gathered, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    totals = out["gathered_totals"]
    assert totals[2] == 640 and totals[6:8] == [160.0, 480.0], totals
