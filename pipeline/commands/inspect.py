"""`baton inspect RUN_DIR`: what a run did, from its records alone (no TensorFlow import)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from baton.errors import EXIT_OK, UsageError
from baton.pipeline import lineage


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="baton inspect", description="Show a run's stages, metrics "
                                "and lineage. RUN_DIR is runs/<pipeline>/<run id> (or a pipeline "
                                "directory: its newest run), locally or on a bucket (s3://..., "
                                "gs://...).")
    p.add_argument("run_dir")
    p.add_argument("--stage", help="show one stage's full lineage record")
    p.add_argument("--json", action="store_true", help="print the run record as JSON")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    from baton.storage import location

    bucket = None
    if location.is_remote(args.run_dir):  # its records, staged in this node's mirror
        from baton.pipeline.bucket_run import open_run
        from baton.storage.filesystems import check_bucket

        url = location.normalize(args.run_dir, "RUN_DIR")
        check_bucket(url, "RUN_DIR")
        bucket = open_run(url)
        bucket.stage_record_files()
        run_dir = bucket.run_dir
    else:
        run_dir = resolve_run_dir(Path(args.run_dir))
    run = json.loads((run_dir / "run.json").read_text())
    if args.json:
        print(json.dumps(run, indent=2))
        return EXIT_OK
    if args.stage:
        rec = lineage.read(run_dir / args.stage)
        if rec is None:
            raise UsageError(f"--stage: no finished stage {args.stage!r} in {run_dir}")
        print(json.dumps(rec, indent=2))
        return EXIT_OK
    print(render_run(run_dir, run, bucket))
    return EXIT_OK


def resolve_run_dir(path: Path) -> Path:
    if (path / "run.json").is_file():
        return path
    if path.is_dir():
        runs = sorted(p for p in path.iterdir() if (p / "run.json").is_file())
        if runs:
            return runs[-1]
    raise UsageError(f"RUN_DIR: {path} is not a run directory (no run.json). "
                     "Expected runs/<pipeline>/<run id>")


def render_run(run_dir: Path, run: dict[str, Any], bucket: Any = None) -> str:
    """The report; `bucket` (pipeline.bucket_run.BucketRun): the run is on an object store,
    and the files the report shows are staged from it."""
    from baton.pipeline.summary import StageResult, summary_table

    results = [
        StageResult(s["name"], s["type"], s["status"], _usage(s["usage"], run.get("energy", {})),
                    s.get("metrics", {}), s.get("error", ""))
        for s in run["stages"]
    ]
    out = [f"pipeline {run['pipeline']}  run {run['run_id']}  status {run['status']}",
           f"started {run['started']}  finished {run.get('finished')}", "", summary_table(results),
           "", *cost_table(run), ""]
    out.append("lineage:")
    for s in run["stages"]:
        rec = lineage.read(run_dir / s["name"])
        if rec is None:
            out += _failed_lineage(run_dir, s)
            continue
        ins = ", ".join(f"{k}<-{v['ref']} {v['hash'][7:19]}" for k, v in rec.get("inputs", {}).items())
        outs = ", ".join(f"{k} {v['hash'][7:19]}" for k, v in rec.get("outputs", {}).items())
        cache = rec.get("cache", {})
        note = f" (cached from {cache['from']})" if cache.get("hit") else ""
        out.append(f"  {s['name']}: code {rec['code_version'][7:19]}{note}")
        if ins:
            out.append(f"    in:  {ins}")
        if outs:
            out.append(f"    out: {outs}")
        for k, v in rec.get("external_inputs", {}).items():
            out.append(f"    data: {k} {v[7:19]}")
    out.extend(_extras(run_dir, run, bucket))
    return "\n".join(out)


def _failed_lineage(run_dir: Path, stage: dict[str, Any]) -> list[str]:
    """A failed stage has no lineage.json (no reader may take it for finished); point at the
    record the runner wrote beside it instead, which holds its inputs, config and usage."""
    record = run_dir / f"{stage['name']}.failed.json"
    if stage["status"] != "failed" or not record.is_file():
        return []
    return [f"  {stage['name']}: failed; its record (inputs, config, usage): {record}"]


def _usage(recorded: dict[str, Any], energy_config: dict[str, Any]) -> Any:
    """A stage's Usage as recorded (accounting.recorded_usage)."""
    from baton.pipeline.accounting import recorded_usage

    return recorded_usage(recorded, energy_config)


