"""`baton task`: run stage `train` as ONE task of a cluster (what each TFJob replica runs).

    baton task SPEC --stage train --run-dir DIR [--out DIR]     inputs from DIR/<upstream>/<output>
    baton task SPEC --stage train --run-dir s3://.../<run id>   a bucket run: inputs staged from
                                                                its commits, the stage committed
                                                                (SPEC too may be on the bucket)
    baton task --job JOB.json --out DIR [--backup-dir DIR]      explicit form (the local launcher)

This is the edge: TF_CONFIG (which task am I), BATON_INJECT_FAILURE / BATON_ATTEMPT (fault
rehearsal), BATON_STATUS_FILE, BATON_INVENTORY_DIR and BATON_ERROR_FILE (local launcher plumbing)
are read here once and passed down as values. The chief alone writes outputs, atomically
(temporary directory, then rename into `<out>/model`), plus backups and summaries.

Exit codes follow the TFJob `restartPolicy: ExitCode` contract: 0 success; 1 permanent failure
(bad config: not retried); 143 preempted by SIGTERM after saving a backup (retried); 129 a
transient failure such as a dead peer or a lost connection (retried).

A permanent failure Baton understands (a BatonError: a StageError naming the user's model
function, a RefError, a ConfigError...) is one line, its message, as in a one-process run; a
bug (any other exception) keeps its traceback. Either way the line is also written, atomically,
to BATON_ERROR_FILE when it is set, so the launcher reports the task's own words rather than
"exited with 1" (pipeline.training.task_exit).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

from baton import logs
from baton.errors import EXIT_FAILED, EXIT_OK, EXIT_PREEMPTED, EXIT_TRANSIENT
from baton.pipeline.training import bucket_task
from baton.pipeline.training.task_exit import failed, permanent, read_error, say
from baton.strategies.factory import MULTI_WORKER_MIRRORED, ONE_DEVICE, PARAMETER_SERVER

OK, PERMANENT, TRANSIENT, PREEMPTED = EXIT_OK, EXIT_FAILED, EXIT_TRANSIENT, EXIT_PREEMPTED
PROGRESS_EVERY = 2.0  # seconds between progress lines of the chief


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="baton task", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "spec", nargs="?", help="pipeline YAML (default: the embedded penguins pipeline)"
    )
    p.add_argument("--stage", default="train", help="stage to run as a task (default: train)")
    p.add_argument("--run-dir", help="run directory holding the upstream stages' outputs")
    p.add_argument("--job", help="explicit job description (JSON written by the launcher)")
    p.add_argument(
        "--out", help="output directory (default: RUN_DIR/<stage>); the chief writes OUT/model"
    )
    p.add_argument(
        "--backup-dir", help="backup directory shared by all tasks (default: OUT/backup)"
    )
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    from baton.errors import BatonError
    from baton.pipeline.training.task_record import SpecRecords
    from baton.strategies import jobset_cluster
    from baton.strategies.cluster import ClusterSpecError
    from baton.strategies.faults import FaultSpecError, parse_fault

    error_file = _env_path("BATON_ERROR_FILE")
    started, t0 = _now(), time.monotonic()
    spec_form = SpecRecords(args.stage, args.run_dir if not args.job and not args.out else None)
    bucket = None
    try:
        if args.spec and args.spec.startswith(("s3://", "gs://")):  # on a bucket: Vertex AI
            args.spec = str(bucket_task.fetch_spec(args.spec))
        tf_config = jobset_cluster.tf_config_from_env(os.environ, say=say)
        attempt = int(os.environ.get("BATON_ATTEMPT", "0") or 0)
        fault = parse_fault(os.environ.get("BATON_INJECT_FAILURE")) if attempt == 0 else None
        bucket = None if args.job else bucket_task.open_run(args.run_dir)
        if bucket is not None:  # inputs staged from the bucket into this node's mirror
            from baton.pipeline.spec import load_spec

            spec_form.spec = load_spec(args.spec)
            inputs = bucket_task.stage_inputs(bucket, spec_form.spec.stage(args.stage))
            args.run_dir = str(bucket.run_dir)
            spec_form.run_dir = bucket.run_dir  # records in the mirror, then on the bucket
        job, out = _job(args, tf_config, spec_form)
    except (BatonError, ClusterSpecError, FaultSpecError, ValueError, KeyError, OSError) as exc:
        rc = permanent("", str(exc), error_file)
        _record_failure(spec_form, bucket, started, "", str(exc))
        return rc
    rc = run(
        job,
        tf_config,
        out,
        bucket_task.backup_dir(args.backup_dir, out),
        fault,
        _env_path("BATON_STATUS_FILE"),
        _env_path("BATON_INVENTORY_DIR"),
        error_file,
    )
    task_name = tf_config.task.name if tf_config else "worker:0"
    if rc == OK and (tf_config is None or tf_config.is_chief) and not job.probe_steps:
        if bucket is not None:
            from baton.pipeline.stages import train as train_stage

            try:  # the chief commits the stage to the bucket: the release step reads it there
                record = spec_form.record(started, time.monotonic() - t0, out)
                bucket_task.commit(bucket, args.stage, out, tuple(train_stage.OUTPUTS),
                                   inputs, record)
            except BatonError as exc:
                return permanent(task_name, str(exc), error_file)
            say(f"committed stage {args.stage!r} to {bucket.url}")
        else:
            recorded = spec_form.succeeded(started, time.monotonic() - t0)
            if recorded is not None:
                say(f"recorded {recorded} (the release step reads it)")
    elif rc == PERMANENT:
        _record_failure(spec_form, bucket, started, task_name, read_error(error_file))
    return rc


def _record_failure(form: Any, bucket: Any, started: str, task_name: str, error: str) -> None:
    """`<stage>.failed.json` beside the run (on the bucket too): a step waiting for this
    stage's outputs ends at once, naming the failure."""
    form.failed(started, task_name, error)
    if bucket is not None:
        bucket.save_failure(form.stage)


