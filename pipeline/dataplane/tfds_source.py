"""Read a TFDS dataset (catalog name or Baton builder) as columnar numpy batches.

Only features that fit tf.Example columns are read: scalars (numbers, bools, text, class
labels), short fixed-length numeric vectors (iris' `features` [4] becomes `features_0..3`) and
small fixed-shape images (`tfds.features.Image`, e.g. mnist's 28x28x1 `image` becomes the 784
columns `image_0..image_783`, row-major over (height, width, channels), each pixel a float32 in
[0, 1]: uint8 / 255, uint16 / 65535, float images as stored). An image with more than
`max_image_pixels` values, or without a fixed shape, and anything else (sequences, video,
nested features) is refused with a message naming the feature, because a silently dropped
feature is worse than a clear error.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from baton.errors import StageError
from baton.pipeline.dataplane.schema_file import Column, image_columns

MAX_VECTOR = 64
MAX_IMAGE_PIXELS = 4096  # values per image (H*W*C): cifar10's 32x32x3 = 3072 fits


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
    builder: Any, max_image_pixels: int = MAX_IMAGE_PIXELS
) -> tuple[list[Column], dict[str, Any]]:
    """Columns of a builder's features and the per-feature decoders used by `iter_batches`.

    Image features become `<name>_<i>` pixel columns; `images(decoders)` gives their shapes.
    """
    import tensorflow_datasets as tfds

    columns: list[Column] = []
    decoders: dict[str, Any] = {}
    for name, feat in builder.info.features.items():
        shape = tuple(getattr(feat, "shape", ()) or ())
        dtype = np.dtype(getattr(feat, "np_dtype", np.float32))
        if isinstance(feat, tfds.features.Image):
            hwc = _image_shape(builder, name, shape, max_image_pixels)
            columns.extend(Column(c, "float32") for c in image_columns(name, hwc))
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


def _image_shape(builder: Any, name: str, shape: tuple, max_pixels: int) -> tuple[int, ...]:
    """The fixed (H, W, C) of an image feature, or StageError naming it and its shape."""
    if len(shape) != 3 or any(d is None or d < 1 for d in shape):
        raise StageError(
            f"TFDS image feature {name!r} of {builder.name!r} has no fixed shape (shape "
            f"{shape}); ingest needs fixed-size images (every pixel becomes a column), e.g. a "
            f"resized variant of the dataset"
        )
    hwc = tuple(int(d) for d in shape)
    n = int(np.prod(hwc))
    if n > max_pixels:
        raise StageError(
            f"TFDS image feature {name!r} of {builder.name!r} has shape {hwc} = {n} pixel "
            f"values, over max_image_pixels={max_pixels}; every value becomes a column, so raise "
            f"ingest's max_image_pixels (at your own cost) or use a smaller-image variant"
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
                pixels = values.reshape(len(values), -1).T.astype(np.float32)  # [H*W*C, B]
                if scale != 1.0:
                    pixels *= np.float32(scale)
                for i, col in enumerate(pixels):
                    out[f"{name}_{i}"] = col
            else:
                for i in range(arg):
                    out[f"{name}_{i}"] = values[:, i].astype(np.float32)
        yield out
