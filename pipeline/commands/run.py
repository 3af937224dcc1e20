"""`baton run [SPEC]`: lint the spec, then run its DAG locally.

Exit codes: 0 ok, 1 a stage failed, 2 a bad spec or bad flags (checked against every stage that
would run, before any runs: `check_options` hooks), 143 stopped by SIGTERM (training saved a
backup first; a rerun of the same spec resumes it), 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import threading
from typing import Any

from baton import logs
from baton.errors import EXIT_FAILED, EXIT_OK, Preempted, UsageError
from baton.strategies.factory import STRATEGIES

_LOG = logs.get("cli.run")  # the CLI's own error lines are under baton.cli.<command>


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="baton run",
        description="Run a pipeline spec end to end. Stages whose code, config and input "
        "content are unchanged since an earlier success are reused from the cache.",
    )
    p.add_argument("spec", nargs="?", help="pipeline YAML (default: the embedded penguins pipeline)")
    p.add_argument("--workers", type=_workers, metavar="N|auto",
                   help="training workers (a local cluster when > 1); auto: probe one process "
                   "and 2..max_workers workers for a few steps and train with the best")
    p.add_argument("--ps", type=int, help="parameter-server tasks (with --strategy parameter_server)")
    p.add_argument("--min-workers", type=int, metavar="M",
                   help="elastic multi-worker mirrored: go on with the workers left while at "
                   "least M remain (default: all --workers are needed)")
    p.add_argument("--strategy", choices=STRATEGIES, help="tf.distribute strategy for training")
    p.add_argument("--no-cache", action="store_true", help="run every stage even if cached")
    p.add_argument("--runs-dir", help="where runs are written (default: the spec's runs_dir, ./runs)")
    p.add_argument("--run-id", help="run id (default: a new time-sortable id); reuse one with --only")
    p.add_argument("--only", help="comma-separated stages to run; the others must already be in the run")
    p.add_argument("--inject-failure", metavar="TASK@step:N",
                   help="rehearse a failure, e.g. worker:1@step:40 (env BATON_INJECT_FAILURE); "
                   "federated: client:1@round:2 (killed), client:1@round:2:slow (answers after "
                   "round_timeout_s), server@round:2")
    p.add_argument("--inject-slowdown", metavar="TASK@speed:F",
                   help="rehearse a straggler: run a local cluster's task at fraction F of its "
                   "cores (a CPU quota where the machine allows, else a SIGSTOP/SIGCONT duty "
                   "cycle), e.g. worker:1@speed:0.5, worker:1@speed:0.5:10ms:signals")
    p.add_argument("--superlink", metavar="HOST:PORT",
                   help="federated stage: submit to this running Flower SuperLink and start no "
                   "SuperLink or SuperNodes here (the SuperNodes read <run dir>/<stage>.federation/"
                   "clients/<client> in a rehearsal; see docs/kubernetes.md)")
    p.add_argument("--check", action="store_true", help="validate the spec and print the plan only")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    return p


def _workers(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a number or auto. Received: {text!r}") from None


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    auto = args.workers == "auto"
    if auto:
        args.workers = None
    for flag in ("workers", "ps", "min_workers"):
        value = getattr(args, flag)
        if value is not None and value < (0 if flag == "ps" else 1):
            name = flag.replace("_", "-")
            raise UsageError(f"--{name} must be >= {0 if flag == 'ps' else 1}. Received: {value}")
    if args.superlink is not None:
        _check_address(args.superlink)
    from baton.pipeline.context import RunOptions
    from baton.pipeline.plan import plan
    from baton.pipeline.runner import open_rapl, run_pipeline
    from baton.pipeline.spec import load_spec

    the_plan = plan(load_spec(args.spec))
    inject = args.inject_failure or os.environ.get("BATON_INJECT_FAILURE") or None
    options = RunOptions(
        workers=args.workers, workers_auto=auto, ps=args.ps, strategy=args.strategy, min_workers=args.min_workers,
        no_cache=args.no_cache, inject_failure=inject, inject_slowdown=args.inject_slowdown,
        quiet=args.quiet, superlink=args.superlink,
    )
    only = [s.strip() for s in args.only.split(",") if s.strip()] if args.only else None
    _check_options(the_plan, options, only, "--inject-failure" if args.inject_failure
                   else "BATON_INJECT_FAILURE")
    if args.superlink is not None and not any(
            the_plan.spec.stage(n).type == "federated" for n in the_plan.order
            if not only or n in only):
        raise UsageError("--superlink is for a federated stage, and none of the stages that "
                         f"would run is one. Received: --superlink {args.superlink}"
                         + (f" with --only {args.only}" if only else ""))
    open_rapl(the_plan.spec)  # `energy.method: rapl` on a node without readable counters
    if args.check:
        print(f"spec ok: pipeline {the_plan.spec.name!r}, stages: {' -> '.join(the_plan.order)}")
        return EXIT_OK
    previous = _terminate_on_sigterm()
    try:
        result = run_pipeline(the_plan, options, runs_dir=args.runs_dir, run_id=args.run_id,
                              only=only)
    except Preempted as exc:  # Ctrl-C goes on to the CLI's 130
        _LOG.error("baton run: stopped by SIGTERM: %s", exc)
        return exc.exit_code
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    if not result.ok:
        _LOG.error("baton run: %s", result.error)
        return EXIT_FAILED
    # stdout: the result, which scripts read (plain in JSON mode too): the run directory, or
    # its URL on an object store
    print(result.url or result.run_dir)
    return EXIT_OK


def _check_address(address: str) -> None:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--superlink must be HOST:PORT of a Flower SuperLink (e.g. "
                         f"fed-superlink.ml.svc:9091). Received: {address!r}")


def _check_options(the_plan: Any, options: Any, only: list[str] | None, inject_src: str) -> None:
    """Each stage that would run checks the run's flags (exit 2 before anything runs)."""
    problems = []
    for name in the_plan.order:
        if only and name not in only:
            continue
        hook = the_plan.types[name].hook("check_options")
        if hook is not None:
            stage = the_plan.spec.stage(name)
            problems += [f"stage {name!r}: {msg}" for msg in
                         hook(the_plan.configs[name], options, stage, the_plan.spec) or ()]
    if options.inject_failure and not any(the_plan.types[n].hook("check_options")
                                          for n in the_plan.order):
        from baton.strategies.faults import FaultSpecError, parse_fault

        try:
            parse_fault(options.inject_failure)
        except FaultSpecError as exc:
            problems.append(str(exc))
    if problems:
        # The fault spec may come from the environment: say so rather than blame a flag.
        # (a message may name it as `inject-failure` or as the flag, `--inject-failure`)
        problems = [re.sub(r"(?<![\w-])(--)?inject-failure", inject_src, p)
                    for p in problems]
        if len(problems) == 1:
            raise UsageError(problems[0])
        raise UsageError("\n  - ".join([f"{len(problems)} problems:", *problems]))


def _terminate_on_sigterm() -> Any:
    """SIGTERM unwinds the run like Ctrl-C, with exit code 143 (training overrides this with a
    graceful stop at the next step boundary, see pipeline.stages.train); returns the previous
    handler, or None off the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum: int, frame: Any) -> None:
        raise Preempted(f"signal {signum} before training")

    return signal.signal(signal.SIGTERM, handler)