def _now() -> str:
    import datetime as dt

    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None


def run(
    job: Any,
    tf_config: Any,
    out: Path,
    backup_dir: Path,
    fault: Any = None,
    status_file: Path | None = None,
    inventory_dir: Path | None = None,
    error_file: Path | None = None,
) -> int:
    """Run one task of `job` and map the outcome to an exit code (a permanent failure's line
    also into `error_file`, for the launcher)."""
    import threading

    from baton.errors import BatonError, Preempted
    from baton.strategies import inventory
    from baton.strategies.loop import TaskRole
    from baton.strategies.task import run_task, write_model_artifact

    task_name = tf_config.task.name if tf_config else "worker:0"
    is_chief = tf_config.is_chief if tf_config else True
    serving_only = (
        job.strategy == PARAMETER_SERVER and tf_config and tf_config.task.type != "chief"
    )
    stop = threading.Event()
    _install_sigterm(stop, exit_now=bool(serving_only))
    node = inventory.node_inventory()
    # before TensorFlow starts: this task's share of the node's cores (co-located tasks and
    # CPU quotas otherwise oversubscribe them)
    node["threads"] = inventory.apply_threads(inventory.thread_plan(node))
    if inventory_dir is not None:
        inventory.write_report(inventory_dir, task_name, node)
    if not serving_only:  # the global batch must split over this task's replicas
        tasks = tf_config.cluster.as_dict() if tf_config else {}
        workers = len(tasks.get("worker", [])) + len(tasks.get("chief", []))
        try:
            inventory.derive_defaults([node] * max(workers, 1), job.settings.batch_size, job.strategy)
        except BatonError as exc:  # strategies.inventory: the field and the replicas named
            return permanent(task_name, str(exc), error_file)
    say(f"{task_name} starting ({job.strategy}); {inventory.describe(node)}")

    last = [0.0]

    def on_progress(step: int, total_steps: int, metrics: dict[str, float]) -> None:
        now = time.monotonic()
        if now - last[0] < PROGRESS_EVERY and step < total_steps:
            return
        last[0] = now
        text = " ".join(f"{k} {v:.4f}" for k, v in metrics.items())
        say(f"step {step}/{total_steps} {text}")

    role = TaskRole(
        is_chief=is_chief,
        task_name=task_name,
        backup_dir=backup_dir,
        logs_dir=out / ".logs" if is_chief else None,
        fault=fault,
        stop=stop,
        on_progress=on_progress,
        status_file=status_file,
        after_strategy=lambda: _install_sigterm(stop, exit_now=bool(serving_only)),
    )
    try:
        result = run_task(job, tf_config, role)
    except Preempted as exc:
        say(f"{task_name}: {exc}; exiting with {PREEMPTED}")
        return PREEMPTED
    except Exception as exc:  # noqa: BLE001 - classify, log, and turn into an exit code
        return failed(exc, task_name, error_file)
    if result is not None and job.probe_steps:  # a topology probe: its window, no model
        import json

        (out / "probe").mkdir(parents=True, exist_ok=True)
        report = {"task": task_name, "steps": result.steps, **result.info.get("window", {})}
        (out / "probe" / f"{task_name.replace(':', '-')}.json").write_text(json.dumps(report))
        say(f"{task_name} probed {report.get('steps')} steps")
        return OK
    if result is None or not is_chief:
        say(f"{task_name} done" + (f" at step {result.steps}" if result is not None else ""))
        return OK
    nodes = inventory.gather(inventory_dir) if inventory_dir else [node]
    cluster = tf_config.cluster.as_dict() if tf_config else {}
    defaults = inventory.derive_defaults(
        training_nodes(nodes, cluster, job.strategy, gathered=bool(inventory_dir)),
        job.settings.batch_size,
        job.strategy,
    )
    tmp = out / f".tmp-model-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    if (out / ".logs").is_dir():
        shutil.copytree(out / ".logs", tmp / "logs")
    write_model_artifact(
        tmp,
        job,
        result,
        {"cluster": cluster, "inventory": nodes, "defaults": defaults},
    )
    final = out / "model"
    shutil.rmtree(final, ignore_errors=True)
    tmp.replace(final)
    shutil.rmtree(out / ".logs", ignore_errors=True)
    say(f"{task_name} wrote {final} (steps {result.steps}, resumed from {result.resumed_from})")
    return OK


