"""Read a TFDS dataset (catalog name or Baton builder) as columnar numpy batches.

Only features that fit tf.Example columns are read: scalars (numbers, bools, text, class
labels), short fixed-length numeric vectors (iris' `features` [4] becomes `features_0..3`) and
fixed-shape images (`tfds.features.Image`, e.g. mnist's 28x28x1 `image` becomes one tensor
column `image` of shape (28, 28, 1), each pixel a float32 in [0, 1]: uint8 / 255, uint16 /
65535, float images as stored). An image without a fixed shape (or over `max_image_pixels`
values, when that limit is set), and anything else (sequences, video, nested features) is
refused with a message naming the feature, because a silently dropped feature is worse than a
clear error.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from baton.errors import StageError
from baton.pipeline.dataplane.records.schema_file import Column

MAX_VECTOR = 64
BATCH_VALUES = 1 << 23  # pixel values per batch read from TFDS (32 MB of float32)


def open_builder(name: str, data_dir: Path, *, download: bool) -> Any:
    """`tfds.builder(name, data_dir)`, prepared; StageError naming the dataset and directory."""
    import tensorflow_datasets as tfds

    import baton.pipeline.datasets.penguins
    import baton.pipeline.datasets.synthetic_tfds  # noqa: F401 - registers baton_* with TFDS

    try:
        builder = tfds.builder(name, data_dir=str(data_dir))
    except Exception as exc:  # DatasetNotFoundError and friends: message only
        raise StageError(
            f"TFDS dataset {name!r}: not found in the catalog nor in data_dir {data_dir} "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
        ) from None
    if builder.is_prepared():
        return builder
    where = Path(builder.data_dir)
    if not download:
        raise StageError(
            f"TFDS dataset {name!r} is not prepared in data_dir {data_dir} (looked in {where}) "
            "and download is disabled; prepare it there first (tfds build) or set download: true"
        )
    local = type(builder).__module__.startswith("baton.pipeline.datasets")  # generated offline
    probe = "" if local else network_problem()
    if probe:
        raise StageError(
            f"TFDS dataset {name!r} is not prepared in data_dir {data_dir} (looked in {where}) "
            f"and the network is unreachable ({probe}); prepare it there on a machine with "
            "network access and copy the directory")
    try:
        builder.download_and_prepare()
    except Exception as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise StageError(
            f"TFDS dataset {name!r} is not prepared in data_dir {data_dir} and could not be "
            f"downloaded (is the network reachable?): {first[:300]}"
        ) from None
    return builder


def network_problem(host: str = "storage.googleapis.com", timeout: float = 3.0) -> str:
    """"" when `host` accepts a connection, else why not.

    TFDS retries unreachable downloads for minutes; a three-second probe first lets an
    offline run fail at once with a message naming the dataset and directory.
    """
    import socket

    try:
        socket.create_connection((host, 443), timeout=timeout).close()
    except OSError as exc:
        return f"cannot connect to {host}: {exc}"
    return ""


def tabular_columns(
    builder: Any, max_image_pixels: int | None = None
) -> tuple[list[Column], dict[str, Any]]:
    """Columns of a builder's features and the per-feature decoders used by `iter_batches`.

    Image features become tensor columns of shape (H, W, C); `images(decoders)` gives them.
    """
    import tensorflow_datasets as tfds

    columns: list[Column] = []
    decoders: dict[str, Any] = {}
    for name, feat in builder.info.features.items():
        shape = tuple(getattr(feat, "shape", ()) or ())
        dtype = np.dtype(getattr(feat, "np_dtype", np.float32))
        if isinstance(feat, tfds.features.Image):
            hwc = _image_shape(builder, name, shape, max_image_pixels)
            columns.append(Column(name, "float32", hwc))
            scale = 1.0 / float(np.iinfo(dtype).max) if dtype.kind in "ui" else 1.0
            decoders[name] = ("image", (hwc, scale))
        elif isinstance(feat, tfds.features.ClassLabel):
            names = np.array(feat.names, dtype=object)
            columns.append(Column(name, "string"))
            decoders[name] = ("classlabel", names)
        elif isinstance(feat, tfds.features.Text) or (shape == () and dtype.kind in "SUO"):
            columns.append(Column(name, "string"))
            decoders[name] = ("text", None)
        elif shape == () and dtype.kind in "fiub":
            columns.append(Column(name, "float32"))
            decoders[name] = ("number", None)
        elif len(shape) == 1 and shape[0] and shape[0] <= MAX_VECTOR and dtype.kind in "fiub":
            columns.extend(Column(f"{name}_{i}", "float32") for i in range(shape[0]))
            decoders[name] = ("vector", shape[0])
        else:
            raise StageError(
                f"TFDS feature {name!r} of {builder.name!r} is not tabular "
                f"({type(feat).__name__}, shape {shape}, dtype {dtype}); ingest supports scalars, "
                f"numeric vectors up to {MAX_VECTOR} long and fixed-shape images "
                f"(tfds.features.Image)"
            )
    return columns, decoders


def images(decoders: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Image feature name -> (height, width, channels), from `tabular_columns`' decoders."""
    return {name: arg[0] for name, (kind, arg) in decoders.items() if kind == "image"}


