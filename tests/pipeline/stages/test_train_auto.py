"""`workers: auto`: the train stage probes one process and a local 2-worker cluster, then trains
with the best (strategies/probe.py); contradictions are refused before any stage runs."""

from __future__ import annotations

import json

import pytest

from baton.configs import ConfigError, build_config
from baton.errors import SpecError
from baton.pipeline.context import RunOptions
from baton.pipeline.spec import spec_from_dict
from baton.pipeline.stages import train
from baton.pipeline.testing import run_stage


def _spec(cluster: dict | None = None, config: dict | None = None):
    return spec_from_dict({
        "pipeline": "p", **({"cluster": cluster} if cluster else {}),
        "stages": [{"name": "fit", "type": "train", "config": config or {}}],
    })


def _problems(config: dict, options: RunOptions | None = None, cluster: dict | None = None):
    spec = _spec(cluster, config)
    cfg = build_config(train.Config, config)
    return (train.check_spec(cfg, spec.stage("fit"), spec)
            + train.check_options(cfg, options or RunOptions(), spec.stage("fit"), spec))


def test_auto_resolves_from_flag_config_or_spec_and_a_number_beats_it() -> None:
    cfg = build_config(train.Config, {"workers": "auto", "max_workers": 3, "objective": "energy"})
    topo = train.topology(cfg, RunOptions())
    assert topo.auto == train.AutoWorkers("config.workers=auto", 3, "energy", 30)
    assert train.topology(cfg, RunOptions(workers=2)) == train.Topology(
        "multi_worker_mirrored", 2, 0)
    spec = _spec({"workers": "auto", "max_workers": 2})
    auto = train.topology(train.Config(), RunOptions(), spec.cluster).auto
    assert auto is not None and (auto.source, auto.max_workers, auto.objective) == (
        "cluster.workers=auto", 2, "speed")
    assert train.topology(train.Config(workers=1), RunOptions(), spec.cluster).auto is None
    auto = train.topology(train.Config(), RunOptions(workers_auto=True)).auto
    assert auto is not None and auto.source == "--workers auto" and auto.max_workers >= 1


@pytest.mark.parametrize(
    ("config", "options", "cluster", "message"),
    [
        ({"workers": "auto"}, RunOptions(strategy="parameter_server", ps=1), None,
         "config.workers=auto probes one process (one_device) and multi-worker mirrored "
         "clusters, so it cannot be combined with strategy parameter_server: drop the strategy "
         "or give a number of workers. Received: --strategy parameter_server"),
        ({}, RunOptions(workers_auto=True, ps=1), None,
         "--workers auto cannot be combined with parameter-server tasks. Received: --ps 1"),
        ({"workers": "auto"}, RunOptions(min_workers=1), None,
         "config.workers=auto picks the number of workers; min_workers (elastic) needs a fixed "
         "one: give workers: N with it. Received: --min-workers 1"),
        ({"workers": "auto", "min_workers": 1}, RunOptions(), None,
         "config.workers=auto picks the number of workers; min_workers needs a fixed one. "
         "Received: min_workers=1"),
        ({"max_workers": 2}, RunOptions(), None,
         "config.max_workers=2 needs workers: auto (the stage's workers, the spec's "
         "cluster.workers or --workers auto). Received: workers=1"),
        ({"workers": 2, "max_workers": 2}, RunOptions(), None,
         "config.max_workers=2 needs workers: auto. Received: workers=2"),
        ({"workers": "auto"}, RunOptions(inject_failure="worker:1@step:3"), None,
         "--inject-failure rehearses a fixed topology; config.workers=auto picks one at run "
         "time: give --workers N. Received: --inject-failure worker:1@step:3"),
    ],
)
def test_contradictions_of_auto_name_the_field_and_value(config, options, cluster, message):
    assert message in _problems(config, options, cluster)


def test_consistent_auto_settings_pass() -> None:
    assert _problems({"workers": "auto", "max_workers": 2}) == []
    assert _problems({}, RunOptions(workers_auto=True)) == []
    # the spec's min_workers is a default: an auto from the stage leaves it out
    assert _problems({"workers": "auto"}, cluster={"strategy": "multi_worker_mirrored",
                                                   "workers": 2, "min_workers": 1}) == []
    assert _problems({"workers": "auto", "strategy": "multi_worker_mirrored"}) == []


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"workers": "auto", "max_workers": 0}, "max_workers must be >= 1. Received: max_workers=0"),
        ({"workers": "auto", "objective": "cost"}, "objective"),
        ({"workers": "many"}, "workers"),
        ({"workers": "auto", "probe_steps": 0}, "probe_steps must be >= 1"),
    ],
)
def test_bad_auto_config_names_the_field(config, message) -> None:
    with pytest.raises(ConfigError, match=message) as exc:
        build_config(train.Config, config)
    assert "Received" in str(exc.value) or "received" in str(exc.value).lower()


@pytest.mark.parametrize(
    ("cluster", "message"),
    [
        ({"workers": "auto", "strategy": "parameter_server", "ps": 1},
         "workers: auto probes one process and multi-worker mirrored clusters, not "
         "parameter_server"),
        ({"workers": "auto", "min_workers": 1}, "min_workers (elastic) needs a fixed one"),
        ({"workers": 2, "max_workers": 2}, "max_workers needs workers: auto. Received: "
         "max_workers=2, workers=2"),
        ({"workers": "auto", "max_workers": 0}, "Received: max_workers=0"),
        ({"workers": "auto", "objective": "cost"}, "objective"),
    ],
)
def test_bad_cluster_section_is_a_spec_error(cluster, message) -> None:
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _spec(cluster)


@pytest.mark.multi_worker
@pytest.mark.slow
def test_auto_probes_one_process_and_two_workers_and_trains_with_the_faster(tmp_path):
    from tests.pipeline.dataplane.helpers import penguins

    art = penguins(tmp_path / "data")
    inputs = {"transformed": art["transformed"], "transform_graph": art["transform_graph"]}
    # 3 epochs of 8 steps: under balance (multi-worker mirrored's default) the warm-up runs
    # in chunks of 1, 2, 4 and the 10 timed steps start at step 7, so the probe needs 17
    config = {"workers": "auto", "max_workers": 2, "epochs": 3, "probe_steps": 10,
              "steps_per_execution": 5}
    outputs, metrics = run_stage("train", config, inputs, tmp_path / "t")
    info = json.loads((outputs["model"] / "train_info.json").read_text())
    probe = info["topology_probe"]
    rows = {c["workers"]: c for c in probe["candidates"]}
    assert sorted(rows) == [1, 2] and all(c["steps"] == 10 for c in rows.values()), rows
    assert rows[2]["strategy"] == "multi_worker_mirrored" and rows[1]["strategy"] == "one_device"
    best = max(rows.values(), key=lambda c: c["examples_per_sec"])
    assert probe["chosen"] == {"strategy": best["strategy"], "workers": best["workers"]}
    assert probe["reason"].startswith(f"picked {best['workers']} worker")
    assert probe["energy_method"] in ("rapl", "green-algorithms")
    # the real run: the chosen topology, every planned step from 0, no probe left behind
    assert info["strategy"] == best["strategy"] and metrics["auto_workers"] == best["workers"]
    assert info["steps"] == 3 * (278 // 32) and info["resumed_from_step"] == 0
    assert len(json.loads((outputs["model"] / "history.json").read_text())) == 3
    backups = tmp_path / "t" / "runs" / "test" / ".backups"
    assert not backups.exists() or not any(backups.rglob("*"))
    assert not list((tmp_path / "t").rglob("probe-*"))
