"""The local runner: executes a plan's DAG in order, with caching, lineage and accounting.

Each stage runs in this process inside a temporary directory (`.tmp-<stage>-<pid>`) that is
renamed to `runs/<pipeline>/<run id>/<stage>` only after the stage returned and its lineage
record was written, so a killed run leaves nothing that looks complete. A stage whose cache key
(type, code version, config, input content hashes) matches an earlier success is materialised
from that execution by hard links instead of being run.

With a runs directory on an object store (`--runs-dir s3://...`), the same steps run in a
node-local mirror of the run directory and pipeline.bucket_run commits each stage to the store
(its files, then its lineage record with their manifest, last), stages inputs from the store
and keeps the cache index there: the stages themselves see local directories either way.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import shutil
import sys
import traceback
from collections.abc import Collection
from pathlib import Path
from typing import Any, TextIO

from baton import energy, logs
from baton.errors import BatonError, SpecError, StageError, UsageError
from baton.pipeline import cache as cache_mod
from baton.pipeline import lineage, store
from baton.pipeline.accounting import Meter, Usage
from baton.pipeline.bucket_run import BucketRun, mirror_root
from baton.pipeline.configs import config_to_dict
from baton.pipeline.context import RunOptions, StageContext
from baton.pipeline.plan import Plan
from baton.pipeline.spec import PipelineSpec
from baton.pipeline.summary import StageResult, summary_fields, summary_table, write_run_record
from baton.storage import location as L

__all__ = ["RunResult", "StageResult", "open_rapl", "run_pipeline", "runs_location",
           "runs_root_for", "summary_fields", "summary_table"]

_LOG = logs.get("pipeline.runner")


# The attribute of a KeyboardInterrupt (or Preempted) that carries the StageResult of the stage
# it stopped, from `_run_stage` up to `run_pipeline`'s run record.
INTERRUPTED_STAGE = "baton_interrupted_stage"


@dataclasses.dataclass
class RunResult:
    run_id: str
    run_dir: Path  # local (on a bucket: this node's mirror of it)
    stages: list[StageResult]
    url: str | None = None  # the run directory on the object store, for a bucket run

    @property
    def ok(self) -> bool:
        return all(s.status in ("succeeded", "cached", "skipped") for s in self.stages)

    @property
    def error(self) -> str:
        return next((f"stage {s.name!r} failed: {s.error}" for s in self.stages if s.error), "")


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def runs_location(plan: Plan, runs_dir: str | Path | None) -> str:
    """`<runs dir>/<pipeline>`: a bucket URL, or an absolute local path."""
    what = "--runs-dir" if runs_dir else plan.spec.where("runs_dir")
    base = L.normalize(runs_dir if runs_dir else plan.spec.runs_dir, what)
    return L.join(base, plan.spec.name) if L.is_remote(base) else \
        str((Path(base) / plan.spec.name).resolve())


def runs_root_for(plan: Plan, runs_dir: str | Path | None) -> Path:
    """The local runs root: the directory itself, or this node's mirror of a bucket's."""
    root = runs_location(plan, runs_dir)
    return mirror_root(root) if L.is_remote(root) else Path(root)


def run_pipeline(
    plan: Plan,
    options: RunOptions | None = None,
    *,
    runs_dir: str | Path | None = None,
    run_id: str | None = None,
    only: Collection[str] | None = None,
    stream: TextIO | None = None,
) -> RunResult:
    """Run every stage of `plan` (or only those in `only`, reusing the others' outputs)."""
    options = options or RunOptions()
    stream = stream or sys.stderr
    spec = plan.spec
    root = runs_location(plan, runs_dir)
    run_id = run_id or store.new_run_id()
    bucket = BucketRun(root, run_id) if L.is_remote(root) else None
    runs_root = bucket.local_root if bucket else Path(root)
    run_dir = runs_root / run_id
    if only:
        unknown = sorted(set(only) - set(plan.order))
        if unknown:
            raise UsageError(f"--only names unknown stage(s) {unknown}; stages: {list(plan.order)}")
    needed = plan.upstream_closure(only) if only else set()
    rapl = open_rapl(spec)  # before anything is written
    if bucket is not None:
        bucket.start()
    run_dir.mkdir(parents=True, exist_ok=True)
    store.clean_stale_tmp(run_dir)
    (run_dir / "spec.yaml").write_text(spec.to_yaml())
    if bucket is not None:
        bucket.save("spec.yaml")
    cache: Any = bucket.cache if bucket else cache_mod.Cache(runs_root)
    started = _now()
    results: list[StageResult] = []
    _say(stream, options, f"baton: pipeline {spec.name!r}, run {run_id} -> "
                          f"{bucket.url if bucket else run_dir}")
    write_run_record(run_dir, spec.name, run_id, started, "running", results, options,
                      spec.energy, bucket)
    early_checked: set[str] = set()
    try:
        for i, name in enumerate(plan.order, 1):
            label = f"[{i}/{len(plan.order)}] {name}"
            problems = _early_checks(plan, run_dir, plan.order[i - 1:], early_checked, bucket)
            if problems:
                write_run_record(run_dir, spec.name, run_id, started, "failed", results, options,
                                  spec.energy, bucket)
                raise SpecError([f"{msg} (found from the data before stage {name!r} ran)" for msg in problems])
            if only and name not in only:
                if name in needed:
                    _require_outputs(plan, run_dir, name, bucket)
                results.append(StageResult(name, plan.spec.stage(name).type, "skipped"))
                _say(stream, options, f"- {label}: skipped (outputs already in {run_dir.name})")
                continue
            res = _run_stage(plan, name, run_dir, runs_root, cache, options, stream, label, rapl,
                             bucket)
            results.append(res)
            if res.status == "failed":
                break
    except KeyboardInterrupt as exc:
        store.clean_stale_tmp(run_dir)
        if bucket is not None:  # commits not started are dropped: nothing half-visible
            bucket.flush(wait=False)
        stopped = getattr(exc, INTERRUPTED_STAGE, None)
        if stopped is not None:  # its energy is in the run's totals and its row
            results.append(stopped)
        write_run_record(run_dir, spec.name, run_id, started, "interrupted", results,
                          options, spec.energy, bucket)
        raise
    failed = bucket.flush() if bucket is not None else {}  # the commits still uploading
    for r in results:
        if r.name in failed:  # its files did not all reach the store: not committed
            r.status, r.error = "failed", f"its commit failed: {failed[r.name]}"
    result = RunResult(run_id, run_dir, results, bucket.url if bucket else None)
    status = "succeeded" if result.ok else "failed"
    write_run_record(run_dir, spec.name, run_id, started, status, results, options,
                      spec.energy, bucket)
    if not options.quiet:
        if logs.json_output():  # a log router gets the rows as fields, not a drawn table
            _LOG.info("summary", extra=summary_fields(results))
        else:
            stream.write(summary_table(results) + "\n")
    return result


def open_rapl(spec: PipelineSpec) -> energy.RaplCounter | None:
    """The RAPL counter the spec's `energy.method` asks for on this node, or UsageError (exit 2)
    when `method: rapl` finds none readable. `baton run --check` calls it too: whether this node
    can meter the spec as asked is a check before any stage, so the check and the run agree."""
    try:
        return energy.open_counter(spec.energy)
    except ValueError as exc:
        raise UsageError(f"{spec.where('energy')}: {exc}") from None


def _early_checks(plan: Plan, run_dir: Path, pending: Collection[str], done: set[str],
                  bucket: BucketRun | None = None) -> list[str]:
    """Run the `check_inputs` hook of each pending stage whose EARLY_INPUTS are now written.

    Some spec errors only the data can settle (a gate on a slice column the data lacks). A stage
    names the inputs that settle them (evaluate: the transform graph); as soon as those exist,
    before the expensive stages between (train), its check runs, so the user learns of the
    mistake with exit 2 instead of after training.
    """
    problems: list[str] = []
    for name in pending:
        st = plan.types[name]
        early = st.early_inputs
        hook = st.hook("check_inputs")
        if name in done or hook is None or not early:
            continue
        upstream = plan.upstream(name)
        paths = {}
        for key in early:
            if key not in upstream:
                continue
            src, output = upstream[key]
            if _record(run_dir, bucket, src, output) is None:
                break
            paths[key] = run_dir / src / output
        else:
            done.add(name)
            where = plan.spec.where("config", plan.spec.stage(name))
            problems += [f"{where}: stage {name!r} {msg}" for msg in hook(plan.configs[name], paths)]
    return problems


def _record(run_dir: Path, bucket: BucketRun | None, stage: str,
            output: str | None = None) -> dict[str, Any] | None:
    """A finished stage's lineage record (with `output` staged here, for a bucket run)."""
    if bucket is not None:
        return bucket.hydrate(stage, None if output is None else [output])
    return lineage.read(run_dir / stage)


def _run_stage(
    plan: Plan, name: str, run_dir: Path, runs_root: Path, cache: Any,
    options: RunOptions, stream: TextIO, label: str, rapl: energy.RaplCounter | None = None,
    bucket: BucketRun | None = None,
) -> StageResult:
    spec, st, config = plan.spec, plan.types[name], plan.configs[name]
    stage_spec = spec.stage(name)
    inputs: dict[str, Path] = {}
    input_records: dict[str, dict[str, str]] = {}
    for key, (src, output) in plan.upstream(name).items():
        rec = _record(run_dir, bucket, src, output) or {}
        out = rec.get("outputs", {}).get(output)
        if out is None:
            raise StageError(f"stage {name!r}: input {key!r} ({src}.{output}) is missing in {run_dir}")
        inputs[key] = run_dir / src / output
        input_records[key] = {"ref": f"{src}.{output}", "path": str(inputs[key]), "hash": out["hash"]}
    spec_dir = spec.spec_dir
    external = {}
    hook = st.hook("external_inputs")
    if hook is not None:
        for p in hook(config, spec_dir) or ():
            external[str(p)] = store.hash_path(p) if Path(p).exists() else "missing"
    code = cache_mod.code_version(st.code_files())
    cfg_dict = config_to_dict(config)
    hook = st.hook("run_settings")
    settings = config_to_dict(dict(hook(config, options, spec))) if hook is not None else None
    key = cache_mod.cache_key(
        st.name, code, cfg_dict, {k: v["hash"] for k, v in input_records.items()}, external,
        settings,
    )
    record: dict[str, Any] = {
        "pipeline": spec.name, "run_id": run_dir.name, "stage": name, "type": stage_spec.type,
        "config": cfg_dict, "code_version": code, "inputs": input_records,
        "external_inputs": external, **({"run_settings": settings} if hook is not None else {}),
        "started": _now(),
    }
    final = run_dir / name
    if final.exists():
        shutil.rmtree(final)
    if bucket is not None:
        try:
            bucket.begin(name)
        except BatonError as exc:  # the store out of reach: the stage cannot start
            _say(stream, options, f"x {label} failed: {exc}")
            return StageResult(name, stage_spec.type, "failed", error=str(exc))
    if st.cacheable and not options.no_cache:
        hit = cache.lookup(key)
        stale = _stale_reason(st, hit, bucket)
        if stale:
            _say(stream, options, f"  {label}: not reusing the cached result: {stale}")
        elif hit is not None:
            return _reuse(cache, hit, record, key, final, stream, options, label, bucket)

    _say(stream, options, f"> {label} ({stage_spec.type})")
    work = run_dir / f"{store.TMP_PREFIX}{name}-{os.getpid()}"
    work.mkdir(parents=True)
    ctx = StageContext(
        pipeline=spec.name, run_id=run_dir.name, stage=name, stage_type=stage_spec.type,
        run_dir=run_dir, runs_root=runs_root, work_dir=work, inputs=inputs, options=options,
        spec_dir=spec_dir, spec_path=spec.path, stream=stream, bucket=bucket,
    )
    meter = Meter(config=spec.energy, rapl=rapl)
    error = ""
    try:
        with meter:
            st.run(ctx, config)
        missing = [o for o in st.outputs if not (work / o).is_dir()]
        if missing:
            raise StageError(f"stage wrote no output {missing} (declared outputs: {list(st.outputs)})")
    except BatonError as exc:
        error = str(exc)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (Preempted): the run unwinds
        shutil.rmtree(work, ignore_errors=True)
        if bucket is not None:
            bucket.abort(name)
        # what the stage spent so far still counts: the run record lists it as interrupted
        setattr(exc, INTERRUPTED_STAGE, StageResult(  # noqa: B010 - a name, not an attribute
            name, stage_spec.type, "interrupted", meter.usage, dict(ctx.metrics),
            f"interrupted after {meter.usage.wall_s:.1f}s"))
        raise
    except Exception as exc:  # a bug in a stage: keep the traceback for the user, next to the run
        error = f"{type(exc).__name__}: {exc}"
        (run_dir / f"{name}.traceback.txt").write_text(traceback.format_exc())
        error += f" (traceback in {run_dir / (name + '.traceback.txt')})"
    usage = meter.usage
    trained = ctx.metrics.get("examples_trained")
    usage.examples = int(trained) if isinstance(trained, int | float) and trained > 0 else None
    outputs: dict[str, dict[str, Any]] = {}
    if not error:
        for out in st.outputs:  # (a bucket's commit hashes the files once, for its manifest)
            outputs[out] = {"path": str(final / out),
                            "hash": "" if bucket else store.hash_path(work / out)}
        record.update(status="succeeded", finished=_now(), outputs=outputs,
                      usage=usage.as_dict(), metrics=dict(ctx.metrics),
                      cache={"key": key, "hit": False})
        store.write_json_atomic(work / lineage.FILENAME, record)
        if bucket is not None:
            try:  # the commit: files, then the record naming them (uploaded in the background)
                record = bucket.commit(name, work, record, final)
                outputs = record["outputs"]
            except BatonError as exc:
                error = str(exc)
                (work / lineage.FILENAME).unlink(missing_ok=True)
    if error:
        if bucket is not None:
            bucket.abort(name)
        # Keep what the stage wrote (an anomalies report, a partial log) for debugging, under a
        # name that no reader mistakes for a finished artifact: it has no lineage record.
        failed_dir = run_dir / f"{name}.failed"
        shutil.rmtree(failed_dir, ignore_errors=True)
        if any(p.is_file() for p in work.rglob("*")):
            os.replace(work, failed_dir)
            error += f" (partial outputs kept in {failed_dir})"
        else:  # only the empty output directories ctx.output made: nothing worth keeping
            shutil.rmtree(work, ignore_errors=True)
        _say(stream, options, f"x {label} failed after {usage.wall_s:.1f}s: {error}")
        store.write_json_atomic(run_dir / f"{name}.failed.json",
                                {**record, "status": "failed", "error": error, "usage": usage.as_dict()})
        if bucket is not None:
            bucket.save_failure(name)
        return StageResult(name, stage_spec.type, "failed", usage, dict(ctx.metrics), error)

    if bucket is None:  # (a bucket's commit has placed it)
        os.replace(work, final)
    for out in outputs.values():
        out["fingerprint"] = store.fingerprint(out["path"])
    if st.cacheable and bucket is not None:
        bucket.then(name, lambda: cache.store(key, record))
    elif st.cacheable:
        cache.store(key, record)
    _say(stream, options, f"+ {label} done in {usage.wall_s:.1f}s (cpu {usage.cpu_s:.1f}s, "
                          f"peak {usage.peak_rss_mb:.0f} MB, {usage.energy_j:.0f} J "
                          f"{usage.energy_method})")
    return StageResult(name, stage_spec.type, "succeeded", usage, dict(ctx.metrics))


def _stale_reason(st: Any, hit: dict[str, Any] | None,
                  bucket: BucketRun | None = None) -> str | None:
    """A stage's `cache_valid(outputs)` hook vetoes a hit whose effect outside the run is gone
    (a push whose serving directory was deleted); inputs and outputs are already checked."""
    hook = st.hook("cache_valid")
    if hit is None or hook is None:
        return None
    if bucket is not None:  # the hook reads the cached outputs: stage them here
        hit = bucket.cached_outputs(hit)
    reason: str | None = hook({k: Path(v["path"]) for k, v in hit["outputs"].items()})
    return reason


def _reuse(
    cache: Any, hit: dict[str, Any], record: dict[str, Any], key: str, final: Path,
    stream: TextIO, options: RunOptions, label: str, bucket: BucketRun | None = None,
) -> StageResult:
    source = f"{hit.get('run_id')}/{hit.get('stage')}"
    if bucket is not None:  # a new commit naming the same objects: nothing copied
        record.update(status="succeeded", finished=_now(), usage=Usage().as_dict(),
                      metrics=hit.get("metrics", {}), original_usage=hit.get("usage", {}),
                      cache={"key": key, "hit": True, "from": source})
        bucket.reuse(final.name, hit, record)
        _say(stream, options, f"= {label}: cached (reused {source})")
        return StageResult(record["stage"], record["type"], "cached", Usage(),
                           dict(record["metrics"]))
    tmp = final.with_name(f"{store.TMP_PREFIX}{final.name}-{os.getpid()}")
    tmp.mkdir(parents=True)
    outputs = {}
    for out, info in hit["outputs"].items():
        store.link_tree(Path(info["path"]), tmp / out)
        outputs[out] = {"path": str(final / out), "hash": info["hash"]}
    record.update(status="succeeded", finished=_now(), outputs=outputs,
                  usage=Usage().as_dict(), metrics=hit.get("metrics", {}),
                  original_usage=hit.get("usage", {}),
                  cache={"key": key, "hit": True, "from": source})
    store.write_json_atomic(tmp / lineage.FILENAME, record)
    os.replace(tmp, final)
    # Point the cache at the newest copy, so pruning old runs never loses reusable work.
    fresh = {k: {**v, "fingerprint": store.fingerprint(v["path"])} for k, v in outputs.items()}
    cache.store(key, {**hit, "run_id": record["run_id"], "stage": record["stage"], "outputs": fresh})
    _say(stream, options, f"= {label}: cached (reused {source})")
    return StageResult(record["stage"], record["type"], "cached", Usage(), dict(record["metrics"]))


def _require_outputs(plan: Plan, run_dir: Path, name: str, bucket: BucketRun | None = None) -> None:
    rec = bucket.read_commit(name) if bucket is not None else lineage.read(run_dir / name)
    if rec is None or rec.get("status") != "succeeded":
        raise UsageError(
            f"stage {name!r} is not selected by --only and has no finished outputs in {run_dir}; "
            "run it first or include it"
        )


def _say(stream: TextIO, options: RunOptions, text: str) -> None:
    """A line of the run's progress, through the `baton.pipeline.runner` logger (baton.logs);
    `stream` keeps the progress bars and the summary table, which are terminal output (with
    BATON_LOG_FORMAT=json they are records too: `summary_fields`, context.Progress)."""
    if not options.quiet:
        _LOG.info(text)


