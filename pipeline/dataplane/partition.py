"""Split one examples artifact into per-client examples artifacts: a federated rehearsal.

A federated run on one machine rehearses data that lives in silos: every client gets its own
directory, an examples artifact of the same layout (schema.json, `<split>/part-NNNNN.tfrecord`
and the Arrow copy), and its process reads only that directory. Rows are copied as they are
(the TFRecord records byte for byte, framing included, the Arrow rows with `take`), so nothing
is re-encoded.

How rows go to clients (`Partition`):

- `by: <column>`: one client per distinct value of the column (an island, a hospital), in
  sorted order; a row whose value is missing goes nowhere (counted);
- `dirichlet: <alpha>`: the usual non-IID benchmark split (Hsu et al. 2019): for each label
  class, the clients' shares are drawn from Dirichlet(alpha); small alpha, few classes per
  client. A regression label is cut into 10 quantile bins that play the classes;
- `iid`: each row to a uniformly drawn client.

Train and eval rows are assigned by the same rule (the same shares), so each client evaluates
on data distributed like its own training data. Deterministic for a seed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from baton.errors import StageError
from baton.pipeline.dataplane.records.examples_writer import COLUMNAR, SplitWriter, arrow_schema
from baton.pipeline.dataplane.records.reader import raw_columns, read_batches
from baton.pipeline.dataplane.records.schema_file import ExamplesSchema, shard_files

# the federated stage's `partition:` setting itself: one class for the spec and the split
from baton.strategies.federated_settings import Partition as Partition


def client_names(partition: Partition, schema: ExamplesSchema, examples: Path,
                 clients: int | None) -> list[str]:
    """The clients' names: the column's values for `by`, else client-0..N-1."""
    if partition.by is None:
        if not clients or clients < 1:
            raise StageError(f"partition {partition.describe()} needs clients: <number> >= 1. "
                             f"Received: {clients!r}")
        return [f"client-{i}" for i in range(clients)]
    values = sorted(_distinct(partition.by, schema, examples))
    if clients is not None and clients != len(values):
        raise StageError(f"partition by {partition.by!r} makes one client per value: "
                         f"{len(values)} ({values}); clients is {clients}")
    return [_safe(v) for v in values]


def split(examples: Path, out_dirs: Sequence[Path], partition: Partition,
          rows_per_shard: int = 500_000) -> dict[str, dict[str, int]]:
    """Write each client's examples artifact; returns rows per client per split."""
    import pyarrow as pa

    schema = ExamplesSchema.load(examples)
    names = [d.name for d in out_dirs]
    values = sorted(_distinct(partition.by, schema, examples)) if partition.by else []
    rng = np.random.default_rng(partition.seed)
    shares = _shares(partition, schema, examples, len(out_dirs), rng)
    counts = {n: dict.fromkeys(schema.splits, 0) for n in names}
    unassigned = 0
    for split_name in schema.splits:
        writers = [SplitWriter(d / split_name, rows_per_shard, d / COLUMNAR / split_name,
                               arrow_schema(schema.columns)) for d in out_dirs]
        for shard in shard_files(examples, split_name):
            records = _records(shard)
            start = 0
            for batch in read_batches(shard, schema.columns):
                n = len(batch)
                owner = _owners(partition, schema, batch, values, shares, rng, len(writers))
                for i, w in enumerate(writers):
                    rows = np.flatnonzero(owner == i)
                    if len(rows):
                        w.write(pa.array([records[start + r] for r in rows], pa.large_binary()),
                                batch.take(rows))
                        counts[names[i]][split_name] += len(rows)
                unassigned += int((owner < 0).sum())
                start += n
            if start != len(records):
                raise StageError(f"examples shard {shard}: {len(records)} records but {start} "
                                 "rows in its columnar copy")
        for w in writers:
            w.close()
    for d, client in zip(out_dirs, names, strict=True):
        dataclasses.replace(schema, splits=counts[client],
                            source={**schema.source, "partition": partition.describe(),
                                    "client": client}).save(d)
    empty = [n for n in names if not counts[n].get("train")]
    if empty:
        raise StageError(f"partition {partition.describe()}: clients {empty} got no train rows "
                         f"(rows per client: {counts})")
    if unassigned:
        counts["(missing value)"] = {"rows": unassigned}
    return counts


