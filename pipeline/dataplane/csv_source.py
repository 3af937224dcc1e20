"""CSV files as columnar batches, with bad rows quarantined instead of crashing the stage.

pyarrow's CSV reader does the splitting in C++ (every column read as raw bytes, so a
non-UTF-8 byte cannot abort the file); rows with the wrong number of fields arrive through
`invalid_row_handler`. Values are then checked per batch: numeric columns are converted with
one vectorised cast, and only when that cast fails do we look value by value for the culprits
(clean data never pays the slow path). Each rejected row is recorded with its file and reason.
"""

from __future__ import annotations

import glob as globlib
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import StageError

SAMPLE_ROWS = 2000


def expand_glob(pattern: str, base: Path | None) -> list[Path]:
    """Files matching `pattern` (relative to `base`), sorted; [] when nothing matches."""
    p = Path(pattern).expanduser()
    if not p.is_absolute() and base is not None:
        p = base / p
    return sorted(Path(f) for f in globlib.glob(str(p), recursive=True) if Path(f).is_file())


class Quarantine:
    """Rejected rows: counted by reason, the first `keep` written to `rows.jsonl` with the text."""

    def __init__(self, directory: Path, keep: int = 10_000) -> None:
        self.directory = directory
        self.count = 0
        self.by_reason: dict[str, int] = {}
        self._keep = keep
        self._fh: Any = None
        self.examples: list[str] = []

    def add(self, file: str, reason: str, text: str, kind: str) -> None:
        self.count += 1
        self.by_reason[kind] = self.by_reason.get(kind, 0) + 1
        if len(self.examples) < 3:
            self.examples.append(f"{Path(file).name}: {reason}")
        if self.count > self._keep:
            return
        if self._fh is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.directory / "rows.jsonl", "w", encoding="utf-8")  # noqa: SIM115
        self._fh.write(json.dumps({"file": file, "reason": reason, "text": text[:2000]}) + "\n")

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()


def read_header(path: Path) -> list[str] | None:
    """The header fields of a CSV file, or None for an empty file."""
    with open(path, "rb") as f:
        line = f.readline()
    if not line.strip():
        return None
    import csv

    text = line.decode("utf-8", "replace").rstrip("\r\n")
    return [h.strip() for h in next(csv.reader([text]))]


def _to_float(values: Sequence[bytes], na: set[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """(float32 values with NaN for NA, bad mask) checking each value (the slow path)."""
    out = np.empty(len(values), np.float32)
    bad = np.zeros(len(values), bool)
    for i, v in enumerate(values):
        s = v.strip()
        if s in na:
            out[i] = np.nan
            continue
        try:
            out[i] = float(s)
        except ValueError:
            bad[i] = True
            out[i] = np.nan
    return out, bad


def numeric_column(arr: Any, na: set[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """A binary arrow column as float32 (NaN for NA) and a mask of unparseable values."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        s = pc.utf8_trim_whitespace(arr.cast(pa.string()))
        mask = pc.is_in(s, value_set=pa.array([v.decode() for v in na], pa.string()))
        cleaned = pc.if_else(mask, pa.scalar(None, pa.string()), s)
        vals = pc.cast(cleaned, pa.float32()).to_numpy(zero_copy_only=False)
        return np.asarray(vals, np.float32), np.zeros(len(arr), bool)
    except (pa.ArrowInvalid, UnicodeDecodeError):
        return _to_float(arr.to_pylist(), na)


def string_column(arr: Any, na: set[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """A binary arrow column as str objects ("" for NA) and a mask of non-UTF-8 values."""
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
    return out, bad


def infer_types(path: Path, header: list[str], na: set[bytes]) -> dict[str, str]:
    """float32 for columns whose sampled non-NA values mostly parse as numbers, else string."""
    batches = iter_raw(path, header, None, block_rows=SAMPLE_ROWS)
    try:
        batch = next(batches)
    except StopIteration:
        return dict.fromkeys(header, "string")
    types = {}
    for name in header:
        vals = [v.strip() for v in batch.column(name).to_pylist()[:SAMPLE_ROWS]]
        vals = [v for v in vals if v not in na]
        _, bad = _to_float(vals, set())
        types[name] = "float32" if vals and bad.mean() <= 0.1 else "string"
    return types


def iter_raw(path: Path, header: list[str], quarantine: Quarantine | None,
             block_rows: int = 65_536) -> Iterator[Any]:
    """Record batches of raw bytes columns; rows with a wrong field count go to `quarantine`."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    def on_invalid(row: Any) -> str:
        if quarantine is not None:
            quarantine.add(str(path), f"expected {row.expected_columns} fields, found "
                           f"{row.actual_columns}", row.text, "field_count")
        return "skip"

    reader = pcsv.open_csv(
        str(path),
        read_options=pcsv.ReadOptions(block_size=max(1 << 16, block_rows * 64), use_threads=True),
        parse_options=pcsv.ParseOptions(invalid_row_handler=on_invalid),
        convert_options=pcsv.ConvertOptions(
            column_types=dict.fromkeys(header, pa.binary()), strings_can_be_null=False,
            quoted_strings_can_be_null=False),
    )
    try:
        yield from reader
    except pa.ArrowInvalid as exc:
        raise StageError(f"CSV file {path}: cannot be parsed ({str(exc)[:300]})") from None


def decode_batch(batch: Any, path: Path, types: Mapping[str, str], na: set[bytes],
                 quarantine: Quarantine) -> dict[str, np.ndarray]:
    """Typed numpy columns of one raw batch; rows with any bad value are quarantined and removed."""
    cols: dict[str, np.ndarray] = {}
    bad_any = np.zeros(batch.num_rows, bool)
    reasons: dict[int, str] = {}
    for name, dtype in types.items():
        arr = batch.column(name)
        values, bad = (numeric_column if dtype == "float32" else string_column)(arr, na)
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
    return cols