def cost_table(run: dict[str, Any]) -> list[str]:
    """Energy and carbon per stage and for the run, as recorded (method, J, gCO2e, J/example).

    Every stage that spent energy in this run has a row, a failed one too (marked), so the rows
    add up to the run's total, which counts the failed stage's joules; cached and skipped
    stages spent none here."""
    from baton.energy import CARBON_INTENSITY

    cfg = run.get("energy", {})
    rows: list[tuple[str, ...]] = [("stage", "method", "energy J", "gCO2e", "J/example")]
    rows += [_cost_row(s) for s in run["stages"] if _spent(s)]
    t = run.get("totals", {})
    rows.append(("run", str(t.get("energy_method", "green-algorithms")),
                 f"{t.get('energy_j', 0):.1f}", f"{t.get('co2e_g', 0):.4f}", ""))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [f"cost (carbon intensity {cfg.get('carbon_intensity', CARBON_INTENSITY):g} "
             f"gCO2e/kWh, PUE {cfg.get('pue', 1.0):g}; cached stages cost nothing):"]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
              for r in rows]
    return lines


def _spent(stage: dict[str, Any]) -> bool:
    """Whether a stage ran in this run, succeeded or failed: the run's totals sum every stage's
    usage, and a cached or skipped stage's is zero, so a row for each other stage adds up."""
    u = stage.get("usage", {})
    return bool(u.get("wall_s") or u.get("energy_j"))


def _cost_row(stage: dict[str, Any]) -> tuple[str, ...]:
    u = stage.get("usage", {})
    per = u.get("j_per_example")
    name = stage["name"] + (f" ({stage['status']})"
                            if stage["status"] in ("failed", "interrupted") else "")
    return (name, str(u.get("energy_method", "green-algorithms")), f"{u.get('energy_j', 0):.1f}",
            f"{u.get('co2e_g', 0):.4f}", f"{per:.3g}" if per is not None else "")


def _extras(run_dir: Path, run: dict[str, Any], bucket: Any = None) -> list[str]:
    """Statistics tables and report links contributed by stages, when present."""
    out: list[str] = []
    for s in run["stages"]:
        stage_dir = run_dir / s["name"]
        if bucket is not None and s["status"] != "failed":
            rec = bucket.hydrate(s["name"], ["statistics"] if s["type"] == "statistics" else [])
            bucket.fetch_file(s["name"], "model/rounds.json")
            for rel, entry in sorted((rec or {}).get("manifest", {}).items()):
                if rel.count("/") == 1 and rel.endswith(".html"):
                    out.append(f"report ({s['name']}): {bucket.root}/{entry['key']}")
        if s["type"] == "statistics" and (stage_dir / "statistics").is_dir():
            try:
                from baton.pipeline.dataplane.statistics.render import statistics_table
            except ImportError:
                continue
            out += ["", f"statistics ({s['name']}):", statistics_table(stage_dir / "statistics")]
        if s["type"] == "federated" and (stage_dir / "model" / "rounds.json").is_file():
            out += ["", f"rounds ({s['name']}):",
                    *federated_rounds(json.loads((stage_dir / "model" / "rounds.json")
                                                 .read_text()))]
        for html in sorted(stage_dir.glob("*/*.html")) if bucket is None else ():
            out.append(f"report ({s['name']}): {html}")
    return out


def federated_rounds(rounds: list[dict[str, Any]]) -> list[str]:
    """One line per federated round: who trained, loss, accuracy/mse, bytes, epsilon."""
    rows = [("round", "clients", "loss", "accuracy/mse", "bytes up", "bytes down", "epsilon")]
    for r in rounds:
        metric = r.get("accuracy", r.get("mse"))
        rows.append((str(r["round"]), ",".join(r.get("clients", [])),
                     f"{r['loss']:.4f}" if "loss" in r else "-",
                     f"{metric:.4f}" if metric is not None else "-",
                     f"{r['bytes_up']:,}" if "bytes_up" in r else "-",  # external: not counted
                     f"{r['bytes_down']:,}" if "bytes_down" in r else "-",
                     f"{r['epsilon']:.3f}" if "epsilon" in r else "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True))
            for row in rows]
