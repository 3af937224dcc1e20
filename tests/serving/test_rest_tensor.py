"""REST predict with a tensor input: an image `[None, H, W, C]` as one nested list per instance
(row format) or one nested list per batch (columnar), as TF Serving's JSON encodes it."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import http

from baton.serving.testing import install

SHAPE = (4, 3, 2)


def _build(export_dir: str) -> str:
    """A SavedModel taking `image` [None, 4, 3, 2] float32 and a scalar `x`: returns the
    per-image sum plus x, and a class id."""
    import tensorflow as tf

    class M(tf.Module):
        @tf.function(input_signature=[{
            "image": tf.TensorSpec([None, *SHAPE], tf.float32, name="image"),
            "x": tf.TensorSpec([None], tf.float32, name="x")}])
        def serve(self, raw):
            total = tf.reduce_sum(raw["image"], axis=[1, 2, 3]) + raw["x"]
            return {"total": total, "class_ids": tf.cast(total > 0, tf.int64)}

    m = M()
    tf.saved_model.save(m, export_dir, signatures={"serving_default": m.serve})
    return export_dir


@pytest.fixture(scope="module")
def image_server(tmp_path_factory):
    from baton.serving.config import ModelConfig
    from baton.serving.server import ModelServer, ServerOptions

    root = tmp_path_factory.mktemp("tensor")
    install(_build(str(root / "export")), str(root / "images"), 3)
    s = ModelServer(ServerOptions(bind_free_ports=True, enable_batching=True,
                                  file_system_poll_wait_seconds=0),
                    [ModelConfig("images", str(root / "images"))]).start()
    yield s
    s.stop(grace=2)


def _images(n: int) -> np.ndarray:
    return np.arange(n * np.prod(SHAPE), dtype=np.float32).reshape(n, *SHAPE) / 100


def test_metadata_shows_the_image_input_shape(image_server):
    status, body = http(image_server.rest_port, "GET", "/v1/models/images/metadata")
    assert status == 200, body
    inputs = body["metadata"]["signature_def"]["signature_def"]["serving_default"]["inputs"]
    dims = [int(d["size"]) for d in inputs["image"]["tensor_shape"]["dim"]]
    assert dims == [-1, *SHAPE]


def test_row_and_columnar_requests_with_a_nested_image(image_server):
    images = _images(3)
    want = images.sum(axis=(1, 2, 3)) + np.array([1, 2, 3], np.float32)
    rows = {"instances": [{"image": images[i].tolist(), "x": float(i + 1)} for i in range(3)]}
    status, body = http(image_server.rest_port, "POST", "/v1/models/images:predict", rows)
    assert status == 200, body
    np.testing.assert_allclose([p["total"] for p in body["predictions"]], want, rtol=1e-6)
    cols = {"inputs": {"image": images.tolist(), "x": [1.0, 2.0, 3.0]}}
    status, body = http(image_server.rest_port, "POST", "/v1/models/images:predict", cols)
    assert status == 200, body
    np.testing.assert_allclose(body["outputs"]["total"], want, rtol=1e-6)


@pytest.mark.parametrize("image", [
    np.zeros((4, 3)).tolist(),  # a missing channel axis: reduce_sum over axis 3 fails
    [[[0.0, 0.0]] * 3] * 3 + [[[0.0]] * 3],  # ragged: not a tensor
])
def test_an_image_of_the_wrong_shape_is_a_400(image_server, image):
    """As TF Serving: inputs are checked by name; TensorFlow refuses what it cannot compute."""
    body = {"instances": [{"image": image, "x": 1.0}]}
    status, out = http(image_server.rest_port, "POST", "/v1/models/images:predict", body)
    assert status == 400, out
    assert out["error"]


def test_a_shape_tensorflow_can_compute_is_computed(image_server):
    """One row too few ([1, 3, 3, 2] where the signature declares [-1, 4, 3, 2]): TF
    Serving checks input names, not shapes (predict_util.cc), and this graph's
    reduce_sum computes on it, so the answer is 200, as from tensorflow_model_server."""
    body = {"instances": [{"image": np.ones((3, 3, 2)).tolist(), "x": 1.0}]}
    status, out = http(image_server.rest_port, "POST", "/v1/models/images:predict", body)
    assert status == 200, out
    assert out["predictions"][0]["total"] == 19.0
