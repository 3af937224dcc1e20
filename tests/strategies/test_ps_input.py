"""Parameter-server input: every worker reads its own shard of the training data.

TensorFlow's ParameterServerStrategy traces the per-worker dataset function once and runs that
same graph on every worker, with an InputContext of one input pipeline: without Baton's
per-worker pipelines every worker read the same rows in the same order.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from baton.graphs.synthetic import synthetic_spec
from baton.strategies.job import TrainJob
from tests.strategies.jobs import train_job

pytestmark = [pytest.mark.multi_worker, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def _first_batches(job: TrainJob, batches: int) -> dict[str, list[tuple[float, ...]]]:
    res = subprocess.run(
        [sys.executable, "-m", "tests.strategies.ps_probe", job.to_json(), str(batches)],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
        env={"PATH": "/usr/bin:/bin", "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["workers"] == 2  # ps_trainer.job_workers (it used to say 1 for any cluster)
    return {k: [tuple(r) for r in rows] for k, rows in out["rows"].items()}


@pytest.fixture(scope="module")
def penguins_transformed(tmp_path_factory):
    from tests.pipeline.dataplane.helpers import penguins

    return penguins(tmp_path_factory.mktemp("penguins"))


def _job(**kw) -> TrainJob:
    base = dict(
        feature_spec=synthetic_spec(4, (3,), 3).to_dict(),
        synthetic_examples=512,
        batch_size=16,
        strategy="parameter_server",
    )
    base.update(kw)
    return train_job(**base)


def test_parameter_server_workers_read_disjoint_shards_of_synthetic_data() -> None:
    rows = _first_batches(_job(), batches=3)
    w0, w1 = rows["0"], rows["1"]
    assert len(w0) == len(w1) == 3 * 16
    assert w0[:16] != w1[:16], "both workers got the same first batch"
    assert not set(w0) & set(w1), "the workers' first batches share rows"


def test_parameter_server_workers_read_disjoint_shards_of_transformed_data(
    penguins_transformed,
) -> None:
    from baton.graphs.feature_spec import FeatureSpec

    art = penguins_transformed
    job = _job(
        feature_spec=FeatureSpec.load(art["transform_graph"]).to_dict(),
        synthetic_examples=0,
        transformed_dir=str(art["transformed"]),
        num_train_examples=278,
    )
    rows = _first_batches(job, batches=2)
    w0, w1 = rows["0"], rows["1"]
    assert len(w0) == len(w1) == 2 * 16
    assert w0[:16] != w1[:16], "both workers got the same first batch"
    assert not set(w0) & set(w1), "the workers' first batches share rows"