def _image_shape(builder: Any, name: str, shape: tuple, max_pixels: int | None
                 ) -> tuple[int, ...]:
    """The fixed (H, W, C) of an image feature, or StageError naming it and its shape."""
    if len(shape) != 3 or any(d is None or d < 1 for d in shape):
        raise StageError(
            f"TFDS image feature {name!r} of {builder.name!r} has no fixed shape (shape "
            f"{shape}); ingest needs fixed-size images (one tensor of a fixed shape per "
            f"example), e.g. a resized variant of the dataset"
        )
    hwc = tuple(int(d) for d in shape)
    n = int(np.prod(hwc))
    if max_pixels is not None and n > max_pixels:
        raise StageError(
            f"TFDS image feature {name!r} of {builder.name!r} has shape {hwc} = {n} pixel "
            f"values, over max_image_pixels={max_pixels}; raise or unset ingest's "
            f"max_image_pixels, or use a smaller-image variant"
        )
    return hwc


def iter_batches(
    builder: Any, split: str, decoders: dict[str, Any], batch_rows: int
) -> Iterator[dict[str, np.ndarray]]:
    """Columnar batches of one TFDS split (strings as str objects, numbers as float32).

    `split` may use TFDS slicing, e.g. "train[:80%]" or "train+test".
    """
    import re

    import tensorflow_datasets as tfds

    bases = [re.split(r"[\[(]", part.strip())[0] for part in split.split("+")]
    if any(b not in builder.info.splits for b in bases):
        raise StageError(
            f"TFDS dataset {builder.name!r} has no split {split!r}; "
            f"its splits are {sorted(builder.info.splits)}"
        )
    pixels = sum(int(np.prod(arg[0])) for kind, arg in decoders.values() if kind == "image")
    if pixels:  # a batch of images stays tens of MB
        batch_rows = max(1, min(batch_rows, BATCH_VALUES // pixels))
    ds = builder.as_dataset(split=split, shuffle_files=False).batch(batch_rows)
    for batch in tfds.as_numpy(ds):
        out: dict[str, np.ndarray] = {}
        for name, (kind, arg) in decoders.items():
            values = batch[name]
            if kind == "classlabel":
                out[name] = arg[values]
            elif kind == "text":
                out[name] = np.array([v.decode("utf-8", "replace") for v in values], object)
            elif kind == "number":
                out[name] = values.astype(np.float32)
            elif kind == "image":
                hwc, scale = arg
                image = values.reshape(len(values), *hwc).astype(np.float32)  # [B, H, W, C]
                if scale != 1.0:
                    image *= np.float32(scale)
                out[name] = image
            else:
                for i in range(arg):
                    out[f"{name}_{i}"] = values[:, i].astype(np.float32)
        yield out