def training_nodes(nodes: list[dict[str, Any]], cluster: dict[str, list[str]], strategy: str,
                   gathered: bool) -> list[dict[str, Any]]:
    """The inventories the derived defaults (replicas, per-replica batch) are counted over:
    the tasks that compute (workers, and the chief unless under parameter servers).

    `gathered`: every task's inventory is at hand (the local launcher's shared directory).
    Otherwise, on a TFJob pod, only this one is: the replicas of a type run one pod template,
    so each compute task of TF_CONFIG is counted as a node like this one (counted from this
    pod alone, a 2-replica job recorded 1 replica beside num_replicas 2).
    """
    compute = ("worker",) if strategy == PARAMETER_SERVER else ("worker", "chief")
    if not gathered and cluster:
        return nodes[:1] * max(1, sum(len(cluster.get(kind, [])) for kind in compute))
    return [n for n in nodes if str(n.get("task", "worker")).split(":")[0] in compute] or nodes


def _job(args: argparse.Namespace, tf_config: Any, form: Any = None) -> tuple[Any, Path]:
    from baton.strategies.job import TrainJob

    if args.job:
        if not args.out:
            raise ValueError("--job needs --out. Received: out=None")
        return TrainJob.from_json(Path(args.job).read_text()), Path(args.out)
    if not args.run_dir:
        raise ValueError("give SPEC --run-dir DIR, or --job FILE --out DIR. Received: run_dir=None")
    from baton.configs import build_config
    from baton.pipeline import registry
    from baton.pipeline.context import RunOptions
    from baton.pipeline.spec import load_spec
    from baton.pipeline.stages import train as train_stage

    spec = load_spec(args.spec)
    if form is not None:
        form.spec = spec
    stage = spec.stage(args.stage)
    if registry.resolve(stage.type).module is not train_stage:
        raise ValueError(
            f"baton task runs train stages only. Received: stage={args.stage!r} "
            f"of type {stage.type!r}"
        )
    config = build_config(train_stage.Config, stage.config)
    run_dir = Path(args.run_dir)
    inputs = {}
    for name, ref in stage.inputs.items():
        up_stage, _, output = ref.partition(".")
        inputs[name] = run_dir / up_stage / output
        if not inputs[name].exists():
            raise ValueError(f"input {name!r} ({ref}) is missing. Received: {inputs[name]}")
    options = RunOptions()
    if tf_config is not None:  # the topology is whatever the operator put in TF_CONFIG
        cluster = tf_config.cluster
        ps = len(cluster.ps)
        strategy = (
            PARAMETER_SERVER
            if ps
            else (MULTI_WORKER_MIRRORED if cluster.num_workers() > 1 else ONE_DEVICE)
        )
        # ps and workers too: the spec's `cluster:` section (ps: 0 by default) must not veto
        # the PS tasks the operator actually started. config.strategy beats TF_CONFIG's (as it
        # beats a flag): left to the config, the problems name it as their source.
        options = RunOptions(
            strategy=None if config.strategy else strategy,
            workers=len(cluster.worker) if ps else cluster.num_workers(),
            ps=ps,
        )
    config = config.for_replica()  # the local launcher's settings go
    cluster = spec.cluster
    spec = dataclasses.replace(spec, cluster=dataclasses.replace(
        cluster, min_workers=None, max_workers=None,
        workers=1 if cluster.workers == "auto" else cluster.workers))
    problems = train_stage.check_options(config, options, stage, spec)  # e.g. XLA on PS
    if problems:
        raise ValueError("; ".join(_from_tf_config(p, options, tf_config) for p in problems))
    topo = train_stage.topology(config, options, spec.cluster)
    # No row count here: that would run TF ops before the strategy exists (see make_job).
    # The user's modules (model, loss, ...) are imported from the spec's directory on this
    # replica too: on a TFJob pod, the ConfigMap mounted beside the spec (docs/kubernetes.md).
    job = train_stage.make_job(config, inputs, topo.strategy, count=False, code_dir=spec.spec_dir,
                               balance=train_stage.balance_mode(config, topo))
    return job, Path(args.out) if args.out else run_dir / args.stage


