"""Mergeable per-column summaries: the analyzers behind both `statistics` and `transform`.

Each accumulator is updated with a whole numpy column of one batch and merged with others
(Beam's combiner contract: any grouping, any order). Memory is bounded by design: numeric
columns keep moments, extremes and a fixed-size weighted quantile sketch; string columns keep
one count per distinct value (bounded by the vocabulary, not the row count). A tensor column
(an image) gets a `TensorAcc`: rows present or missing, and the numeric summaries over all of
its values.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from baton.graphs.quantile_sketch import SKETCH_SIZE, QuantileSketch  # noqa: F401 - one sketch

SKETCH_SAMPLE = 1 << 18  # values of a tensor column's batch that reach its quantile sketch


class NumericAcc:
    """count (finite values), missing, nan, inf, mean/M2 (Chan's merge), min, max, sketch.

    With `keep_nan` (values from `reader.read_batches(..., keep_nan=True)`) `missing` counts
    values equal to `reader.ABSENT` and `nan` the NaNs of the data; otherwise NaN is missing.
    """

    def __init__(self, sketch: bool = True) -> None:
        self.count = 0
        self.missing = 0
        self.nan = 0
        self.inf = 0
        self.mean = 0.0
        self.m2 = 0.0
        self.min = np.inf
        self.max = -np.inf
        self.zeros = 0
        self.sketch = QuantileSketch() if sketch else None  # quantiles cost a sort per batch

    def add(self, x: np.ndarray, keep_nan: bool = False) -> None:
        from baton.pipeline.dataplane.records.reader import ABSENT

        nan = np.isnan(x)
        if keep_nan:
            absent = x == ABSENT
            if absent.any():
                self.missing += int(absent.sum())
                x, nan = x[~absent], nan[~absent]
            self.nan += int(nan.sum())
        else:
            self.missing += int(nan.sum())
        finite = x[np.isfinite(x)]
        self.inf += int(len(x) - nan.sum() - len(finite))
        if not len(finite):
            return
        f64 = finite.astype(np.float64)
        n = len(f64)
        mean = float(f64.mean())
        m2 = float(((f64 - mean) ** 2).sum())
        self._combine(n, mean, m2)
        self.min = min(self.min, float(f64.min()))
        self.max = max(self.max, float(f64.max()))
        self.zeros += int((f64 == 0).sum())
        if self.sketch is not None:
            self.sketch.add(f64)

    def _combine(self, n: int, mean: float, m2: float) -> None:
        total = self.count + n
        delta = mean - self.mean
        self.mean += delta * n / total
        self.m2 += m2 + delta * delta * self.count * n / total
        self.count = total

    def merge(self, other: NumericAcc) -> NumericAcc:
        if other.count:
            self._combine(other.count, other.mean, other.m2)
        self.missing += other.missing
        self.nan += other.nan
        self.inf += other.inf
        self.zeros += other.zeros
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)
        if self.sketch is not None and other.sketch is not None:
            self.sketch.merge(other.sketch)
        return self

    @property
    def var(self) -> float:
        return self.m2 / self.count if self.count else 0.0


class TensorAcc(NumericAcc):
    """A tensor column: `missing` and `present` count rows (a row is missing when all of its
    values are); count, mean, std, min, max, nan, inf, zeros and the sketch are over the values
    of the present rows. The sketch sees at most SKETCH_SAMPLE values per batch (evenly
    strided), so a batch of images costs one sort of a bounded sample.
    """

    def __init__(self, shape: tuple[int, ...], sketch: bool = True) -> None:
        super().__init__(sketch)
        self.shape = tuple(shape)
        self.present = 0

    def add(self, x: np.ndarray, keep_nan: bool = False) -> None:
        from baton.pipeline.dataplane.records.reader import ABSENT

        x = x.reshape(len(x), -1)
        absent = (x == ABSENT).all(axis=1) if keep_nan else np.isnan(x).all(axis=1)
        self.missing += int(absent.sum())
        values = x[~absent].reshape(-1)
        self.present += int((~absent).sum())
        missing, sketch = self.missing, self.sketch
        if sketch is not None and len(values) > SKETCH_SAMPLE:
            self.sketch = None  # the sample goes to the sketch below
        super().add(values, keep_nan=False)  # NaN values of present rows: counted in `nan`
        self.nan += self.missing - missing
        self.missing = missing
        self.sketch = sketch
        if sketch is not None and len(values) > SKETCH_SAMPLE:
            sample = values[:: -(-len(values) // SKETCH_SAMPLE)]
            sketch.add(sample[np.isfinite(sample)].astype(np.float64))

    def merge(self, other: NumericAcc) -> NumericAcc:
        super().merge(other)
        self.present += getattr(other, "present", 0)
        return self


class StringAcc:
    """missing ("") and a count per distinct value."""

    def __init__(self) -> None:
        self.missing = 0
        self.counts: dict[bytes, int] = {}

    def add_dictionary(self, values: list[bytes], indices: np.ndarray) -> None:
        counts = np.bincount(indices, minlength=len(values))
        for v, c in zip(values, counts.tolist(), strict=True):
            if not c:
                continue
            if v == b"":
                self.missing += c
            else:
                self.counts[v] = self.counts.get(v, 0) + c

    def merge(self, other: StringAcc) -> StringAcc:
        self.missing += other.missing
        for v, c in other.counts.items():
            self.counts[v] = self.counts.get(v, 0) + c
        return self

    @property
    def count(self) -> int:
        return sum(self.counts.values())

    def top(self, k: int | None = None, min_frequency: int = 1) -> list[tuple[bytes, int]]:
        """Values by descending count, ties by value (deterministic), at least `min_frequency`."""
        items = sorted(((v, c) for v, c in self.counts.items() if c >= min_frequency),
                       key=lambda vc: (-vc[1], vc[0]))
        return items if k is None else items[:k]


def new_accumulators(columns: list[Any], sketch: Any = None) -> dict[str, Any]:
    """Fresh accumulators; `sketch` (names) limits quantile sketches to those columns."""
    return {c.name: TensorAcc(c.shape, sketch is None or c.name in sketch) if c.shape
            else NumericAcc(sketch is None or c.name in sketch) if c.is_numeric
            else StringAcc() for c in columns}


def update(accs: dict[str, Any], batch: Any, keep_nan: bool = False) -> None:
    """Add one pyarrow RecordBatch (from `reader.read_batches`, read with the same `keep_nan`)."""
    from baton.pipeline.dataplane.records.reader import (
        dictionary_parts,
        numeric_values,
        tensor_values,
    )

    for name, acc in accs.items():
        col = batch.column(name)
        if isinstance(acc, TensorAcc):
            acc.add(tensor_values(col), keep_nan)
        elif isinstance(acc, NumericAcc):
            acc.add(numeric_values(col), keep_nan)
        else:
            acc.add_dictionary(*dictionary_parts(col))


def merge_all(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Merge a list of accumulator dicts (same keys) into the first; {} for no parts."""
    if not parts:
        return {}
    out = parts[0]
    for p in parts[1:]:
        for k, acc in p.items():
            if k in out:
                out[k].merge(acc)
            else:
                out[k] = acc
    return out
