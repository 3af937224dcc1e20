"""`baton`: the command line. Subcommands are modules imported only when used.

Keeping this module free of TensorFlow, Beam and even YAML is what makes `baton --help` answer
instantly; each subcommand module parses its own flags.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from baton.errors import EXIT_INTERRUPTED, EXIT_USAGE, BatonError

COMMANDS: list[tuple[str, str, str]] = [
    ("run", "baton.pipeline.commands.run", "run a pipeline (no SPEC: the embedded penguins pipeline)"),
    ("inspect", "baton.pipeline.commands.inspect", "show a run: stages, metrics, lineage, statistics"),
    ("transform", "baton.pipeline.commands.transform", "dry-run a preprocessing_fn on a sample (--dry-run)"),
    ("serve", "baton.pipeline.commands.serve", "TensorFlow Serving-compatible model server (REST+gRPC)"),
    ("rollback", "baton.pipeline.commands.rollback", "point serving back at an earlier model version"),
    ("gc", "baton.pipeline.commands.gc", "delete a bucket runs directory's stored objects no run names"),
    ("k8s", "baton.pipeline.commands.k8s", "TFJob/serving manifests: generate, validate, emulate, submit"),
    ("task", "baton.pipeline.commands.task", "run one task of a distributed stage (TF_CONFIG from env)"),
    ("kfp", "baton.pipeline.kfp.command", "compile for Kubeflow/Vertex AI Pipelines; run locally, submit"),
]

USAGE = """usage: baton <command> [options]

Baton: a TensorFlow production pipeline framework. One declarative spec runs the path from raw
data to a served model, on a laptop or on Kubernetes.

commands:
{commands}

Run `baton <command> --help` for a command's options.
exit codes: 0 success, 1 a stage or job failed, 2 bad usage or a bad spec.
"""


def _usage() -> str:
    width = max(len(name) for name, _, _ in COMMANDS)
    lines = "\n".join(f"  {name.ljust(width)}  {doc}" for name, _, doc in COMMANDS)
    return USAGE.format(commands=lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or args[0] in ("-h", "--help", "help"):
        sys.stdout.write(_usage())
        return 0 if args else EXIT_USAGE
    if args[0] == "--version":
        from importlib.metadata import version

        print(f"baton {version('baton')}")
        return 0
    by_name = {name: module for name, module, _ in COMMANDS}
    if args[0] not in by_name:
        from baton.configs import did_you_mean

        hint = did_you_mean(args[0], by_name)
        sys.stderr.write(f"baton: unknown command {args[0]!r}{hint}\n\n{_usage()}")
        return EXIT_USAGE
    # TensorFlow's C++ INFO/WARNING lines drown the progress output; users can still opt in.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    log = _configure_logging(args[0])
    if log is None:
        return EXIT_USAGE
    module = importlib.import_module(by_name[args[0]])

    try:
        return int(module.main(args[1:]) or 0)
    except BatonError as exc:
        log.error("baton %s: error: %s", args[0], exc)
        return exc.exit_code
    except KeyboardInterrupt:
        log.error("baton %s: interrupted", args[0])
        return EXIT_INTERRUPTED


def _configure_logging(command: str) -> Any:
    """The one log handler, from BATON_LOG_FORMAT (text|json) and BATON_LOG_LEVEL (INFO):
    read here, at the edge. None (after saying why) when either is not valid."""
    from baton import logs

    try:
        fmt, level = logs.settings_from_env(os.environ)
    except ValueError as exc:
        sys.stderr.write(f"baton {command}: {exc}\n")
        return None
    logs.configure(fmt, level)
    return logs.get(f"cli.{command}")


if __name__ == "__main__":
    sys.exit(main())
