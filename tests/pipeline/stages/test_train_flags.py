"""`baton run` refuses contradictory training flags with exit 2 before any stage runs.

Each case used to be silently dropped (`--ps` with multi-worker mirrored, `--workers` with a
one-process strategy), to crash the train stage after ingest and transform had run
(`parameter_server` without `--ps`, a bad fault spec), or to crash every worker (XLA on PS).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from baton.pipeline.context import RunOptions
from baton.pipeline.spec import spec_from_dict
from baton.pipeline.stages import train

ROOT = Path(__file__).resolve().parents[3]

SPEC = """\
pipeline: flags
stages:
  - name: ingest
    type: ingest
    config: {{source: penguins}}
  - name: transform
    type: transform
    inputs: {{examples: ingest.examples}}
  - name: fit
    type: train
    inputs: {{transformed: transform.transformed, transform_graph: transform.transform_graph}}
    config: {{epochs: 1{extra}}}
"""


def baton(tmp_path: Path, *args: str, env: dict[str, str] | None = None, extra: str = ""):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(extra=extra))
    # PYTHONPATH passes through: a checkout run with its folders first tests that checkout
    keep = {k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}
    full_env = {"PATH": "/usr/bin:/bin", **keep, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "baton.pipeline.cli", "run", str(spec), "--runs-dir",
         str(tmp_path / "runs"), *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, env=full_env,
    )


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--ps", "1", "--strategy", "multi_worker_mirrored", "--workers", "2"], {},
         "--ps 1 needs strategy parameter_server, but the strategy is multi_worker_mirrored "
         "(--strategy multi_worker_mirrored)"),
        (["--strategy", "parameter_server"], {},
         "strategy parameter_server (--strategy parameter_server) needs at least one ps task"),
        (["--strategy", "parameter_server", "--ps", "0"], {},
         "strategy parameter_server (--strategy parameter_server) needs at least one ps task: "
         "pass --ps M (M >= 1). Received: --ps 0"),
        (["--workers", "3", "--strategy", "mirrored"], {},
         "--workers 3 needs a multi-worker strategy (multi_worker_mirrored or parameter_server), "
         "but the strategy is mirrored (--strategy mirrored)"),
        (["--workers", "2", "--strategy", "one_device"], {},
         "--workers 2 needs a multi-worker strategy"),
        (["--inject-failure", "worker:1@epoch:3"], {},
         "--inject-failure must look like 'worker:1@step:40'"),
        ([], {"BATON_INJECT_FAILURE": "gpu:0@step:3"},
         "BATON_INJECT_FAILURE must look like 'worker:1@step:40'"),
        (["--workers", "2", "--min-workers", "3"], {},
         "min_workers must be between 1 and the number of workers (--workers 2). "
         "Received: --min-workers 3"),
        (["--workers", "auto", "--strategy", "parameter_server", "--ps", "1"], {},
         "--workers auto probes one process (one_device) and multi-worker mirrored clusters, "
         "so it cannot be combined with strategy parameter_server: drop the strategy or give a "
         "number of workers. Received: --strategy parameter_server"),
        # the flag named once, not `----inject-failure`; the environment named when it was so
        (["--workers", "auto", "--inject-failure", "worker:1@step:40"], {},
         "--inject-failure rehearses a fixed topology; --workers auto picks one at run time: "
         "give --workers N. Received: --inject-failure worker:1@step:40"),
        (["--workers", "auto"], {"BATON_INJECT_FAILURE": "worker:1@step:40"},
         "BATON_INJECT_FAILURE rehearses a fixed topology; --workers auto picks one at run "
         "time: give --workers N. Received: BATON_INJECT_FAILURE worker:1@step:40"),
        (["--workers", "2", "--inject-failure", "worker:2@step:3"], {},
         "--inject-failure names task worker:2, which the multi_worker_mirrored topology does "
         "not have (its tasks: worker:0, worker:1)"),
    ],
)
def test_contradictory_flags_exit_2_before_any_stage_runs(tmp_path, args, env, message) -> None:
    res = baton(tmp_path, *args, env=env)
    assert res.returncode == 2, res.stderr[-2000:]
    assert "stage 'fit': " + message in res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "runs").exists(), "a stage ran"
    assert "ingest" not in res.stderr


def test_check_refuses_xla_with_parameter_server_naming_field_and_strategy(tmp_path) -> None:
    res = baton(tmp_path, "--check", "--workers", "2", "--ps", "1", extra=", jit_compile: true")
    assert res.returncode == 2, res.stdout + res.stderr
    assert (
        "fit.config.jit_compile: true is not supported with strategy parameter_server "
        "(implied by --ps 1)" in res.stderr
    )
    assert not (tmp_path / "runs").exists()
    # In the stage config itself, every command refuses it (plan's check_spec hook).
    res = baton(tmp_path, "--check", extra=", jit_compile: true, strategy: parameter_server, ps: 1")
    assert res.returncode == 2
    assert "fit.config.jit_compile: true is not supported with strategy parameter_server" in (
        res.stderr
    )
    # XLA under multi-worker mirrored is supported (forward and backward compiled).
    res = baton(tmp_path, "--check", "--workers", "2", extra=", jit_compile: true")
    assert res.returncode == 0, res.stderr
    # The built-in cnn's max-pooling gradient has no deterministic XLA kernel.
    res = baton(tmp_path, "--check", extra=", jit_compile: true, model: cnn")
    assert res.returncode == 2, res.stdout + res.stderr
    assert ("fit.config.jit_compile: true with deterministic: true cannot train the built-in "
            "cnn" in res.stderr)
    assert "Traceback" not in res.stderr
    res = baton(tmp_path, "--check", extra=", jit_compile: true, model: cnn, deterministic: false")
    assert res.returncode == 0, res.stderr


def test_consistent_flags_pass_the_check(tmp_path) -> None:
    for args in (["--workers", "2"], ["--workers", "2", "--ps", "1"],
                 ["--strategy", "parameter_server", "--ps", "2"], ["--strategy", "mirrored"],
                 ["--inject-failure", "worker:0@step:3:term"]):
        res = baton(tmp_path, "--check", *args)
        assert res.returncode == 0, (args, res.stderr)


def test_check_options_hook_with_the_spec_cluster_section() -> None:
    spec = spec_from_dict({
        "pipeline": "p",
        "cluster": {"strategy": "parameter_server", "workers": 2, "ps": 1},
        "stages": [{"name": "train", "type": "train", "config": {"jit_compile": True}}],
    })
    cfg = train.Config(jit_compile=True)
    stage = spec.stage("train")
    problems = train.check_options(cfg, RunOptions(), stage, spec)
    assert problems and "cluster.strategy=parameter_server" in problems[0]
    # Flags beat the spec's cluster section: its ps count is a default, not a contradiction.
    opts = RunOptions(strategy="multi_worker_mirrored", workers=2)
    assert train.check_options(cfg, opts, stage, spec) == []


def test_balance_auto_with_a_strategy_that_cannot_use_it_exits_2(tmp_path) -> None:
    res = baton(tmp_path, "--check", "--workers", "2", "--ps", "1", extra=", balance: auto")
    assert res.returncode == 2, res.stdout + res.stderr
    assert ("fit.config.balance: auto is not supported with strategy parameter_server "
            "(implied by --ps 1)") in res.stderr
    assert "Received: balance='auto', strategy=parameter_server" in res.stderr
    assert not (tmp_path / "runs").exists()
    res = baton(tmp_path, "--check", extra=", balance: auto, strategy: one_device")
    assert res.returncode == 2 and "strategy one_device" in res.stderr, res.stderr
    res = baton(tmp_path, "--check", "--workers", "2", "--inject-slowdown", "worker:1@speed:2")
    assert res.returncode == 2 and "--inject-slowdown speed must be in (0, 1). Received: 2" in (
        res.stderr), res.stderr


def test_balance_is_auto_under_multi_worker_mirrored_and_checked_against_the_topology() -> None:
    spec = spec_from_dict({"pipeline": "p", "stages": [{"name": "train", "type": "train"}]})
    stage = spec.stage("train")
    two = train.topology(train.Config(), RunOptions(workers=2), spec.cluster)
    assert train.balance_mode(train.Config(), two) == "auto"  # issue 14's default
    assert train.balance_mode(train.Config(balance="off"), two) == "off"
    one = train.topology(train.Config(), RunOptions(), spec.cluster)
    ps = train.topology(train.Config(), RunOptions(workers=2, ps=1), spec.cluster)
    gpus = train.topology(train.Config(strategy="mirrored"), RunOptions(), spec.cluster)
    for other in (one, ps, gpus):  # nothing to balance, own pace, or asked for explicitly
        assert train.balance_mode(train.Config(), other) == "off", other
    assert train.check_options(train.Config(balance="auto"), RunOptions(strategy="mirrored"),
                               stage, spec) == []
    problems = train.check_options(train.Config(), RunOptions(
        workers=2, inject_slowdown="worker:2@speed:0.5"), stage, spec)
    assert problems == [
        "--inject-slowdown names task worker:2, which is not a process of this "
        "multi_worker_mirrored topology (a local cluster's tasks: worker:0, worker:1, "
        "workers=2). Received: 'worker:2@speed:0.5'"], problems
    problems = train.check_options(train.Config(), RunOptions(
        inject_slowdown="worker:0@speed:0.5"), stage, spec)
    assert problems and "a local cluster's tasks: none" in problems[0], problems


def test_min_workers_is_checked_against_the_resolved_topology() -> None:
    """Flag, then stage config, then the spec's cluster section; each problem names its source
    and the value received (baton run reports them with exit 2 before any stage runs)."""
    def spec(cluster: dict):
        return spec_from_dict({"pipeline": "p", "cluster": cluster,
                               "stages": [{"name": "train", "type": "train"}]})

    s = spec({"workers": 2, "min_workers": 1})
    stage, cfg = s.stage("train"), train.Config()
    assert train.check_options(cfg, RunOptions(), stage, s) == []
    topo = train.topology(cfg, RunOptions(), s.cluster)
    assert (topo.strategy, topo.workers, topo.min_workers, topo.elastic) == (
        "multi_worker_mirrored", 2, 1, True)
    # the spec's section is a default: flags for another topology leave it out
    assert train.check_options(cfg, RunOptions(workers=1), stage, s) == []
    assert train.topology(cfg, RunOptions(workers=1), s.cluster).min_workers is None
    assert train.topology(cfg, RunOptions(workers=4), s.cluster).min_workers == 1
    (problem,) = train.check_options(cfg, RunOptions(workers=2, min_workers=3), stage, s)
    assert problem == ("min_workers must be between 1 and the number of workers (--workers 2). "
                       "Received: --min-workers 3")
    (problem,) = train.check_options(train.Config(min_workers=3), RunOptions(), stage, s)
    assert problem.endswith("Received: config.min_workers=3")
    (problem,) = train.check_options(
        cfg, RunOptions(strategy="parameter_server", ps=1, min_workers=1), stage, s)
    assert problem.startswith("--min-workers 1 needs strategy multi_worker_mirrored")
    assert "but the strategy is parameter_server (--strategy parameter_server)" in problem
    (problem,) = train.check_options(
        cfg, RunOptions(workers=2, ps=1, inject_failure="worker:1@step:4:lost"), stage,
        spec({"workers": 2}))
    assert problem.startswith("inject-failure ':lost' needs strategy multi_worker_mirrored")


def test_min_workers_in_the_spec_and_stage_config_is_refused_when_out_of_range() -> None:
    from baton.errors import SpecError

    with pytest.raises(SpecError, match=r"min_workers must be between 1 and workers=2. "
                       r"Received: min_workers=3"):
        spec_from_dict({"pipeline": "p", "cluster": {"workers": 2, "min_workers": 3},
                        "stages": [{"name": "train", "type": "train"}]})
    stage = spec_from_dict({"pipeline": "p", "stages": [{"name": "train", "type": "train"}]})
    problems = train.check_spec(train.Config(workers=2, min_workers=3), stage.stage("train"), stage)
    assert "config.min_workers must not exceed config.workers=2. Received: min_workers=3" in problems
    with pytest.raises(ValueError, match="Received: min_workers=0"):
        train.Config(min_workers=0)


def test_baton_k8s_says_min_workers_is_not_in_the_manifests(capsys) -> None:
    """TFJob, JobSet and TrainJob have fixed replica counts: the note names the value instead of
    dropping it."""
    from baton.pipeline.commands.k8s.generate import _note_min_workers

    _note_min_workers(spec_from_dict({"pipeline": "p", "cluster": {"workers": 2, "min_workers": 1},
                                      "stages": [{"name": "train", "type": "train"}]}))
    err = capsys.readouterr().err
    assert err.startswith("note: min_workers=1 is not in the manifests") and "PyTorchJob only" in err
    _note_min_workers(spec_from_dict({"pipeline": "p", "stages": [{"name": "t", "type": "train"}]}))
    assert capsys.readouterr().err == ""


def test_the_resolved_topology_and_a_rehearsal_join_the_train_cache_key() -> None:
    """`run_settings`: a `--workers 2` run after a one-process run is not the cached model
    (issue 11 audit: every stage was a cache hit and the summary said one_device)."""
    spec = spec_from_dict({"pipeline": "p", "stages": [{"name": "train", "type": "train"}]})
    cfg = train.Config()
    one = train.run_settings(cfg, RunOptions(), spec)
    assert one == {"strategy": "one_device", "workers": 1, "ps": 0, "min_workers": None,
                   "balance": "off"}
    two = train.run_settings(cfg, RunOptions(workers=2), spec)
    assert two["strategy"] == "multi_worker_mirrored" and two["workers"] == 2
    assert two["balance"] == "auto"
    fault = train.run_settings(cfg, RunOptions(workers=2, inject_failure="worker:1@step:3"), spec)
    assert fault == {**two, "inject_failure": "worker:1@step:3"}
    clustered = spec_from_dict({"pipeline": "p", "cluster": {"workers": 2},
                                "stages": [{"name": "train", "type": "train"}]})
    assert train.run_settings(cfg, RunOptions(), clustered) == two  # the spec's section counts
