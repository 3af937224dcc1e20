"""`baton run [SPEC]`: lint the spec, then run its DAG locally (exit 0 ok, 1 failed, 2 bad spec)."""

from __future__ import annotations

import argparse
import os
import sys

from pipeline.errors import UsageError

STRATEGIES = ("one_device", "mirrored", "multi_worker_mirrored", "parameter_server")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="baton run",
        description="Run a pipeline spec end to end. Stages whose code, config and input "
        "content are unchanged since an earlier success are reused from the cache.",
    )
    p.add_argument("spec", nargs="?", help="pipeline YAML (default: the embedded penguins pipeline)")
    p.add_argument("--workers", type=int, help="training workers (a local cluster when > 1)")
    p.add_argument("--ps", type=int, help="parameter-server tasks (with --strategy parameter_server)")
    p.add_argument("--strategy", choices=STRATEGIES, help="tf.distribute strategy for training")
    p.add_argument("--no-cache", action="store_true", help="run every stage even if cached")
    p.add_argument("--runs-dir", help="where runs are written (default: the spec's runs_dir, ./runs)")
    p.add_argument("--run-id", help="run id (default: a new time-sortable id); reuse one with --only")
    p.add_argument("--only", help="comma-separated stages to run; the others must already be in the run")
    p.add_argument("--inject-failure", metavar="TASK@step:N",
                   help="rehearse a failure, e.g. worker:1@step:40 (env BATON_INJECT_FAILURE)")
    p.add_argument("--check", action="store_true", help="validate the spec and print the plan only")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    for flag in ("workers", "ps"):
        value = getattr(args, flag)
        if value is not None and value < (1 if flag == "workers" else 0):
            raise UsageError(f"--{flag} must be >= {1 if flag == 'workers' else 0}. Received: {value}")
    from pipeline.context import RunOptions
    from pipeline.plan import plan
    from pipeline.runner import run_pipeline
    from pipeline.spec import load_spec

    the_plan = plan(load_spec(args.spec))
    if args.check:
        print(f"spec ok: pipeline {the_plan.spec.name!r}, stages: {' -> '.join(the_plan.order)}")
        return 0
    options = RunOptions(
        workers=args.workers, ps=args.ps, strategy=args.strategy, no_cache=args.no_cache,
        inject_failure=args.inject_failure or os.environ.get("BATON_INJECT_FAILURE") or None,
        quiet=args.quiet,
    )
    only = [s.strip() for s in args.only.split(",") if s.strip()] if args.only else None
    result = run_pipeline(the_plan, options, runs_dir=args.runs_dir, run_id=args.run_id, only=only)
    if not result.ok:
        sys.stderr.write(f"baton run: {result.error}\n")
        return 1
    print(result.run_dir)
    return 0
