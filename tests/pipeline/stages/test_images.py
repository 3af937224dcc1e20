"""Image data: TFDS Image features and synthetic images become one tensor column, then a CNN.

The TFDS path is tested with a tiny builder defined here and prepared offline into a temporary
data_dir (this machine has no network); the end-to-end test trains the CNN on synthetic images.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from baton.configs import ConfigError
from baton.errors import StageError
from baton.pipeline.dataplane.records.schema_file import ExamplesSchema, shard_files
from baton.pipeline.testing import run_stage

ROWS, SHAPE = 40, (6, 5, 3)


def _pixels(i: int) -> np.ndarray:
    """Image i of the tiny dataset: every value distinct enough to catch a reordering."""
    return ((np.arange(np.prod(SHAPE)) * 7 + i * 13) % 256).astype(np.uint8).reshape(SHAPE)


class BatonTinyImages(tfds.core.GeneratorBasedBuilder):
    """40 uint8 6x5x3 images, a class label and a text id: registered as `baton_tiny_images`."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict({
                "image": tfds.features.Image(shape=SHAPE),
                "label": tfds.features.ClassLabel(names=["cat", "dog"]),
                "id": tfds.features.Text(),
            }),
            supervised_keys=("image", "label"),
        )

    def _split_generators(self, dl_manager):  # noqa: ANN001, ANN202, ARG002
        return {"train": self._generate_examples(0, 30), "test": self._generate_examples(30, 40)}

    def _generate_examples(self, lo: int, hi: int):  # noqa: ANN202
        for i in range(lo, hi):
            yield i, {"image": _pixels(i), "label": i % 2, "id": f"img{i:03d}"}


class BatonAnySizeImages(BatonTinyImages):
    """Images without a fixed size (as most TFDS image datasets declare them)."""

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
            "photo": tfds.features.Image(shape=(None, None, 3)),
            "label": tfds.features.ClassLabel(num_classes=2)}))


def _read(examples: Path, split: str) -> list[tf.train.Example]:
    return [tf.train.Example.FromString(r.numpy())
            for f in shard_files(examples, split) for r in tf.data.TFRecordDataset(str(f))]


@pytest.fixture(scope="module")
def tiny_images(tmp_path_factory) -> Path:
    data_dir = tmp_path_factory.mktemp("tfds")
    BatonTinyImages(data_dir=str(data_dir)).download_and_prepare()
    return data_dir


def test_tfds_image_becomes_one_tensor_column_with_its_shape_recorded(tmp_path, tiny_images):
    cfg = {"source": "tfds", "dataset": "baton_tiny_images", "data_dir": str(tiny_images),
           "download": False, "exclude": ["id"],
           "split_names": {"train": "train", "eval": "test"}}
    out, metrics = run_stage("ingest", cfg, {}, tmp_path)
    assert (metrics["rows_train"], metrics["rows_eval"]) == (30, 10)
    schema = ExamplesSchema.load(out["examples"])
    assert schema.images == {"image": SHAPE}
    n = int(np.prod(SHAPE))
    assert [(c.name, c.dtype, c.shape) for c in schema.features] == [("image", "float32", SHAPE)]
    assert schema.label == "label" and schema.task == "classification"
    written = json.loads((out["examples"] / "schema.json").read_text())
    assert written["images"] == {"image": list(SHAPE)}
    assert {"name": "image", "dtype": "float32", "shape": list(SHAPE)} in written["columns"]
    for ex in _read(out["examples"], "eval"):
        f = ex.features.feature
        label = f["label"].bytes_list.value[0].decode()
        values = np.array(f["image"].float_list.value, np.float32)  # one float_list, HWC
        assert values.shape == (n,)
        # row-major HWC, uint8 / 255: find which image it is by its first pixel, then compare
        i = next(i for i in range(30, 40) if np.isclose(values[0], _pixels(i).flat[0] / 255))
        np.testing.assert_allclose(values, _pixels(i).reshape(-1) / np.float32(255), rtol=1e-6)
        assert label == ("cat", "dog")[i % 2]

    # excluding the image drops its column (and the shape); the other columns stay
    only_id, _ = run_stage("ingest", dict(cfg, exclude=["image"]), {}, tmp_path, run_id="no-image")
    schema = ExamplesSchema.load(only_id["examples"])
    assert [c.name for c in schema.features] == ["id"] and schema.images == {}


def test_tfds_image_over_max_image_pixels_is_refused_naming_feature_and_shape(tmp_path,
                                                                               tiny_images):
    cfg = {"source": "tfds", "dataset": "baton_tiny_images", "data_dir": str(tiny_images),
           "download": False, "max_image_pixels": 64}
    with pytest.raises(StageError, match=r"image feature 'image' of 'baton_tiny_images' has "
                                         r"shape \(6, 5, 3\) = 90 pixel values, over "
                                         r"max_image_pixels=64"):
        run_stage("ingest", cfg, {}, tmp_path)


