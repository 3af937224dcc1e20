"""The examples a train stage run trained on, which its joules per example divide by: counted
over every restart and resize of the run, not from its last group's start (audit of issue 14:
an elastic run that lost a worker at step 40 of 64 reported 768 examples, the last group's)."""

from __future__ import annotations

from baton.pipeline.stages.train import examples_trained


def test_a_restarted_or_resized_run_counts_from_where_its_first_group_started() -> None:
    # the last group resumed from 40; the run itself started from scratch
    assert examples_trained({"steps": 64, "resumed_from_step": 40, "started_from_step": 0},
                            32) == 64 * 32
    # a rerun that resumed an interrupted run's backup at 24, then restarted from 40
    assert examples_trained({"steps": 64, "resumed_from_step": 40, "started_from_step": 24},
                            32) == 40 * 32


def test_one_group_counts_from_its_own_start() -> None:
    assert examples_trained({"steps": 64}, 32) == 64 * 32
    assert examples_trained({"steps": 64, "resumed_from_step": 16}, 32) == 48 * 32
