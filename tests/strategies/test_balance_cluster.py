"""`balance: auto` on a real 2-worker cluster with one worker slowed down from outside.

The launcher pins each worker to its own core (where there are two) and slows worker:1 to a fifth
of its running time (--inject-slowdown with the signal duty cycle, which slows it relative to
whatever share of the CPU it gets, so the test holds on a loaded machine); the workers time their
own passes and move rows of each global batch to worker:0. Multi-process, so slow and multi_worker; one cluster, a few dozen
steps.
"""

from __future__ import annotations

import io
import json
import os

import pytest

from baton.graphs.synthetic import synthetic_spec
from baton.pipeline.stages.train import task_argv
from baton.strategies import launcher
from baton.strategies.job import TrainJob
from baton.strategies.slowdown import parse_slowdown

pytestmark = [pytest.mark.multi_worker, pytest.mark.slow]


def test_a_slowed_worker_gets_a_smaller_batch_and_the_global_batch_holds(
        tmp_path) -> None:
    job = TrainJob(
        feature_spec=synthetic_spec(16, (), 3).to_dict(),
        synthetic_examples=1024 * 40,
        batch_size=1024,
        epochs=1,
        steps_per_execution=4,
        strategy="multi_worker_mirrored",
        balance="auto",
        model_config={"hidden_units": [512, 512]},
    )
    (tmp_path / "job.json").write_text(job.to_json())
    log = io.StringIO()
    cfg = launcher.LaunchConfig(
        workers=2, strategy=job.strategy, max_restarts=0, state_dir=tmp_path / "state",
        # a fifth of the time: with the suite's other workers on the same 2 cores, a third was not
        # slower than a worker that only gets its share of an oversubscribed CPU. By the signal
        # duty cycle, which is relative (the worker runs a fifth of whatever share it gets), not
        # by a CPU quota, which is absolute (a fifth of a core): at load ~10 the machine already
        # held worker:0 to about a fifth of a core, so the quota slowed worker:1 no more than
        # its peer and the split never moved (`changes: 0` in a fresh clone). Measured with this
        # scenario at load 15: quota, median speed ratio 0.92 and rows moved to the slowed
        # worker ([472, 552]); signals at load 30 and 41: ratios 4.19 and 4.24, [807, 217].
        slowdown=parse_slowdown("worker:1@speed:0.2:10ms:signals"),
    )
    result = launcher.launch(
        cfg, lambda t: task_argv(tmp_path / "job.json", tmp_path / "out", tmp_path / "b"),
        stream=log,
    )
    assert result.ok, log.getvalue()[-3000:]
    assert "slowing worker:1 down to 0.2" in log.getvalue()
    assert result.slowdown["method"] == "signals", result.slowdown
    if len(os.sched_getaffinity(0)) >= 2:  # a node's core is its own
        assert len(result.placement) == 2 and not (
            set(result.placement["worker:0"]) & set(result.placement["worker:1"])), result.placement
    info = json.loads((tmp_path / "out" / "model" / "train_info.json").read_text())
    assert info["steps"] == 40 and info["num_replicas"] == 2
    bal = info["balance"]
    assert bal["mode"] == "auto" and bal["global_batch"] == 1024
    assert bal["input"] == "table", bal  # 40,960 rows fit: each worker gathers its own rows
    final = bal["final_batch"]
    assert sum(final) == 1024 and bal["changes"] >= 1, bal
    assert bal["history"][-1]["event"] == "end", bal
    for h in bal["history"]:
        assert sum(h["batch"]) == 1024 and len(h["rows_per_sec"]) == 2, h
    # Judged on the run as a whole (medians over the recorded points), not on its last chunk:
    # the suite shares 2 cores with other tests, which slows either worker at random.
    ratios = sorted(h["rows_per_sec"][0] / h["rows_per_sec"][1] for h in bal["history"])
    # Measured with the memoryless duty cycle (strategies/slowdown.py): medians 1.9 and 4.1 on an
    # idle machine, 1.9 and 1.5 beside three CPU burners. The fixed cycle it replaced let the
    # worker's short passes fit in its run slots and gave 0.85 in a fresh-clone suite run.
    assert ratios[len(ratios) // 2] > 1.05, bal
    shares = sorted(h["batch"][0] for h in bal["history"][1:])
    assert shares[len(shares) // 2] > 512, bal  # the slowed worker trains on the smaller part
