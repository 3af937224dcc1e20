"""ingest for `source: csv`: files by glob -> examples, bad rows quarantined and counted.

The column types come from `column_types` or are inferred from the first non-empty file; every
file must have the same header. Empty files are skipped (and counted). The stage fails when no
row survives (every row quarantined or without a label; the message says which) or when
rejected rows exceed `max_bad_fraction` of all rows read; the message names the count, the
fraction and the first reasons.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from baton.errors import StageError
from baton.pipeline.dataplane.records.examples_writer import ExamplesWriter
from baton.pipeline.dataplane.records.schema_file import Column, ExamplesSchema
from baton.pipeline.dataplane.sources import csv_source, csv_values


def ingest(ctx: Any, config: Any, out: Path) -> None:
    files = csv_source.expand_glob(str(config.path), ctx.spec_dir)
    if not files:
        raise StageError(f"ingest.path: no CSV files match {config.path!r} "
                         f"(relative to {ctx.spec_dir})")
    headers = {f: csv_source.read_header(f) for f in files}
    nonempty = [f for f in files if headers[f]]
    empty = [f for f in files if not headers[f]]
    if not nonempty:
        raise StageError(f"ingest: every CSV file matching {config.path!r} is empty "
                         f"({len(files)} files)")
    header: list[str] = headers[nonempty[0]] or []
    for f in nonempty[1:]:
        if headers[f] != header:
            raise StageError(f"ingest: CSV file {f} has header {headers[f]}, "
                             f"but {nonempty[0]} has {header}")
    if len(set(header)) != len(header):
        raise StageError(f"ingest: CSV header has duplicate column names: {header}")
    na = {v.encode() for v in config.na_values}
    types = csv_values.infer_types(nonempty[0], header, na)
    for name, dtype in config.column_types.items():
        if name not in header:
            from baton.configs import did_you_mean

            raise StageError(f"ingest.column_types: no column {name!r}"
                             f"{did_you_mean(name, header)}; CSV columns are {header}")
        types[name] = dtype
    label = config.label or ("label" if "label" in header else None)
    if label is None or label not in header:
        raise StageError(f"ingest.label: set the label column of the CSV "
                         f"(received {config.label!r}); columns are {header}")
    task: Any = config.task or ("regression" if types[label] == "float32" else "classification")
    if task == "classification":
        types[label] = "string"
    types = {k: v for k, v in types.items() if k not in config.exclude or k == label}
    columns = [Column(n, t) for n, t in types.items()]  # type: ignore[arg-type]
    quarantine = csv_source.Quarantine(out / "quarantine")
    writer = ExamplesWriter(out, columns, label, config.splits, config.seed, config.rows_per_shard)
    progress = ctx.progress(None, "rows", "ingest")
    good = 0
    try:
        for f in nonempty:
            for raw in csv_source.iter_raw(f, header, quarantine, config.batch_rows,
                                             types=types, na=na):
                batch, nan = csv_values.decode_batch(raw, f, types, na, quarantine)
                n = len(batch[label])
                if n:
                    writer.write_batch(batch, nan=nan)
                    good += n
                    progress.update(n)
    finally:
        progress.close()
        quarantine.close()
    counts = writer.close()
    total = good + quarantine.count
    fraction = quarantine.count / total if total else 0.0
    if sum(counts.values()) == 0:
        raise StageError(_no_rows_message(total, quarantine, writer.dropped_missing_label, label,
                                          config.na_values, len(nonempty)))
    if fraction > config.max_bad_fraction:
        raise StageError(
            f"ingest: {quarantine.count} of {total} CSV rows rejected ({fraction:.1%}), above "
            f"max_bad_fraction={config.max_bad_fraction}; first: {'; '.join(quarantine.examples)}")
    if quarantine.count:
        ctx.log(f"quarantined {quarantine.count} rows ({fraction:.2%}) -> "
                f"{ctx.final_path('examples') / 'quarantine' / 'rows.jsonl'}")
    dropped = {"missing_label": writer.dropped_missing_label, "quarantined": quarantine.count,
               "empty_files": len(empty), **{f"quarantined_{k}": v
                                             for k, v in quarantine.by_reason.items()}}
    source = {"kind": "csv", "files": [str(f) for f in files]}
    ExamplesSchema(tuple(columns), label, task, counts, source, dropped).save(out)
    ctx.log(f"{sum(counts.values())} rows {counts} from {len(files)} files, dropped {dropped}")
    ctx.record(rows=sum(counts.values()), **{f"rows_{k}": v for k, v in counts.items()},
               quarantined=quarantine.count, empty_files=len(empty),
               dropped_missing_label=writer.dropped_missing_label)


def _no_rows_message(total: int, quarantine: csv_source.Quarantine, no_label: int, label: str,
                     na_values: list[str], files: int) -> str:
    """Why no row survived: all rejected, all without a label, or some of each."""
    where = f"{files} CSV file{'s' if files != 1 else ''}"
    if total == 0:
        return f"ingest: no data rows in {where} (only a header line)"
    head = f"ingest: 0 of {total} rows kept from {where}"
    if no_label == total:
        return (f"{head}: every row lacks label {label!r} (its values are all empty or in "
                f"na_values {na_values}; is label: {label} the right column?)")
    parts = []
    if quarantine.count:
        parts.append(f"{quarantine.count} quarantined ({'; '.join(quarantine.examples)})")
    if no_label:
        parts.append(f"{no_label} lack label {label!r}")
    return f"{head}: {', '.join(parts)}"