def _from_tf_config(problem: str, options: Any, tf_config: Any) -> str:
    """`problem` with the topology's sources named as this replica received them.

    check_options names a value that came in RunOptions as the `baton run` flag that passes it
    (`--strategy parameter_server`); a replica received no flag: its strategy, workers and ps
    are TF_CONFIG's, the TFJob's replicas, so a flag there would send the reader looking for one
    in the manifest.
    """
    import re

    if tf_config is None:
        return problem  # no TF_CONFIG: the options are RunOptions() and name no flag
    tasks = ", ".join(f"{kind} x{len(addrs)}" for kind, addrs in
                      tf_config.cluster.as_dict().items() if addrs)
    sources = {f"--strategy {options.strategy}": f"implied by TF_CONFIG's {tasks}",
               f"--workers {options.workers}": f"TF_CONFIG workers={options.workers}",
               f"--ps {options.ps}": f"TF_CONFIG ps={options.ps}"}
    for flag, source in sources.items():
        problem = re.sub(re.escape(flag) + r"\b", source, problem)
    return problem


def _install_sigterm(stop: Any, exit_now: bool) -> None:
    """SIGTERM: ask the training loop to save and stop at the next chunk (servers just exit).

    Servers (PS-strategy workers and PS tasks) get the default action, death by SIGTERM, which
    the kubelet reports as 143 like `os._exit(143)` would: their main thread sits in the C++
    `Server.join()`, where a Python-level handler never runs, so every cleanup used to wait out
    the whole grace period before the SIGKILL.
    """
    if exit_now:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        return

    def handler(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handler)


if __name__ == "__main__":  # the local launcher's form; `baton task` configures in baton.pipeline.cli
    logs.configure(*logs.settings_from_env(os.environ))
    sys.exit(main(sys.argv[1:]))
