"""The local runner: executes a plan's DAG in order, with caching, lineage and accounting.

Each stage runs in this process inside a temporary directory (`.tmp-<stage>-<pid>`) that is
renamed to `runs/<pipeline>/<run id>/<stage>` only after the stage returned and its lineage
record was written, so a killed run leaves nothing that looks complete. A stage whose cache key
(type, code version, config, input content hashes) matches an earlier success is materialised
from that execution by hard links instead of being run.
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
from baton.pipeline.accounting import Meter, Usage, totals
from baton.pipeline.configs import config_to_dict
from baton.pipeline.context import RunOptions, StageContext
from baton.pipeline.plan import Plan
from baton.pipeline.spec import PipelineSpec

_LOG = logs.get("pipeline.runner")


# The attribute of a KeyboardInterrupt (or Preempted) that carries the StageResult of the stage
# it stopped, from `_run_stage` up to `run_pipeline`'s run record.
INTERRUPTED_STAGE = "baton_interrupted_stage"


@dataclasses.dataclass
class StageResult:
    name: str
    type: str
    status: str  # succeeded | cached | failed | skipped | interrupted
    usage: Usage = dataclasses.field(default_factory=Usage)
    metrics: dict[str, Any] = dataclasses.field(default_factory=dict)
    error: str = ""


@dataclasses.dataclass
class RunResult:
    run_id: str
    run_dir: Path
    stages: list[StageResult]

    @property
    def ok(self) -> bool:
        return all(s.status in ("succeeded", "cached", "skipped") for s in self.stages)

    @property
    def error(self) -> str:
        return next((f"stage {s.name!r} failed: {s.error}" for s in self.stages if s.error), "")


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def runs_root_for(plan: Plan, runs_dir: str | Path | None) -> Path:
    base = Path(runs_dir) if runs_dir else Path(plan.spec.runs_dir)
    return (base / plan.spec.name).resolve()


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
    runs_root = runs_root_for(plan, runs_dir)
    run_id = run_id or store.new_run_id()
    run_dir = runs_root / run_id
    if only:
        unknown = sorted(set(only) - set(plan.order))
        if unknown:
            raise UsageError(f"--only names unknown stage(s) {unknown}; stages: {list(plan.order)}")
    needed = plan.upstream_closure(only) if only else set()
    rapl = open_rapl(spec)  # before anything is written
    run_dir.mkdir(parents=True, exist_ok=True)
    store.clean_stale_tmp(run_dir)
    (run_dir / "spec.yaml").write_text(spec.to_yaml())
    cache = cache_mod.Cache(runs_root)
    started = _now()
    results: list[StageResult] = []
    _say(stream, options, f"baton: pipeline {spec.name!r}, run {run_id} -> {run_dir}")
    _write_run_record(run_dir, spec.name, run_id, started, "running", results, options,
                      spec.energy)
    early_checked: set[str] = set()
    try:
        for i, name in enumerate(plan.order, 1):
            label = f"[{i}/{len(plan.order)}] {name}"
            problems = _early_checks(plan, run_dir, plan.order[i - 1:], early_checked)
            if problems:
                _write_run_record(run_dir, spec.name, run_id, started, "failed", results, options,
                                  spec.energy)
                raise SpecError([f"{msg} (found from the data before stage {name!r} ran)" for msg in problems])
            if only and name not in only:
                if name in needed:
                    _require_outputs(plan, run_dir, name)
                results.append(StageResult(name, plan.spec.stage(name).type, "skipped"))
                _say(stream, options, f"- {label}: skipped (outputs already in {run_dir.name})")
                continue
            res = _run_stage(plan, name, run_dir, runs_root, cache, options, stream, label, rapl)
            results.append(res)
            if res.status == "failed":
                break
    except KeyboardInterrupt as exc:
        store.clean_stale_tmp(run_dir)
        stopped = getattr(exc, INTERRUPTED_STAGE, None)
        if stopped is not None:  # its energy is in the run's totals and its row
            results.append(stopped)
        _write_run_record(run_dir, spec.name, run_id, started, "interrupted", results,
                          options, spec.energy)
        raise
    result = RunResult(run_id, run_dir, results)
    status = "succeeded" if result.ok else "failed"
    _write_run_record(run_dir, spec.name, run_id, started, status, results, options,
                      spec.energy)
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


def _early_checks(plan: Plan, run_dir: Path, pending: Collection[str], done: set[str]) -> list[str]:
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
            if lineage.read(run_dir / src) is None:
                break
            paths[key] = run_dir / src / output
        else:
            done.add(name)
            where = plan.spec.where("config", plan.spec.stage(name))
            problems += [f"{where}: stage {name!r} {msg}" for msg in hook(plan.configs[name], paths)]
    return problems


def _run_stage(
    plan: Plan, name: str, run_dir: Path, runs_root: Path, cache: cache_mod.Cache,
    options: RunOptions, stream: TextIO, label: str, rapl: energy.RaplCounter | None = None,
) -> StageResult:
    spec, st, config = plan.spec, plan.types[name], plan.configs[name]
    stage_spec = spec.stage(name)
    inputs: dict[str, Path] = {}
    input_records: dict[str, dict[str, str]] = {}
    for key, (src, output) in plan.upstream(name).items():
        rec = lineage.read(run_dir / src) or {}
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
    if st.cacheable and not options.no_cache:
        hit = cache.lookup(key)
        stale = _stale_reason(st, hit)
        if stale:
            _say(stream, options, f"  {label}: not reusing the cached result: {stale}")
        elif hit is not None:
            return _reuse(cache, hit, record, key, final, stream, options, label)

    _say(stream, options, f"> {label} ({stage_spec.type})")
    work = run_dir / f"{store.TMP_PREFIX}{name}-{os.getpid()}"
    work.mkdir(parents=True)
    ctx = StageContext(
        pipeline=spec.name, run_id=run_dir.name, stage=name, stage_type=stage_spec.type,
        run_dir=run_dir, runs_root=runs_root, work_dir=work, inputs=inputs, options=options,
        spec_dir=spec_dir, spec_path=spec.path, stream=stream,
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
    if error:
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
        return StageResult(name, stage_spec.type, "failed", usage, dict(ctx.metrics), error)

    outputs: dict[str, dict[str, Any]] = {}
    for out in st.outputs:
        p = work / out
        outputs[out] = {"path": str(final / out), "hash": store.hash_path(p)}
    record.update(status="succeeded", finished=_now(), outputs=outputs, usage=usage.as_dict(),
                  metrics=dict(ctx.metrics), cache={"key": key, "hit": False})
    store.write_json_atomic(work / lineage.FILENAME, record)
    os.replace(work, final)
    for out in outputs.values():
        out["fingerprint"] = store.fingerprint(out["path"])
    if st.cacheable:
        cache.store(key, record)
    _say(stream, options, f"+ {label} done in {usage.wall_s:.1f}s (cpu {usage.cpu_s:.1f}s, "
                          f"peak {usage.peak_rss_mb:.0f} MB, {usage.energy_j:.0f} J "
                          f"{usage.energy_method})")
    return StageResult(name, stage_spec.type, "succeeded", usage, dict(ctx.metrics))


def _stale_reason(st: Any, hit: dict[str, Any] | None) -> str | None:
    """A stage's `cache_valid(outputs)` hook vetoes a hit whose effect outside the run is gone
    (a push whose serving directory was deleted); inputs and outputs are already checked."""
    hook = st.hook("cache_valid")
    if hit is None or hook is None:
        return None
    reason: str | None = hook({k: Path(v["path"]) for k, v in hit["outputs"].items()})
    return reason


def _reuse(
    cache: cache_mod.Cache, hit: dict[str, Any], record: dict[str, Any], key: str, final: Path,
    stream: TextIO,
    options: RunOptions, label: str,
) -> StageResult:
    tmp = final.with_name(f"{store.TMP_PREFIX}{final.name}-{os.getpid()}")
    tmp.mkdir(parents=True)
    outputs = {}
    for out, info in hit["outputs"].items():
        store.link_tree(Path(info["path"]), tmp / out)
        outputs[out] = {"path": str(final / out), "hash": info["hash"]}
    source = f"{hit.get('run_id')}/{hit.get('stage')}"
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


def _require_outputs(plan: Plan, run_dir: Path, name: str) -> None:
    rec = lineage.read(run_dir / name)
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


def _write_run_record(
    run_dir: Path, pipeline: str, run_id: str, started: str, status: str,
    results: list[StageResult], options: RunOptions, energy_config: Any = None,
) -> None:
    store.write_json_atomic(run_dir / "run.json", {
        "pipeline": pipeline, "run_id": run_id, "status": status, "started": started,
        "finished": _now() if status != "running" else None,
        "options": config_to_dict({k: v for k, v in dataclasses.asdict(options).items()}),
        "stages": [{"name": r.name, "type": r.type, "status": r.status, "usage": r.usage.as_dict(),
                    "metrics": r.metrics, "error": r.error} for r in results],
        "totals": totals([r.usage for r in results]),
        **({"energy": config_to_dict(energy_config)} if energy_config is not None else {}),
    })


def summary_table(results: list[StageResult]) -> str:
    """The end-of-run table: one row per stage with time, CPU, memory, energy, carbon and key
    metrics."""
    head = ("stage", "status", "wall s", "cpu s", "peak MB", "energy J", "gCO2e", "metrics")
    rows = [head]
    for r in results:
        u = r.usage
        shown = [f"{k}={_fmt(v)}" for k, v in r.metrics.items()
                 if isinstance(v, int | float) or (isinstance(v, str) and len(v) <= 24)]
        rows.append((r.name, r.status, f"{u.wall_s:.1f}", f"{u.cpu_s:.1f}", f"{u.peak_rss_mb:.0f}",
                     f"{u.energy_j:.0f}", f"{u.co2e_g:.3f}",
                     " ".join(shown[:3]) or (r.error[:60] if r.error else "")))
    t = totals([r.usage for r in results])
    rows.append(("total", "", f"{t['wall_s']:.1f}", f"{t['cpu_s']:.1f}", f"{t['peak_rss_mb']:.0f}",
                 f"{t['energy_j']:.0f}", f"{t['co2e_g']:.3f}", f"energy: {t['energy_method']}"))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(head))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def summary_fields(results: list[StageResult]) -> dict[str, Any]:
    """The end-of-run table as the `summary` record's fields (BATON_LOG_FORMAT=json): one
    entry per stage under `stages` (name, type, status, usage, metrics, error), and `totals`."""
    return {
        "stages": [{"name": r.name, "type": r.type, "status": r.status, **r.usage.as_dict(),
                    "metrics": r.metrics, **({"error": r.error} if r.error else {})}
                   for r in results],
        "totals": totals([r.usage for r in results]),
    }


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)
