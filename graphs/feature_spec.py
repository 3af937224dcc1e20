"""The feature spec: what the transform produces and the model consumes, as one typed object.

Written by the transform stage as `feature_spec.json` beside the transform graph, read by model
builders, the input pipeline, evaluation and export. Keeping it typed (rather than a dict passed
around) is what lets a model builder refuse a feature it cannot handle with a clear message.

A feature is what tf.Transform's transformed feature spec says of an output (a
FixedLenFeature of any shape, a RaggedFeature, a VarLenFeature or SparseFeature; float32, int64
or string), plus the id range of ids: `Feature.kind`, `encoding`, `shape`, `vocab_size` and
`min_id`. A dense feature may be a fixed-shape tensor: `shape` is its per-example shape (`()`
for a scalar, `(D,)` for a vector, `(H, W, C)` for an image), so the model input, the input
pipeline and the serving signature take it as one `[B, *shape]` tensor; a ragged or sparse
feature reaches a model as a `tf.RaggedTensor` or `tf.SparseTensor`. `images` names the features that are
images, with their (height, width, channels): a tensor feature of that shape (written since
tensor features exist), or, in feature specs written before, `H*W*C` scalar pixel features
`<name>_0 ... <name>_{H*W*C-1}` (row-major HWC), which still load and still build the CNN.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

Kind = Literal["numeric", "categorical", "integer", "string"]
Encoding = Literal["dense", "ragged", "sparse"]
Task = Literal["classification", "regression"]
FILENAME = "feature_spec.json"


@dataclasses.dataclass(frozen=True)
class RawFeature:
    """A column as it arrives from data or a serving request (before the transform)."""

    name: str
    dtype: Literal["float32", "int64", "string"]
    shape: tuple[int, ...] = ()  # per-example shape; () = a scalar

    def __post_init__(self) -> None:
        _check_shape(self.name, self.shape)
        if self.shape and self.dtype == "string":
            raise ValueError(f"raw feature {self.name!r}: tensor features are numeric. "
                             f"Received: dtype='string', shape={self.shape}")


@dataclasses.dataclass(frozen=True)
class Feature:
    """A transformed feature as the model sees it: what tf.Transform's transformed feature
    spec says of an output, plus its id range.

    kind: numeric (float32), categorical (int64 ids in [min_id, min_id + vocab_size): a
    vocabulary, buckets or hashes; out-of-vocabulary and missing values mapped inside that
    range unless the transform gave them a default such as -1, then min_id is it), integer
    (int64 with no known range: an analyzer's value, a count, ids padded by hand), string.
    encoding: dense (`shape` its per-example shape, every dimension known: `()` a scalar, `(D,)`
    a vector, `(H, W, C)` an image), ragged (`shape` with None for its ragged dimensions, e.g.
    `(None,)` for tokens), sparse (`shape` its per-example dense shape, None where unknown;
    `(None,)` is tf.Transform's VarLenFeature).
    """

    name: str
    kind: Kind
    vocab_size: int = 0
    shape: tuple[int | None, ...] = ()
    encoding: Encoding = "dense"
    min_id: int = 0

    def __post_init__(self) -> None:
        if self.encoding not in ("dense", "ragged", "sparse"):
            raise ValueError(f"feature {self.name!r}: encoding must be dense, ragged or sparse. "
                             f"Received: encoding={self.encoding!r}")
        _check_shape(self.name, self.shape, unknown=self.encoding != "dense")
        if self.kind not in ("numeric", "categorical", "integer", "string"):
            raise ValueError(f"feature {self.name!r}: kind must be numeric, categorical, integer "
                             f"or string. Received: kind={self.kind!r}")
        if self.kind == "categorical" and self.vocab_size < 1:
            raise ValueError(f"categorical feature {self.name!r} needs vocab_size >= 1. "
                             f"Received: vocab_size={self.vocab_size}")

    @property
    def dtype(self) -> str:
        return {"numeric": "float32", "categorical": "int64", "integer": "int64",
                "string": "string"}[self.kind]

    @property
    def dense(self) -> bool:
        return self.encoding == "dense"

    @property
    def size(self) -> int:
        """Values per example (1 for a scalar) of a dense feature."""
        return math.prod(d or 0 for d in self.shape)


@dataclasses.dataclass(frozen=True)
class Label:
    """The target. Classification labels are ids into `vocabulary` (raw strings or ints)."""

    name: str
    task: Task = "classification"
    vocabulary: tuple[str, ...] = ()

    @property
    def num_classes(self) -> int:
        return len(self.vocabulary) if self.task == "classification" else 1


@dataclasses.dataclass(frozen=True)
class Image:
    """An image among the features, shaped (H, W, C): the tensor feature `name` of that shape,
    or (feature specs written before tensor features) the scalar numeric features `pixels`."""

    name: str
    shape: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.shape) != 3 or any(int(d) < 1 for d in self.shape):
            raise ValueError(f"image {self.name!r}: shape must be (height, width, channels). "
                             f"Received: shape={self.shape}")

    @property
    def pixels(self) -> list[str]:
        """The names of its pixel features in the pixel-column layout, row-major over HWC."""
        n = self.shape[0] * self.shape[1] * self.shape[2]
        return [f"{self.name}_{i}" for i in range(n)]


@dataclasses.dataclass(frozen=True)
class FeatureSpec:
    raw_features: tuple[RawFeature, ...]
    features: tuple[Feature, ...]
    label: Label
    images: tuple[Image, ...] = ()

    def __post_init__(self) -> None:
        numeric = {f.name for f in self.features if f.kind == "numeric"}
        for image in self.images:
            tensor = self.tensor(image.name)
            if tensor is not None:
                if tensor.shape != image.shape:
                    raise ValueError(f"image {image.name!r} of shape {image.shape}: its feature "
                                     f"has shape {tensor.shape}")
                continue
            missing = [p for p in image.pixels if p not in numeric]
            if missing:
                raise ValueError(f"image {image.name!r} of shape {image.shape}: {len(missing)} of "
                                 f"{len(image.pixels)} pixels are not numeric features, "
                                 f"e.g. {missing[0]!r}")

    @property
    def numeric(self) -> list[Feature]:
        """The dense float features."""
        return [f for f in self.features if f.kind == "numeric" and f.dense]

    @property
    def categorical(self) -> list[Feature]:
        """The dense id features with a known range."""
        return [f for f in self.features if f.kind == "categorical" and f.dense]

    @property
    def tensors(self) -> list[Feature]:
        """The dense numeric features with a per-example shape (images, vectors)."""
        return [f for f in self.numeric if f.shape]

    def tensor(self, name: str) -> Feature | None:
        """The tensor feature `name`, or None (absent, or a scalar feature)."""
        return next((f for f in self.tensors if f.name == name), None)

    def feature(self, name: str) -> Feature:
        for f in self.features:
            if f.name == name:
                return f
        raise KeyError(f"no feature named {name!r}; features are {[f.name for f in self.features]}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "raw_features": [_asdict(f) for f in self.raw_features],
            "features": [_asdict(f) for f in self.features],
            "label": {**dataclasses.asdict(self.label), "vocabulary": list(self.label.vocabulary)},
            **({"images": [{"name": i.name, "shape": list(i.shape)} for i in self.images]}
               if self.images else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FeatureSpec:
        label = dict(data["label"])
        label["vocabulary"] = tuple(label.get("vocabulary", ()))
        return cls(
            raw_features=tuple(RawFeature(**_shaped(f)) for f in data["raw_features"]),
            features=tuple(Feature(**_shaped(f)) for f in data["features"]),
            label=Label(**label),
            images=tuple(Image(i["name"], tuple(int(d) for d in i["shape"]))
                         for i in data.get("images", ())),
        )

    def save(self, directory: str | Path) -> Path:
        path = Path(directory) / FILENAME
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> FeatureSpec:
        """Load from a feature_spec.json file or a directory that holds one."""
        p = Path(path)
        if p.is_dir():
            p = p / FILENAME
        return cls.from_dict(json.loads(p.read_text()))


def _check_shape(name: str, shape: tuple[int | None, ...], unknown: bool = False) -> None:
    """Positive dimensions; None (unknown) only where `unknown` (ragged and sparse features)."""
    if not isinstance(shape, tuple) or any(
            (d is None and not unknown) or (d is not None and (
                isinstance(d, bool) or not isinstance(d, int) or d < 1)) for d in shape):
        raise ValueError(f"feature {name!r}: shape must be a tuple of positive integers. "
                         f"Received: shape={shape!r}")


def _asdict(feature: RawFeature | Feature) -> dict[str, Any]:
    """A feature as JSON: `shape` only for tensors, `encoding`/`min_id` only when not the
    default, so scalar dense specs read as they always did."""
    out = dataclasses.asdict(feature)
    if out["shape"]:
        out["shape"] = list(out["shape"])
    else:
        del out["shape"]
    if out.get("encoding") == "dense":
        del out["encoding"]
    if out.get("min_id") == 0:
        del out["min_id"]
    return out


def _shaped(data: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(data)
    if "shape" in out:
        out["shape"] = tuple(None if d is None else int(d) for d in out["shape"])
    return out


def slice_rows(value: Any, lo: Any, hi: Any) -> Any:
    """Rows [lo, hi) of a batch's feature: a dense or ragged tensor's slice, a sparse tensor's
    rows (re-based at row 0)."""
    import tensorflow as tf

    if isinstance(value, tf.SparseTensor):
        lo = tf.cast(lo, tf.int64)
        size = tf.concat([[tf.cast(hi, tf.int64) - lo], value.dense_shape[1:]], 0)
        start = tf.concat([[lo], tf.zeros_like(value.dense_shape[1:])], 0)
        return tf.sparse.slice(value, start, size)
    return value[lo:hi]
