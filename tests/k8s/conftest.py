"""Shared builders for the k8s tests: plain JobOptions, no pipeline spec needed."""

from __future__ import annotations

import copy

import pytest

from baton.k8s.options import JobOptions, Topology


def make_options(strategy: str = "multi_worker_mirrored", workers: int = 2, ps: int = 0,
                 **kwargs) -> JobOptions:
    """Options for the TFJob target unless `target=` says otherwise (most of these tests are
    about the TFJob path; tests/k8s/test_jobset*.py pass `target="jobset"` / `"trainjob"`)."""
    chief = kwargs.pop("chief", 1)
    kwargs.setdefault("target", "tfjob")
    base = dict(
        pipeline="penguins", run_id="20261129-221500-3fa2", spec_text="pipeline: penguins\n",
        data_stages=("ingest", "transform"), release_stages=("evaluate", "export", "push"),
        train_inputs=("transform/transformed",), release_inputs=("train/model",),
        topology=Topology(strategy, workers, ps, chief=chief),
    )
    base.update(kwargs)
    return JobOptions(**base)


@pytest.fixture
def tfjob() -> dict:
    """A valid parameter-server TFJob (Chief, 2 Workers, 1 PS) to hand-edit."""
    from baton.k8s.tfjob import build_tfjob

    return copy.deepcopy(build_tfjob(make_options("parameter_server", 2, 1)))
