"""validate: compare data statistics against a schema; write the anomalies; fail unless allowed.

By default the schema is the one `statistics` inferred from the training split, so every split
(eval included) is checked against train. Point `schema_path` at a curated schema.json to
validate new data against a fixed contract instead. Output `anomalies/anomalies.json` (and a
readable `anomalies.txt`); the stage raises StageError when an anomaly of a kind not listed in
`allow` is found (`allow: [all]` records without failing). Numeric values outside a domain that
was inferred (not curated) are warnings: recorded, logged, never blocking, as TFDV infers no
numeric domain; with `schema_path` they block like every other kind.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from baton.errors import StageError
from baton.pipeline.context import StageContext

INPUTS = {"statistics": True, "schema": True}
OUTPUTS = ("anomalies",)
CODE_DEPS = ("baton.pipeline.dataplane.statistics.validation", "baton.pipeline.dataplane.statistics.stats")
CACHEABLE = True


@dataclasses.dataclass(frozen=True)
class Config:
    schema_path: Path | None = None  # a schema.json (or its directory) to use instead of the input
    allow: list[str] = dataclasses.field(default_factory=list)  # anomaly kinds, or "all"
    drift_threshold: float = 0.1
    max_unseen_fraction: float = 0.0  # string values outside the domain, fraction of rows
    range_tolerance: float = 0.1  # numeric domain widened by this fraction of its width
    splits: list[str] = dataclasses.field(default_factory=list)  # default: every split

    def __post_init__(self) -> None:
        from baton.pipeline.dataplane.statistics.validation import KINDS

        for kind in self.allow:
            if kind not in (*KINDS, "all"):
                from baton.configs import did_you_mean

                raise ValueError(f"allow: unknown anomaly kind {kind!r}{did_you_mean(kind, KINDS)}"
                                 f"; kinds are {', '.join(KINDS)} or all")
        if self.drift_threshold <= 0:
            raise ValueError(f"drift_threshold must be > 0. Received: {self.drift_threshold}")


def external_inputs(config: Config, spec_dir: Path | None) -> list[Path]:
    """A curated schema is read from outside the run: editing it must rerun validate (cache key)."""
    if config.schema_path is None:
        return []
    p = config.schema_path.expanduser()
    return [p if p.is_absolute() or spec_dir is None else (spec_dir / p).resolve()]


def run(ctx: StageContext, config: Config) -> None:
    from baton.pipeline.dataplane.statistics.stats import SCHEMA_FILE, load_statistics
    from baton.pipeline.dataplane.statistics.validation import check

    statistics = load_statistics(ctx.inputs["statistics"])
    path = ctx.resolve(config.schema_path) if config.schema_path else ctx.inputs["schema"]
    path = path / SCHEMA_FILE if path.is_dir() else path
    if not path.is_file():
        raise StageError(f"validate.schema_path: no schema at {path}")
    schema = json.loads(path.read_text())
    if config.splits:
        missing = [s for s in config.splits if s not in statistics["splits"]]
        if missing:
            raise StageError(f"validate.splits: {missing} not in the statistics "
                             f"(splits: {sorted(statistics['splits'])})")
        statistics = {**statistics, "splits": {s: statistics["splits"][s] for s in config.splits}}
    anomalies = check(statistics, schema, drift_threshold=config.drift_threshold,
                      max_unseen_fraction=config.max_unseen_fraction,
                      range_tolerance=config.range_tolerance,
                      curated=config.schema_path is not None)
    allowed = set(config.allow)
    blocking = [a for a in anomalies if a.severity == "error" and "all" not in allowed
                and a.kind not in allowed]
    out = ctx.output("anomalies")
    report = {"ok": not blocking, "schema": str(path), "allowed": sorted(allowed),
              "anomalies": [dataclasses.asdict(a) | {"allowed": a not in blocking}
                            for a in anomalies]}
    (out / "anomalies.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "anomalies.txt").write_text("\n".join(str(a) for a in anomalies) + "\n"
                                       if anomalies else "no anomalies\n")
    for a in anomalies:
        ctx.log(("allowed: " if a not in blocking and a.severity == "error" else "") + str(a))
    kinds: dict[str, int] = {}
    for a in anomalies:
        kinds[a.kind] = kinds.get(a.kind, 0) + 1
    # the runner keeps metrics of a failed stage (not its outputs): summarise here too
    ctx.record(anomalies=len(anomalies), blocking=len(blocking),
               warnings=sum(a.severity == "warning" for a in anomalies),
               kinds=",".join(f"{k}:{n}" for k, n in sorted(kinds.items()))[:200])
    if blocking:
        shown = "; ".join(str(a) for a in blocking[:5])
        more = f" (+{len(blocking) - 5} more)" if len(blocking) > 5 else ""
        raise StageError(f"validate: {len(blocking)} anomalies not allowed: {shown}{more}. "
                         f"Allow kinds with validate.allow, e.g. allow: [{blocking[0].kind}]")
