"""The data stages' Beam workers: explicit args win, else the inventory's cores (faked here)."""

from __future__ import annotations

from baton.pipeline.dataplane.beam import runner as beam_runner

MANY = beam_runner.MULTI_WORKER_MIN_ROWS
NODE = {"cpu_usable": 8}


def test_explicit_args_win_and_are_recorded() -> None:
    args = ["--direct_num_workers=3", "--direct_running_mode=multi_threading"]
    out, rec = beam_runner.plan_workers(args, rows=MANY, work_items=16, node=NODE)
    assert out == args
    assert rec == {"beam_workers": 3, "beam_running_mode": "multi_threading",
                   "beam_workers_reason": "beam_pipeline_args"}
    out, rec = beam_runner.plan_workers(["--direct_num_workers", "2"], rows=MANY,
                                        work_items=16, node=NODE)
    assert out == ["--direct_num_workers", "2"] and rec["beam_workers"] == 2


def test_another_runner_is_left_alone() -> None:
    args = ["--runner=PortableRunner", "--job_endpoint=localhost:8099"]
    out, rec = beam_runner.plan_workers(args, rows=MANY, work_items=16, node=NODE)
    assert out == args and rec["beam_running_mode"] == "PortableRunner"


def test_default_follows_usable_cores_capped_by_shards(monkeypatch) -> None:
    monkeypatch.delenv("BATON_TASKS_ON_NODE", raising=False)
    out, rec = beam_runner.plan_workers([], rows=MANY, work_items=16, node=NODE)
    assert out == ["--direct_num_workers=8", f"--direct_running_mode={beam_runner.MULTI_MODE}"]
    assert rec["beam_workers"] == 8 and rec["beam_workers_reason"].startswith("inventory: 8 usable")
    out, rec = beam_runner.plan_workers([], rows=MANY, work_items=3, node=NODE)
    assert rec["beam_workers"] == 3 and "--direct_num_workers=3" in out
    monkeypatch.setenv("BATON_TASKS_ON_NODE", "4")  # a co-located task gets its share
    _, rec = beam_runner.plan_workers([], rows=MANY, work_items=16, node=NODE)
    assert rec["beam_workers"] == 2


def test_small_inputs_stay_in_process() -> None:
    out, rec = beam_runner.plan_workers([], rows=344, work_items=2, node=NODE)
    assert out == [] and rec["beam_workers"] == 1 and rec["beam_running_mode"] == "in_memory"
    assert "344 rows <" in rec["beam_workers_reason"]
    out, rec = beam_runner.plan_workers([], rows=MANY, work_items=1, node=NODE)
    assert out == [] and "1 shard(s)" in rec["beam_workers_reason"]
    out, rec = beam_runner.plan_workers([], rows=MANY, work_items=8, node={"cpu_usable": 1})
    assert out == [] and rec["beam_workers"] == 1


_SEEN: list[int] = []  # module level: the in-process worker unpickles the DoFn by reference


def _record_sampling_period(_: int) -> None:
    from apache_beam.runners.worker import statesampler

    _SEEN.append(statesampler.get_current_tracker().sampling_period_ms)


def test_in_process_bundles_wait_at_most_the_short_sampling_period() -> None:
    """Each bundle ends by joining Beam's state sampler thread: in-process its period is
    SAMPLING_PERIOD_MS while the pipeline runs (not Beam's 200 ms), and Beam's default is
    back afterwards, also when the pipeline fails."""
    import apache_beam as beam
    import pytest
    from apache_beam.runners.worker import statesampler

    from baton.errors import StageError

    def build(p: object) -> None:
        p | beam.Create([1, 2]) | beam.Map(_record_sampling_period)

    _SEEN.clear()
    beam_runner.run(build, [])
    assert _SEEN == [beam_runner.SAMPLING_PERIOD_MS] * 2
    assert statesampler.StateSampler.__init__.__defaults__ == (
        statesampler.DEFAULT_SAMPLING_PERIOD_MS,)

    def failing(p: object) -> None:
        def boom(_: int) -> None:
            raise StageError("boom")

        p | beam.Create([1]) | beam.Map(boom)

    with pytest.raises(StageError, match="boom"):
        beam_runner.run(failing, [])
    assert statesampler.StateSampler.__init__.__defaults__ == (
        statesampler.DEFAULT_SAMPLING_PERIOD_MS,)
