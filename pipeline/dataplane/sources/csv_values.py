"""CSV values as typed numpy columns, checked per batch, bad rows quarantined with their reason.

The other half of reading CSV, split from sources.csv_source (the framing: files, header, lines,
quotes) because it is a concept of its own: what a raw field becomes. Numeric columns are
converted with one vectorised cast, and only when that cast fails do we look value by value for
the culprits (clean data never pays the slow path). A literal NaN (not listed in `na_values`)
stays a NaN, distinct from a missing value. Each rejected row is recorded with its file and
reason. `infer_types` decides a column's type from a sample of the first file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from baton.pipeline.dataplane.sources.csv_source import Quarantine, iter_raw

SAMPLE_ROWS = 2000


def _to_float(values: Sequence[bytes], na: set[bytes]
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(float32 values with NaN for NA, bad mask, NaN-in-the-data mask), value by value."""
    out = np.empty(len(values), np.float32)
    bad = np.zeros(len(values), bool)
    nan = np.zeros(len(values), bool)
    for i, v in enumerate(values):
        s = v.strip()
        if s in na:
            out[i] = np.nan
            continue
        try:
            out[i] = float(s)
            nan[i] = out[i] != out[i]
        except ValueError:
            bad[i] = True
            out[i] = np.nan
    return out, bad, nan


def numeric_column(arr: Any, na: set[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """A binary arrow column as float32, a mask of unparseable values and one of literal NaNs.

    NA values (and unparseable ones) become NaN; so does a literal NaN that is not an NA value,
    which the third result marks (None when the column has none) so that it stays a NaN, not
    a missing value, in the examples.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        s = pc.utf8_trim_whitespace(arr.cast(pa.string()))
        mask = pc.is_in(s, value_set=pa.array([v.decode() for v in na], pa.string()))
        cleaned = pc.if_else(mask, pa.scalar(None, pa.string()), s)
        vals = pc.cast(cleaned, pa.float32()).to_numpy(zero_copy_only=False)
        vals = np.asarray(vals, np.float32)
        isnan = np.isnan(vals)
        nan = None
        if isnan.any():
            nan = isnan & ~np.asarray(mask.to_numpy(zero_copy_only=False), bool)
            nan = nan if nan.any() else None
        return vals, np.zeros(len(arr), bool), nan
    except (pa.ArrowInvalid, UnicodeDecodeError):
        vals, bad, nan = _to_float(arr.to_pylist(), na)
        return vals, bad, nan if nan.any() else None


def string_column(arr: Any, na: set[bytes]) -> tuple[Any, np.ndarray]:
    """A binary arrow column as `Strings` ("" for NA) and a mask of non-UTF-8 values.

    Values are stripped of ASCII whitespace (as `bytes.strip`), then matched against `na`. On
    valid UTF-8 (the usual case) this runs in Arrow without a Python object per row; otherwise
    value by value, to find the culprits.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    from baton.pipeline.dataplane.records.example_codec import Strings

    try:
        s = pc.ascii_trim_whitespace(arr.cast(pa.string()))
    except (pa.ArrowInvalid, UnicodeDecodeError):
        return _string_column_slow(arr, na)
    if na:
        mask = pc.is_in(s, value_set=pa.array([v.decode("utf-8", "replace") for v in na],
                                              pa.string()))
        if pc.any(mask).as_py():
            s = pc.if_else(mask, pa.scalar("", pa.string()), s)
    return Strings.from_arrow(s), np.zeros(len(arr), bool)


def _string_column_slow(arr: Any, na: set[bytes]) -> tuple[Any, np.ndarray]:
    from baton.pipeline.dataplane.records.example_codec import Strings

    values = arr.to_pylist()
    out = np.empty(len(values), object)
    bad = np.zeros(len(values), bool)
    for i, v in enumerate(values):
        s = v.strip()
        if s in na:
            out[i] = ""
            continue
        try:
            out[i] = s.decode("utf-8")
        except UnicodeDecodeError:
            bad[i] = True
            out[i] = ""
    return Strings.from_objects(out), bad


def infer_types(path: Path, header: list[str], na: set[bytes]) -> dict[str, str]:
    """float32 for columns whose sampled non-NA values mostly parse as numbers, else string."""
    batches = iter_raw(path, header, None, block_rows=SAMPLE_ROWS)
    try:
        batch = next(batches)
    except StopIteration:
        return dict.fromkeys(header, "string")
    finally:
        batches.close()
    types = {}
    for name in header:
        vals = [v.strip() for v in batch.column(name).to_pylist()[:SAMPLE_ROWS]]
        vals = [v for v in vals if v not in na]
        _, bad, _ = _to_float(vals, set())
        types[name] = "float32" if vals and bad.mean() <= 0.1 else "string"
    return types


def decode_batch(batch: Any, path: Path, types: Mapping[str, str], na: set[bytes],
                 quarantine: Quarantine) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Typed numpy columns of one raw batch, and the rows of each numeric column that hold a
    literal NaN (only columns that have one). Rows with any bad value are quarantined and
    removed from both. String columns come back as `example_codec.Strings`."""
    import pyarrow as pa

    cols: dict[str, np.ndarray] = {}
    nans: dict[str, np.ndarray] = {}
    bad_any = np.zeros(batch.num_rows, bool)
    reasons: dict[int, str] = {}
    for name, dtype in types.items():
        arr = batch.column(name)
        if dtype == "float32" and arr.type == pa.float32():  # converted by the parser
            values = np.asarray(arr.to_numpy(zero_copy_only=False), np.float32)  # null -> NaN
            bad = np.zeros(len(arr), bool)
            if arr.null_count < len(arr):
                lit = np.isnan(values)
                if arr.null_count:
                    lit &= np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), bool)
                if lit.any():
                    nans[name] = lit
        elif dtype == "float32":
            values, bad, nan = numeric_column(arr, na)
            if nan is not None:
                nans[name] = nan
        else:
            values, bad = string_column(arr, na)
        cols[name] = values
        if bad.any():
            raw = arr.to_pylist()
            for i in np.nonzero(bad & ~bad_any)[0].tolist():
                what = "not a number" if dtype == "float32" else "not valid UTF-8"
                reasons[i] = f"column {name!r}: {what}: {raw[i][:60]!r}"
            bad_any |= bad
    if bad_any.any():
        for i, reason in sorted(reasons.items()):
            fields = [batch.column(n)[i].as_py().decode("utf-8", "backslashreplace")
                      for n in types]
            kind = "not_a_number" if "not a number" in reason else "encoding"
            quarantine.add(str(path), reason, ",".join(fields), kind)
        keep = ~bad_any
        cols = {k: v[keep] for k, v in cols.items()}
        nans = {k: v[keep] for k, v in nans.items() if v[keep].any()}
    return cols, nans
