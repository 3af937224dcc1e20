"""`schema.json` of the examples artifact: the columns, their dtypes, the label and row counts.

Every reader of the examples artifact (statistics, transform, evaluate, export warmup, edge)
learns the column layout from this one small file instead of sniffing the TFRecords, so the
description of the data lives in exactly one place.

A column may be a fixed-shape tensor (`shape`, e.g. an image (H, W, C): one float32 column
holding H*W*C values per row, a `float_list` of that length, row-major; values in [0, 1] for
images). `images` records which columns are images, with their shape, so the transform can
hand it on to the model. Examples written before tensor columns existed hold an image as H*W*C
scalar columns `image_0 ... image_{H*W*C-1}` (row-major HWC) named by `images` the same way;
they still read, as pixel columns.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from baton.errors import StageError

FILENAME = "schema.json"
Dtype = Literal["float32", "string"]
Task = Literal["classification", "regression"]


@dataclasses.dataclass(frozen=True)
class Column:
    """A raw column: numeric columns are float32 (`float_list`), categorical strings (`bytes_list`)."""

    name: str
    dtype: Dtype
    shape: tuple[int, ...] = ()  # per-row shape of a tensor column; () = one value

    def __post_init__(self) -> None:
        if self.shape and (self.dtype != "float32" or any(int(d) < 1 for d in self.shape)):
            raise StageError(f"column {self.name!r}: a tensor column is float32 with positive "
                             f"dimensions. Received: dtype={self.dtype!r}, shape={self.shape}")

    @property
    def is_numeric(self) -> bool:
        return self.dtype == "float32"

    @property
    def size(self) -> int:
        """Values per row (1 for a scalar column)."""
        return math.prod(self.shape)

    def to_dict(self) -> dict[str, Any]:
        """As in schema.json: `shape` only for tensor columns (scalar ones read as before)."""
        out: dict[str, Any] = {"name": self.name, "dtype": self.dtype}
        if self.shape:
            out["shape"] = list(self.shape)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Column:
        return cls(data["name"], data["dtype"], tuple(int(d) for d in data.get("shape", ())))


def image_columns(name: str, shape: Sequence[int]) -> list[str]:
    """The pixel column names of an image feature: `<name>_<i>`, row-major over (H, W, C)."""
    return [f"{name}_{i}" for i in range(math.prod(shape))]


@dataclasses.dataclass(frozen=True)
class ExamplesSchema:
    """The layout of an examples artifact. `columns` includes the label column."""

    columns: tuple[Column, ...]
    label: str
    task: Task = "classification"
    splits: Mapping[str, int] = dataclasses.field(default_factory=dict)
    source: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    dropped: Mapping[str, int] = dataclasses.field(default_factory=dict)
    # image feature name -> (height, width, channels): the tensor column of that name and
    # shape, or (examples written before tensor columns) the pixel columns `image_columns(...)`
    images: Mapping[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        names = [c.name for c in self.columns]
        if self.label not in names:
            raise StageError(f"label column {self.label!r} is not among the columns {names}")
        if len(set(names)) != len(names):
            raise StageError(f"duplicate column names in {names}")
        if self.column(self.label).shape:
            raise StageError(f"label column {self.label!r} cannot be a tensor. "
                             f"Received: shape={self.column(self.label).shape}")
        numeric = {c.name for c in self.columns
                   if c.is_numeric and c.name != self.label and not c.shape}
        for name, shape in self.images.items():
            if len(shape) != 3 or any(int(d) < 1 for d in shape):
                raise StageError(f"image {name!r}: shape must be (height, width, channels). "
                                 f"Received: {tuple(shape)}")
            tensor = next((c for c in self.columns if c.name == name and c.shape), None)
            if tensor is not None:
                if tensor.shape != tuple(shape):
                    raise StageError(f"image {name!r} of shape {tuple(shape)}: its column has "
                                     f"shape {tensor.shape}")
                continue
            missing = [c for c in image_columns(name, shape) if c not in numeric]
            if missing:
                raise StageError(f"image {name!r} of shape {tuple(shape)}: {len(missing)} pixel "
                                 f"columns are not numeric feature columns, e.g. {missing[0]!r}")

    @property
    def image_pixels(self) -> set[str]:
        """Every pixel column of every image in the pixel-column layout (older examples)."""
        tensors = {c.name for c in self.columns if c.shape}
        return {c for name, shape in self.images.items() if name not in tensors
                for c in image_columns(name, shape)}

    @property
    def features(self) -> list[Column]:
        """Every column except the label."""
        return [c for c in self.columns if c.name != self.label]

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "columns": [c.to_dict() for c in self.columns],
            "label": self.label,
            "task": self.task,
            "splits": dict(self.splits),
            "source": dict(self.source),
            "dropped": dict(self.dropped),
            **({"images": {k: list(v) for k, v in self.images.items()}} if self.images else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ExamplesSchema:
        return cls(
            columns=tuple(Column.from_dict(c) for c in data["columns"]),
            label=data["label"],
            task=data.get("task", "classification"),
            splits=dict(data.get("splits", {})),
            source=dict(data.get("source", {})),
            dropped=dict(data.get("dropped", {})),
            images={k: tuple(int(d) for d in v) for k, v in data.get("images", {}).items()},
        )

    def save(self, directory: str | Path) -> Path:
        path = Path(directory) / FILENAME
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        return path

    @classmethod
    def load(cls, directory: str | Path) -> ExamplesSchema:
        path = Path(directory)
        if path.is_dir():
            path = path / FILENAME
        if not path.is_file():
            raise StageError(f"examples artifact has no {FILENAME}: expected {path}")
        try:
            return cls.from_dict(json.loads(path.read_text()))
        except (KeyError, TypeError, ValueError) as exc:
            raise StageError(f"{path}: not a valid examples schema ({exc})") from None


def shard_files(examples_dir: str | Path, split: str) -> list[Path]:
    """The TFRecord shards of one split, in order; StageError when the split has none."""
    d = Path(examples_dir) / split
    files = sorted(d.glob("*.tfrecord*"))
    if not files:
        raise StageError(f"examples split {split!r} has no TFRecord shards in {d}")
    return files
