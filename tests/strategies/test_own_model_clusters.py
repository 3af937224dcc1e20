"""A user's own model (custom layer, custom loss, callbacks) on real local clusters.

The model module and its helper are files in a directory of their own (the "spec's directory"),
named in the job by reference (`tiny_model:build`) with `code_dir`: every `baton task` process
imports them itself. Multi-process, so slow and multi_worker; tiny data, a few dozen steps.
"""

from __future__ import annotations

import io
import json
import random
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from baton.graphs.synthetic import synthetic_spec
from baton.pipeline.stages.train import task_argv
from baton.strategies import launcher
from baton.strategies.faults import parse_fault
from baton.strategies.job import TrainJob
from tests.strategies.jobs import train_job

pytestmark = [pytest.mark.multi_worker, pytest.mark.slow]
HERE = Path(__file__).resolve().parent


def _code_dir(root: Path) -> Path:
    code = root / "code"
    code.mkdir(exist_ok=True)
    shutil.copy(HERE / "own_model_module.py", code / "tiny_model.py")
    shutil.copy(HERE / "own_model_layers.py", code / "tiny_layers.py")
    return code


def _job(code: Path, **kw: Any) -> TrainJob:
    base: dict[str, Any] = dict(
        feature_spec=synthetic_spec(4, (3, 2), 3).to_dict(),
        synthetic_examples=1024,
        batch_size=64,
        epochs=2,
        steps_per_execution=4,
        backup_every=4,
        strategy="multi_worker_mirrored",
        model="tiny_model:build",
        model_config={"units": 8},
        loss="tiny_model:hinge_loss",
        metrics=["sparse_categorical_crossentropy"],
        eval_batch_size=32,  # 8 eval batches: each worker evaluates 4 (strategies.eval_shards)
        code_dir=str(code),
    )
    base.update(kw)
    return train_job(**base)


def _launch(root: Path, name: str, job: TrainJob, workers: int = 2, ps: int = 0,
            fault: str | None = None) -> tuple[Any, Path, str]:
    d = root / name
    d.mkdir()
    (d / "job.json").write_text(job.to_json())
    log = io.StringIO()
    cfg = launcher.LaunchConfig(workers=workers, ps=ps, strategy=job.strategy, max_restarts=2,
                                fault=parse_fault(fault), state_dir=d / "state")
    result = launcher.launch(
        cfg, lambda task: task_argv(d / "job.json", d / "out", d / "backup"), stream=log
    )
    return result, d / "out" / "model", log.getvalue()


def _weights(model_dir: Path, code: Path) -> list[np.ndarray]:
    import keras

    from baton.graphs.user_refs import custom_objects

    return keras.models.load_model(
        model_dir / "model.keras", custom_objects=custom_objects(["tiny_model"], code)
    ).get_weights()