def _records(shard: Path) -> list[bytes]:
    """Each record of a TFRecord file with its framing (length, CRCs) as it is on disk, so a
    client's shard holds the same bytes: `uint64 length, uint32 crc, data, uint32 crc`."""
    import gzip
    import struct

    raw = shard.read_bytes()
    if shard.name.endswith(".gz") or raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    out, pos = [], 0
    while pos < len(raw):
        (length,) = struct.unpack_from("<Q", raw, pos)
        end = pos + 16 + length
        if end > len(raw):
            raise StageError(f"examples shard {shard}: truncated record at byte {pos}")
        out.append(raw[pos:end])
        pos = end
    return out


def _distinct(column: str, schema: ExamplesSchema, examples: Path) -> set[Any]:
    try:
        col = schema.column(column)
    except KeyError:
        from baton.configs import did_you_mean

        names = [c.name for c in schema.columns]
        raise StageError(f"partition.by: no column {column!r}{did_you_mean(column, names)}; "
                         f"columns are {names}") from None
    if col.shape:
        raise StageError(f"partition.by: column {column!r} is a tensor of shape "
                         f"{list(col.shape)}; partition by a scalar column")
    out: set[Any] = set()
    for split_name in schema.splits:
        for shard in shard_files(examples, split_name):
            for batch in read_batches(shard, [col]):
                out |= set(_column_values(batch, col).tolist())
    out.discard(b"")
    out = {v for v in out if not (isinstance(v, float) and np.isnan(v))}
    if not out:
        raise StageError(f"partition.by: column {column!r} has no values")
    return out


def _column_values(batch: Any, column: Any) -> np.ndarray:
    """One column of a batch in the raw contract (reader.raw_columns)."""
    return raw_columns(batch, [column])[column.name]


def _classes(schema: ExamplesSchema, batch: Any, bins: np.ndarray | None) -> np.ndarray:
    y = _column_values(batch, schema.column(schema.label))
    if bins is not None:
        return np.searchsorted(bins, y.astype(np.float64), side="right")
    return y


def _shares(partition: Partition, schema: ExamplesSchema, examples: Path, clients: int,
            rng: np.random.Generator) -> dict[Any, np.ndarray] | None:
    """Dirichlet: label class -> the clients' shares (cumulative); else None."""
    if partition.dirichlet is None:
        return None
    label = schema.column(schema.label)
    ys = [_column_values(b, label)
          for f in shard_files(examples, "train") for b in read_batches(f, [label])]
    y = np.concatenate(ys) if ys else np.zeros(0)
    bins = None
    if label.is_numeric:
        bins = np.quantile(y[~np.isnan(y)], np.linspace(0, 1, 11)[1:-1])
        classes: Any = range(len(bins) + 1)
    else:
        classes = sorted(set(y.tolist()))
    out: dict[Any, np.ndarray] = {"__bins__": bins}  # type: ignore[dict-item]
    for c in classes:
        out[c] = np.cumsum(rng.dirichlet(np.full(clients, float(partition.dirichlet))))
    return out


def _owners(partition: Partition, schema: ExamplesSchema, batch: Any, values: list[Any],
            shares: dict[Any, np.ndarray] | None, rng: np.random.Generator,
            clients: int) -> np.ndarray:
    """The client index of every row of the batch (-1: none)."""
    n = len(batch)
    if partition.by is not None:
        col = schema.column(partition.by)
        v = _column_values(batch, col)
        index = {val: i for i, val in enumerate(values)}
        return np.array([index.get(x, -1) for x in v.tolist()], np.int64)
    if shares is None:  # iid
        return rng.integers(0, clients, n)
    bins = shares["__bins__"]
    classes = _classes(schema, batch, bins)
    draw = rng.random(n)
    owner = np.full(n, -1, np.int64)
    for i, c in enumerate(classes.tolist()):
        cuts = shares.get(c)
        if cuts is not None:
            owner[i] = min(int(np.searchsorted(cuts, draw[i], side="right")), len(cuts) - 1)
    return owner


def _safe(value: Any) -> str:
    """A client name from a column value: a directory name and a DNS label's characters."""
    import re

    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else (
        f"{value:g}" if isinstance(value, float) else str(value))
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-") or "client"
