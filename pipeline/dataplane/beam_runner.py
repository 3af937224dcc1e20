"""Beam runner and options from a stage's `beam_pipeline_args`, and clean failures.

FnApiRunner (in-process) is the default because Beam's own default (Prism) downloads a binary
and fails offline. `--direct_num_workers=N --direct_running_mode=multi_processing` gives local
parallelism through the same FnApiRunner; `--runner=FlinkRunner|SparkRunner|PortableRunner|
DataflowRunner` (with their usual flags) is passed through for clusters.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from baton.errors import StageError

LOCAL = ("FnApiRunner", "BundleBasedDirectRunner")
_STAGE_ERROR = re.compile(r"StageError: (.+)")


def make_runner(args: Sequence[str]) -> tuple[Any, Any]:
    """(runner, PipelineOptions) for `args`; FnApiRunner unless `--runner` names another."""
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    options = PipelineOptions(list(args))
    name = options.view_as(StandardOptions).runner
    if name in (None, "FnApiRunner"):
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner

        options.view_as(StandardOptions).runner = None
        return FnApiRunner(), options
    return name, options


def runner_name(args: Sequence[str]) -> str:
    for i, a in enumerate(args):
        if a.startswith("--runner="):
            return a.split("=", 1)[1]
        if a == "--runner" and i + 1 < len(args):
            return args[i + 1]
    return "FnApiRunner"


def run(build: Callable[[Any], None], args: Sequence[str]) -> None:
    """Build a pipeline with `build(pipeline)` and run it to completion.

    A `StageError` raised inside a DoFn arrives wrapped in the runner's exception (with a
    worker traceback); it is re-raised here as a plain StageError so the user sees the message.
    """
    import logging

    import apache_beam as beam

    runner, options = make_runner(args)
    # Beam logs a DoFn's exception with its traceback before re-raising it; the exception
    # itself still carries everything, so keep the log quiet and decide below what to show.
    beam_log = logging.getLogger("apache_beam")
    level = beam_log.level
    beam_log.setLevel(logging.CRITICAL)
    try:
        with beam.Pipeline(runner=runner, options=options) as p:
            build(p)
    except StageError:
        raise
    except Exception as exc:
        found = _STAGE_ERROR.findall(str(exc))
        if found:
            raise StageError(found[-1].strip()) from None
        raise
    finally:
        beam_log.setLevel(level)
