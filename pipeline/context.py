"""What a stage sees while it runs: its inputs, where to write, how to report.

A stage is `run(ctx, config) -> dict | None`. It reads artifact directories from `ctx.inputs`,
writes each declared output into `ctx.output(name)` (a directory inside the stage's temporary
directory; the runner renames the whole stage into place only after `run` returns, so a crash
never leaves an artifact that looks complete), and reports progress and metrics through `ctx`.
Run-wide options (topology, runner flags) arrive in `ctx.options`; stages never read the
environment or sys.argv themselves.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

from baton import logs

_STAGE_LOG = logs.get("stage")


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """Options of one `baton run`, decided at the CLI edge and passed down unchanged."""

    workers: int | None = None  # None: the spec's cluster section decides
    workers_auto: bool = False  # `--workers auto`: the train stage probes and picks (probe.py)
    ps: int | None = None
    strategy: str | None = None
    min_workers: int | None = None  # None: the spec decides (elastic multi-worker mirrored)
    no_cache: bool = False
    inject_failure: str | None = None  # e.g. "worker:1@step:40" (strategies.faults)
    inject_slowdown: str | None = None  # e.g. "worker:1@speed:0.5" (strategies.slowdown)
    quiet: bool = False
    # HOST:PORT of a running Flower SuperLink: the federated stage submits its run there and
    # starts no SuperLink or SuperNode of its own (`baton run --superlink`, the k8s run Job)
    superlink: str | None = None
    # with `superlink`: a directory with its CA (ca.crt), Control API token (control.token)
    # and the clients' public keys (nodes/<client>.pub); the k8s run Job mounts its Secret here
    superlink_credentials: str | None = None
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)


class Progress:
    """Progress of one stage: a bar when the total is known, a counter otherwise.

    On a terminal it redraws one line; elsewhere (CI logs) it prints at most every 5 seconds.
    With BATON_LOG_FORMAT=json (`logs.json_output()`) it is a `baton.stage` record at most every
    5 seconds, and at the end, with the numbers as fields (done, total, unit, rate, elapsed_s).
    """

    def __init__(self, label: str, total: int | None, unit: str, stream: TextIO, quiet: bool,
                 context: Mapping[str, Any] | None = None):
        self.label, self.total, self.unit = label, total, unit
        self.done = 0
        self._stream, self._quiet = stream, quiet
        self._context = dict(context or {})  # stage, pipeline, run_id of the JSON records
        self._json = logs.json_output()
        self._tty = not self._json and bool(getattr(stream, "isatty", lambda: False)())
        self._start = time.monotonic()
        self._last = 0.0

    def update(self, n: int = 1) -> None:
        self.set(self.done + n)

    def set(self, done: int) -> None:
        self.done = done
        now = time.monotonic()
        if self._quiet or now - self._last < (0.2 if self._tty else 5.0):
            return
        self._last = now
        self._draw(final=False)

    def close(self) -> None:
        if not self._quiet and (self.done or self.total):
            self._draw(final=True)

    def _draw(self, final: bool) -> None:
        elapsed = time.monotonic() - self._start
        rate = self.done / elapsed if elapsed > 0 else 0.0
        if self._json:  # a record for log routers, not a bar
            count = f"{self.done}/{self.total}" if self.total else f"{self.done}"
            _STAGE_LOG.info(f"{self.label} {count} {self.unit}".rstrip(), extra={
                **self._context, "progress": self.label, "done": self.done, "total": self.total,
                "unit": self.unit, "rate": round(rate, 3), "elapsed_s": round(elapsed, 3),
                "final": final})
            return
        if self.total:
            frac = min(1.0, self.done / self.total)
            bar = "#" * int(frac * 24) + "-" * (24 - int(frac * 24))
            eta = (self.total - self.done) / rate if rate > 0 else 0.0
            text = (
                f"  {self.label} [{bar}] {self.done}/{self.total} {self.unit} "
                f"{rate:,.1f}/s {elapsed:5.1f}s eta {eta:4.0f}s"
            )
        else:
            text = f"  {self.label} {self.done} {self.unit} {rate:,.1f}/s {elapsed:5.1f}s"
        if self._tty:
            self._stream.write("\r" + text + ("\n" if final else ""))
        else:
            self._stream.write(text + "\n")
        self._stream.flush()


@dataclasses.dataclass
class StageContext:
    """The stage's view of one run. Created by the runner; stages only read it and call methods."""

    pipeline: str
    run_id: str
    stage: str
    stage_type: str
    run_dir: Path  # runs/<pipeline>/<run id>
    runs_root: Path  # runs/<pipeline>: earlier runs live here (baselines, versions)
    work_dir: Path  # the stage's temporary directory; renamed to run_dir/stage on success
    inputs: Mapping[str, Path]
    options: RunOptions = dataclasses.field(default_factory=RunOptions)
    spec_dir: Path | None = None  # directory of the spec file: relative paths resolve here
    spec_path: Path | None = None  # the spec file itself (None for the embedded default)
    stream: TextIO = dataclasses.field(default_factory=lambda: sys.stderr)
    metrics: dict[str, Any] = dataclasses.field(default_factory=dict)
    # the run directory on an object store (pipeline.bucket_run.BucketRun), None when local:
    # run_dir and runs_root are then this node's mirror of it
    bucket: Any = None

    def output(self, name: str) -> Path:
        """The directory to write output `name` into (created; inside the temporary stage dir)."""
        path = self.work_dir / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def final_path(self, name: str) -> Path:
        """Where output `name` will live once the stage succeeds (for records that point at it)."""
        return self.run_dir / self.stage / name

    def direct_output(self, name: str, elsewhere: bool = True) -> str:
        """Where other processes (Beam workers) write files of output `name`: on a bucket run
        whose writers run `elsewhere` (on other machines: a distributed Beam runner) the
        output's prefix on the store (the runner commits what is there with the stage), else
        the local output directory (on this node, writing locally and letting the commit
        upload is cheaper than writing to the store and reading back for the manifest). The
        stage's own files still go to `output(name)`."""
        if self.bucket is None or not elsewhere:
            return str(self.output(name))
        self.output(name)
        return str(self.bucket.direct_output(self.stage, name))

    def input_objects(self, name: str, elsewhere: bool = True) -> dict[str, Any] | None:
        """What processes on other machines (Beam workers) read input `name` from: on a
        bucket run whose readers run `elsewhere`, its committed objects (rel -> {url, sha256,
        size}; see dataplane.beam.shard_source); None when they read `inputs[name]` here."""
        if self.bucket is None or not elsewhere:
            return None
        return dict(self.bucket.committed_objects(self.inputs[name]))

    def results_prefix(self, elsewhere: bool = True) -> str | None:
        """Where other processes (Beam workers) write small results for this stage to read
        back: a scratch prefix on the store for a bucket run whose workers run `elsewhere`,
        None when a local scratch directory does (the stage deletes what it wrote)."""
        if self.bucket is None or not elsewhere:
            return None
        return str(self.bucket.scratch(self.stage))

    def fetch(self, path: str | Path) -> Path:
        """An artifact path found in an earlier record (a baseline model), staged on this
        node when the run directory is on an object store; a local path as it is."""
        return Path(path) if self.bucket is None else self.bucket.fetch(Path(path))

    def resolve(self, path: str | Path) -> Path:
        """A user path from the config, relative to the spec's directory."""
        p = Path(path).expanduser()
        if p.is_absolute() or self.spec_dir is None:
            return p
        return (self.spec_dir / p).resolve()

    def progress(self, total: int | None = None, unit: str = "", label: str = "") -> Progress:
        return Progress(label or self.stage, total, unit, self.stream, self.options.quiet,
                        context={"stage": self.stage, "pipeline": self.pipeline,
                                 "run_id": self.run_id})

    def log(self, message: str) -> None:
        """A line about this stage's progress, through the `baton.stage` logger (baton.logs)."""
        if not self.options.quiet:
            _STAGE_LOG.info(message, extra={"stage": self.stage, "pipeline": self.pipeline,
                                            "run_id": self.run_id})

    def warn(self, message: str) -> None:
        """A line the operator must see (a setting that weakens a guarantee): logged at WARNING
        level, with `--quiet` too, which silences progress only."""
        _STAGE_LOG.warning(f"WARNING: {message}", extra={
            "stage": self.stage, "pipeline": self.pipeline, "run_id": self.run_id})

    def record(self, **metrics: Any) -> None:
        """Numbers and short strings that go into this stage's lineage record and summary."""
        json.dumps(metrics)  # fail early on values the lineage record could not hold
        self.metrics.update(metrics)

    def previous_records(self, stage_type: str | None = None) -> Iterator[dict[str, Any]]:
        """Lineage records of successful earlier executions in this pipeline, newest first.

        Used to find baselines (the last blessed model) and the last exported version.
        """
        if self.bucket is not None:
            yield from self.bucket.records(stage_type, exclude_run=self.run_id)
            return
        from baton.pipeline import lineage

        yield from lineage.iter_records(self.runs_root, stage_type=stage_type, exclude_run=self.run_id)