def test_tfds_image_without_a_fixed_shape_is_refused(tmp_path):
    from baton.pipeline.dataplane.sources import tfds_source

    builder = BatonAnySizeImages(data_dir=str(tmp_path))  # info only: nothing is prepared
    with pytest.raises(StageError, match=r"image feature 'photo' .* has no fixed shape "
                                         r"\(shape \(None, None, 3\)\)"):
        tfds_source.tabular_columns(builder)


def test_synthetic_images_are_deterministic_patterns_with_their_shape(tmp_path):
    cfg = {"source": "synthetic", "rows_per_shard": 200,
           "synthetic": {"rows": 600, "seed": 3, "image": [6, 7, 2], "classes": 4}}
    a, ma = run_stage("ingest", cfg, {}, tmp_path, run_id="a")
    b, _ = run_stage("ingest", cfg, {}, tmp_path, run_id="b")
    assert ma["rows"] == 600
    assert [f.read_bytes() for f in shard_files(a["examples"], "train")] == [
        f.read_bytes() for f in shard_files(b["examples"], "train")]
    schema = ExamplesSchema.load(a["examples"])
    assert schema.images == {"image": (6, 7, 2)}
    assert [(c.name, c.shape) for c in schema.features] == [("image", (6, 7, 2))]
    rows = _read(a["examples"], "train")
    labels = [r.features.feature["label"].bytes_list.value[0].decode() for r in rows]
    assert sorted(set(labels)) == ["antidiagonal", "diagonal", "horizontal", "vertical"]
    pixels = np.array([r.features.feature["image"].float_list.value for r in rows])
    assert pixels.shape == (len(rows), 84)
    assert pixels.min() >= 0 and pixels.max() <= 1
    # a horizontal bar: one row of the image is much brighter than the others
    bars = pixels[np.array(labels) == "horizontal"].reshape(-1, 6, 7, 2)
    by_row = bars.mean(axis=(2, 3))
    assert np.all(np.sort(by_row, axis=1)[:, -1] > np.sort(by_row, axis=1)[:, -2] + 0.2)


@pytest.mark.parametrize(("synthetic", "extra", "message"), [
    ({"image": [8, 8]}, {}, r"synthetic.image must be \[height, width, channels\]"),
    ({"image": [8, 8, 1], "classes": 7}, {}, r"need 2 to 6 classes"),
    ({"image": [64, 64, 3]}, {"max_image_pixels": 4096},
     r"\[64, 64, 3\] has 12288 pixel values, over max_image_pixels=4096"),
    ({"image": [8, 8, 1]}, {"max_image_pixels": 32}, r"64 pixel values, over max_image_pixels=32"),
])
def test_synthetic_image_settings_are_checked(tmp_path, synthetic, extra, message):
    with pytest.raises(ConfigError, match=message):
        run_stage("ingest", {"source": "synthetic", "synthetic": synthetic, **extra}, {}, tmp_path)


@pytest.mark.slow
@pytest.mark.e2e
def test_cnn_learns_synthetic_images_end_to_end(tmp_path):
    """ingest (8x8 pattern images) -> transform -> train (cnn, shape from the data) -> evaluate."""
    started = time.monotonic()
    ingest, _ = run_stage("ingest", {"source": "synthetic", "synthetic": {
        "rows": 3000, "seed": 1, "image": [8, 8, 1], "classes": 3, "noise": 0.3}}, {}, tmp_path)
    transform, _ = run_stage("transform", {}, {"examples": ingest["examples"]}, tmp_path)
    spec = json.loads((transform["transform_graph"] / "feature_spec.json").read_text())
    assert spec["images"] == [{"name": "image", "shape": [8, 8, 1]}]
    assert spec["features"] == [{"name": "image", "kind": "numeric", "vocab_size": 0,
                                 "shape": [8, 8, 1]}]
    analysis = json.loads((transform["transform_graph"] / "analysis.json").read_text())
    assert {op["kind"] for op in analysis["features"]} == {"identity"}  # pixels stay in [0, 1]
    model, _ = run_stage("train", {"model": "cnn", "epochs": 5, "learning_rate": 0.003},
                         {"transformed": transform["transformed"],
                          "transform_graph": transform["transform_graph"]}, tmp_path)
    _, metrics = run_stage("evaluate", {"baseline": "none"},
                           {"model": model["model"], "examples": ingest["examples"],
                            "transform_graph": transform["transform_graph"]}, tmp_path)
    elapsed = time.monotonic() - started
    print(f"cnn accuracy {metrics['accuracy']:.4f} in {elapsed:.1f}s")
    assert metrics["accuracy"] > 0.8, metrics  # chance is 1/3
