"""Beam runner and options from a stage's `beam_pipeline_args`, and clean failures.

FnApiRunner (in-process) is the default because Beam's own default (Prism) downloads a binary
and fails offline. `--direct_num_workers=N --direct_running_mode=multi_processing` gives local
parallelism through the same FnApiRunner; `--runner=FlinkRunner|SparkRunner|PortableRunner|
DataflowRunner` (with their usual flags) is passed through for clusters.

Runners whose workers are other processes (tested: PortableRunner against Beam's Python job
service, `local_job_service_main`, with an external worker pool, `worker_pool_main`, the
portability protocol Flink, Spark and Dataflow use; tests/pipeline/dataplane/
test_portable_runner.py). What Baton does, and needs, for them:

- nothing from `__main__` is pickled: the DoFns are classes of importable Baton modules and the
  user's preprocessing_fn travels inside them (`fn_source.UserFn.staged`), so Baton passes
  `--no_save_main_session` unless the args say otherwise (Dataflow would otherwise pickle the
  `baton` command's main module, by default with cloudpickle). Beam's default pickler
  (cloudpickle) is what is tested.
- no artifact staging is needed (`--sdk_location`, `--extra_package`, `--setup_file` stay the
  user's): the workers must have Baton, TensorFlow and Beam installed (the Baton image as
  `--sdk_container_image`, or the worker pool's environment), as they must have Beam itself.
- `--job_endpoint=HOST:PORT` is checked before submitting (a TCP connect, at most 10 s): with
  no job service there Beam would wait `--job_server_timeout` (300 s) for the channel.
- a job that fails on the job service is a StageError with its last error line (the whole
  remote traceback is chained).
- `--wait_until_finish_duration=MS` (Beam's own option, used by its test pipelines) bounds the
  wait for the job: past it the job is cancelled and a StageError says so. Without it Baton
  waits as Beam does, forever: a worker that dies or never connects leaves a portable job
  RUNNING on the job service (Beam's job service does not notice a lost worker).
- Beam's Python worker pool starts each worker as `python -c ...`: the `python` first on the
  pool's PATH must be the environment with Baton (otherwise the worker exits on
  `No module named 'apache_beam'` and the job waits forever: a hang that looks like a stuck
  submission), and
  it pipes the worker's stdout without reading it, so a worker printing more than 64 KiB to
  stdout blocks (logging goes to stderr and is fine).
- paths in the pipeline (the examples' shards, the run directory's outputs) are opened by the
  workers: on a local runs directory they must be on a volume every worker mounts at the same
  path; on a bucket run (`--runs-dir s3://...`) the workers read the shards' objects and write
  their outputs and results on the store (dataplane.beam.shard_source, dataplane.beam.shard_sink).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from baton.errors import StageError

LOCAL = ("FnApiRunner", "BundleBasedDirectRunner")
# Below this many rows a data stage runs Beam on one in-memory worker whatever the cores; from
# it on, one worker process per usable core and shard. Measured on 2 cores (docs/data.md
# "Runners"): one in-process worker was the fastest at every size up to 10M rows (its
# TensorFlow and Arrow calls already use both cores); 2 worker processes cost 1.6x at 10M rows
# (each imports TensorFlow and Beam before its first bundle, per Beam job) and 3-5x below, and
# 2 threads were no faster (the GIL). Processes are the mode whose cost is fixed while their
# gain grows with rows and cores, so they start where that fixed cost is small: a threshold
# above every size measured, not a measured break-even (no many-core node here).
MULTI_WORKER_MIN_ROWS = 20_000_000
MULTI_MODE = "multi_processing"
_STAGE_ERROR = re.compile(r"StageError: (.+)")


def make_runner(args: Sequence[str]) -> tuple[Any, Any]:
    """(runner, PipelineOptions) for `args`; FnApiRunner unless `--runner` names another."""
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    if not any(a.split("=", 1)[0] in ("--save_main_session", "--no_save_main_session")
               for a in args):
        args = [*args, "--no_save_main_session"]  # nothing Baton runs lives in __main__
    options = PipelineOptions(list(args))
    name = options.view_as(StandardOptions).runner
    if name in (None, "FnApiRunner"):
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner

        options.view_as(StandardOptions).runner = None
        return FnApiRunner(), options
    return name, options


def _flag(args: Sequence[str], name: str) -> str | None:
    """The value of `--name=V` or `--name V` in `args`, else None."""
    for i, a in enumerate(args):
        if a.startswith(f"{name}="):
            return a.split("=", 1)[1]
        if a == name and i + 1 < len(args):
            return args[i + 1]
    return None


def plan_workers(args: Sequence[str], *, rows: int, work_items: int,
                 node: dict[str, Any] | None = None) -> tuple[list[str], dict[str, Any]]:
    """(args, record): the FnApiRunner's local workers chosen from the node's inventory.

    `beam_pipeline_args` that name `--direct_num_workers`/`--direct_running_mode`, or another
    runner, win and are passed through unchanged. Otherwise the count is this task's share of
    the node's usable cores (strategies.inventory.beam_workers: affinity and cgroup quota, so a
    pod's CPU limit), at most one per work item (a shard: the DoFns process whole shards), as
    `MULTI_MODE` workers; below `MULTI_WORKER_MIN_ROWS` rows, or with one worker's worth of
    work, one in-memory worker as before (small inputs gain nothing from more, and keep the
    exact path they always had). The record (`beam_workers`, `beam_running_mode`,
    `beam_workers_reason`) goes into the stage's lineage metrics.
    """
    args = list(args)
    name = runner_name(args)
    if name != "FnApiRunner":
        return args, {"beam_workers": 0, "beam_running_mode": name,
                      "beam_workers_reason": f"beam_pipeline_args --runner={name}"}
    workers, mode = _flag(args, "--direct_num_workers"), _flag(args, "--direct_running_mode")
    if workers is not None or mode is not None:
        count = int(workers) if workers is not None and workers.isdigit() else 1
        return args, {"beam_workers": count,
                      "beam_running_mode": mode or "in_memory",
                      "beam_workers_reason": "beam_pipeline_args"}
    from baton.strategies import inventory

    cores = inventory.beam_workers(node if node is not None else inventory.node_inventory())
    n = max(1, min(cores, work_items))
    if n == 1 or rows < MULTI_WORKER_MIN_ROWS:
        why = (f"{rows} rows < {MULTI_WORKER_MIN_ROWS} (more workers would not pay)" if n > 1 else
               f"{cores} usable core(s), {work_items} shard(s): one worker's worth of work")
        return args, {"beam_workers": 1, "beam_running_mode": "in_memory",
                      "beam_workers_reason": f"inventory: {why}"}
    return ([*args, f"--direct_num_workers={n}", f"--direct_running_mode={MULTI_MODE}"],
            {"beam_workers": n, "beam_running_mode": MULTI_MODE,
             "beam_workers_reason": f"inventory: {cores} usable core(s), {work_items} shards, "
                                    f"{rows} rows"})


def batch_threads(placed: dict[str, Any], node: dict[str, Any] | None = None) -> int:
    """Threads a transform DoFn works on its record batches with (dataplane.beam.ordered_threads).

    The node's usable cores (this task's share) when `plan_workers` placed the work on one
    in-memory worker: that worker is then the only user of the cores, and TensorFlow, numpy
    and Arrow release the GIL for their per-batch work. Otherwise 1: several local worker
    processes already use the cores, and another runner's workers are its own to size.
    """
    if placed.get("beam_running_mode") != "in_memory" or placed.get("beam_workers") != 1:
        return 1
    from baton.strategies import inventory

    return inventory.beam_workers(node if node is not None else inventory.node_inventory())


def runner_name(args: Sequence[str]) -> str:
    return _flag(args, "--runner") or "FnApiRunner"


def check_job_endpoint(options: Any, connect_timeout_s: float = 10.0) -> None:
    """A StageError, in seconds, when `--job_endpoint` names no listening job service."""
    import socket

    from apache_beam.options.pipeline_options import PortableOptions

    portable = options.view_as(PortableOptions)
    endpoint = portable.job_endpoint
    if not endpoint or endpoint == "embed":
        return
    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit():
        raise StageError(f"beam_pipeline_args --job_endpoint must be HOST:PORT. "
                         f"Received: {endpoint!r}")
    timeout = min(connect_timeout_s, float(portable.job_server_timeout or connect_timeout_s))
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        raise StageError(f"beam_pipeline_args --job_endpoint={endpoint}: no job service "
                         f"answers there ({exc}); start the job server (Flink, Spark, or "
                         "python -m apache_beam.runners.portability.local_job_service_main "
                         "--port PORT) or fix the address") from None


def run(build: Callable[[Any], None], args: Sequence[str]) -> None:
    """Build a pipeline with `build(pipeline)` and run it to completion.

    A `StageError` raised inside a DoFn arrives wrapped in the runner's exception (with a
    worker traceback); it is re-raised here as a plain StageError so the user sees the message.
    With `--wait_until_finish_duration=MS` a job still running after MS milliseconds is
    cancelled and is a StageError.
    """
    import logging

    import apache_beam as beam
    from apache_beam.options.pipeline_options import StandardOptions, TestOptions

    runner, options = make_runner(args)
    check_job_endpoint(options)
    duration_ms = options.view_as(TestOptions).wait_until_finish_duration
    if duration_ms:
        # Beam's `with` block would wait without a bound: run, then wait here
        options.view_as(StandardOptions).no_wait_until_finish = True
    # Beam logs a DoFn's exception with its traceback before re-raising it; the exception
    # itself still carries everything, so keep the log quiet and decide below what to show.
    beam_log = logging.getLogger("apache_beam")
    level = beam_log.level
    beam_log.setLevel(logging.CRITICAL)
    try:
        with _short_state_sampling(runner), beam.Pipeline(runner=runner, options=options) as p:
            build(p)
        if duration_ms:
            _wait(p.result, duration_ms)
    except StageError:
        raise
    except Exception as exc:
        found = _STAGE_ERROR.findall(str(exc))
        if found:
            raise StageError(found[-1].strip()) from None
        if isinstance(runner, str):  # a job service's failure: its traceback is text
            raise StageError(f"the {runner} job failed: {_last_error(str(exc))}") from exc
        raise
    finally:
        beam_log.setLevel(level)


SAMPLING_PERIOD_MS = 20


@contextlib.contextmanager
def _short_state_sampling(runner: Any) -> Iterator[None]:
    """Beam's state sampler, in this process, sleeps at most SAMPLING_PERIOD_MS between samples.

    Every bundle an SDK worker runs ends by joining its state sampler's thread, which sleeps
    between samples for up to `sampling_period_ms`, 200 by default (its wait ramps up from 2 ms
    by 1.2x); Beam 2.77 has no option for it. A bundle of ~0.6 s, a transform pass over 1M rows
    here, then waits ~50 ms on average for the sampler to wake (measured: 0.04-0.15 s per text
    transform run over its 4 bundles). With an in-process runner (the FnApiRunner's embedded
    worker) the sampler's default period is lowered while the pipeline runs: the samples it
    takes (Beam's per-step msec counters) are finer, and a 50 Hz thread costs nothing
    measurable. Worker processes, and a Beam whose sampler takes other arguments, keep Beam's
    setting."""
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from apache_beam.runners.worker import statesampler

    init = statesampler.StateSampler.__init__
    default = (statesampler.DEFAULT_SAMPLING_PERIOD_MS,)
    if not isinstance(runner, FnApiRunner) or init.__defaults__ != default:
        yield  # another runner, a Beam that differs, or already lowered by an enclosing run
        return
    init.__defaults__ = (SAMPLING_PERIOD_MS,)
    try:
        yield
    finally:
        init.__defaults__ = default


def _last_error(text: str) -> str:
    """The telling line of a remote traceback: gRPC's `details`, else the last `Error: ...`."""
    details = re.findall(r'details = "(.+)"', text)
    if details:
        return details[-1]
    lines = [ln.strip() for ln in text.splitlines()
             if ln.strip() and not ln.startswith((" ", "\t", "Traceback"))]
    return lines[-1] if lines else text.strip()[:500]


def _wait(result: Any, duration_ms: int) -> None:
    """Wait at most `duration_ms` for `result`; cancel it and raise a StageError past that."""
    import threading

    from apache_beam.runners.runner import PipelineState

    state = result.wait_until_finish(duration=duration_ms)
    if PipelineState.is_terminal(state):
        return  # a failed job has raised already
    # cancelling a job whose worker is gone may itself block: give it a few seconds
    canceller = threading.Thread(target=_cancel_quietly, args=(result,), daemon=True)
    canceller.start()
    canceller.join(10)
    raise StageError(f"beam_pipeline_args --wait_until_finish_duration={duration_ms}: the Beam "
                     f"job did not finish within {duration_ms / 1000:g} s (state {state}) and "
                     "was cancelled; on a portable runner a worker that crashed or never "
                     "connected looks like this: see the worker pool's (SDK harness's) log")


def _cancel_quietly(result: Any) -> None:
    import contextlib

    with contextlib.suppress(Exception):  # the job is abandoned either way
        result.cancel()