def test_user_model_with_custom_layer_killed_worker_matches_uninterrupted(tmp_path) -> None:
    code = _code_dir(tmp_path)
    job = _job(code)
    planned = job.settings.epochs * job.steps_per_epoch()  # 32; a backup every 4 steps
    step = random.Random().randint(2, planned - 2)  # anywhere mid-run (the sweep bench: 10 more)
    with ThreadPoolExecutor(2) as pool:  # both clusters at once: half the wall time
        clean_f = pool.submit(_launch, tmp_path, "clean", job)
        hurt_f = pool.submit(_launch, tmp_path, "hurt", job, fault=f"worker:1@step:{step}")
        (clean, clean_dir, clean_log), (hurt, hurt_dir, log) = clean_f.result(), hurt_f.result()
    assert clean.ok and clean.restarts == 0, clean_log[-3000:]
    assert hurt.ok and hurt.restarts == 1, f"kill at step {step}: {log[-3000:]}"
    info = json.loads((hurt_dir / "train_info.json").read_text())
    assert info["model"] == "tiny_model:build" and info["user_modules"] == ["tiny_model"]
    assert info["steps"] == planned
    # two tasks on this machine: each is pinned to its share of the cores (a node of its own,
    # strategies.local_tasks) and sizes TensorFlow's pools to it; with fewer cores than tasks
    # they share every core and each takes its share of the pools
    threads = {n["task"]: n["threads"] for n in info["inventory"]}
    assert set(threads) == {"worker:0", "worker:1"}, info["inventory"]
    for n in info["inventory"]:
        t = n["threads"]
        own = hurt.placement.get(n["task"])
        assert t["applied"] and t["tasks_on_node"] == (1 if own else 2), (t, hurt.placement)
        share = len(own) if own else max(1, n["cpu_usable"] // 2)
        assert n["cpu_usable"] == (len(own) if own else n["cpu_usable"]), n
        assert t["intra_op"] == share or t["source"] == "environment", t
    # the last backup at or before the kill; at an epoch's last step the fault fires at the
    # chunk's end, before the epoch-end backup (seen: a kill at 16 of 2 x 16 resumed from 12)
    expected = step - step % job.settings.backup_every
    if step % job.steps_per_epoch() == 0:
        expected = step - job.settings.backup_every
    resumed = info["resumed_from_step"]
    assert resumed == expected, (step, resumed)
    history = json.loads((hurt_dir / "history.json").read_text())
    assert "eval_sparse_categorical_crossentropy" in history[-1]
    _assert_eval_is_the_whole_splits(job, clean_dir, code)
    clean_w, hurt_w = _weights(clean_dir, code), _weights(hurt_dir, code)
    assert len(clean_w) == 7  # 2 embeddings, hidden kernel+bias, Scale (custom), logits kernel+bias
    for a, b in zip(clean_w, hurt_w, strict=True):
        assert np.array_equal(a, b), f"weights differ after a kill at step {step}"


def _assert_eval_is_the_whole_splits(job: TrainJob, model_dir: Path, code: Path) -> None:
    """Each worker evaluated half of the eval batches and one all-reduce merged the counts and
    the metric's state: the recorded figures are the whole split's, evaluated here in one
    process on the saved model."""
    import keras

    from baton.graphs.eval_step import make_eval_fn
    from baton.graphs.totals import totals_to_metrics
    from baton.graphs.user_refs import custom_objects
    from baton.strategies.task import objectives

    info = json.loads((model_dir / "train_info.json").read_text())
    assert info["eval_sharded_over"] == 2, info
    model = keras.models.load_model(
        model_dir / "model.keras", custom_objects=custom_objects(["tiny_model"], code))
    obj = objectives(job)
    metrics = obj.metrics()
    whole = make_eval_fn(model, job.spec(), obj.loss, metrics)(job.data().dataset_fns()[1]())
    expected = totals_to_metrics(whole.numpy(), "classification")
    expected.update({m.name: m.result() for m in metrics})
    assert expected["sparse_categorical_crossentropy"] > 0 and float(whole[2]) == 256
    last = json.loads((model_dir / "history.json").read_text())[-1]
    for k, v in expected.items():
        assert last[f"eval_{k}"] == pytest.approx(v, rel=1e-5, abs=1e-6), (k, last, expected)


def test_user_model_trains_under_parameter_servers(tmp_path) -> None:
    code = _code_dir(tmp_path)
    job = _job(code, strategy="parameter_server", epochs=3, backup_every=0,
               optimizer={"class_name": "Adam", "config": {"learning_rate": 0.02}})
    result, model_dir, log = _launch(tmp_path, "ps", job, workers=2, ps=1)
    assert result.ok, log[-3000:]
    info = json.loads((model_dir / "train_info.json").read_text())
    assert info["strategy"] == "parameter_server" and info["steps"] >= 3 * job.steps_per_epoch()
    history = json.loads((model_dir / "history.json").read_text())
    assert len(history) == 3 and history[-1]["eval_accuracy"] > 0.5, history


def test_a_nan_loss_under_parameter_servers_fails_naming_the_epochs_steps(tmp_path) -> None:
    """The coordinator's non-finite guard (issue 35): the chunk that went NaN is named by the
    epoch's own steps, though steps_per_execution (20) is longer than the epoch (16 steps)."""
    code = _code_dir(tmp_path)
    job = _job(code, strategy="parameter_server", epochs=3, backup_every=0, loss="",
               steps_per_execution=20, callbacks=["tiny_model:poison_second_epoch"])
    assert job.steps_per_epoch() == 16
    result, model_dir, log = _launch(tmp_path, "ps_nan", job, workers=2, ps=1)
    assert not result.ok and not model_dir.exists()
    assert re.search(r"the training loss is not finite in epoch 2 \(steps 17-32\): the weight "
                     r"'\S+' holds NaN while the features are finite", log), log[-3000:]


def test_early_stopping_on_one_worker_stops_both_at_the_same_step(tmp_path) -> None:
    """The stop request of worker 1's EarlyStopping reaches worker 0 through one all-reduce."""
    code = _code_dir(tmp_path)
    job = _job(code, epochs=5, backup_every=0, callbacks=["tiny_model:stop_on_worker_1"])
    result, model_dir, log = _launch(tmp_path, "stop", job)
    assert result.ok, log[-3000:]
    spe = job.steps_per_epoch()
    info = json.loads((model_dir / "train_info.json").read_text())
    # patience 0 and a min_delta nothing beats: it stops at the second epoch's end
    assert info["steps"] == info["stopped_early_at_step"] == 2 * spe, info
    assert len(json.loads((model_dir / "history.json").read_text())) == 2
    done = re.findall(r"worker:1 done at step (\d+)", log)
    assert done == [str(2 * spe)], log[-3000:]
