"""Peer servers for the serving benchmark, each run as its own process.

    python peers.py naive    MODEL_DIR PORT   Starlette+uvicorn, one signature call per request
    python peers.py constant MODEL_DIR PORT   the same stack returning a constant (HTTP ceiling)
    python peers.py ray      MODEL_DIR PORT   Ray Serve with @serve.batch

All speak TF Serving's row format on POST /v1/models/m:predict so one load generator
and one request body drive every peer.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _load(model_dir):
    import tensorflow as tf

    fn = tf.saved_model.load(model_dir).signatures["serving_default"]
    specs = fn.structured_input_signature[1]
    return fn, specs


def _feeds(instances, specs):
    import numpy as np
    import tensorflow as tf

    if all(isinstance(r, dict) for r in instances):
        # JSON strings become tf.string tensors (UTF-8 bytes); numbers take the spec's dtype.
        return {k: tf.constant([r[k] for r in instances], dtype=tf.string)
                if s.dtype == tf.string else
                np.asarray([r[k] for r in instances], dtype=s.dtype.as_numpy_dtype)
                for k, s in specs.items()}
    (k, s), = specs.items()
    return {k: np.asarray(instances, dtype=s.dtype.as_numpy_dtype)}


def _jsonable(v):
    """numpy element / sub-array of a signature output -> JSON value (bytes -> str)."""
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    return v.tolist() if hasattr(v, "tolist") else v


def _row(arrs, i):
    # string outputs are object arrays whose elements are plain `bytes` (no .tolist())
    return {k: _jsonable(a[i]) for k, a in arrs.items()}


def starlette_app(model_dir, constant):
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    if constant:
        async def predict(request: Request):
            await request.body()
            return Response(b'{"predictions": [[0.1, 0.9]]}', media_type="application/json")
    else:
        fn, specs = _load(model_dir)

        async def predict(request: Request):
            body = await request.json()
            out = fn(**_feeds(body["instances"], specs))
            arrs = {k: v.numpy() for k, v in out.items()}
            preds = [_row(arrs, i) for i in range(len(body["instances"]))]
            return JSONResponse({"predictions": preds}, )

    return Starlette(routes=[Route("/v1/models/m:predict", predict, methods=["POST"])])


def run_ray(model_dir, port):
    import ray
    from ray import serve
    from starlette.requests import Request

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})

    @serve.deployment(max_ongoing_requests=256)
    class Model:
        def __init__(self):
            self.fn, self.specs = _load(model_dir)

        @serve.batch(max_batch_size=64, batch_wait_timeout_s=0.001)
        async def batch(self, rows: list[dict]):
            out = self.fn(**_feeds(rows, self.specs))
            arrs = {k: v.numpy() for k, v in out.items()}
            return [_row(arrs, i) for i in range(len(rows))]

        async def __call__(self, request: Request):
            body = await request.json()
            return {"predictions": [await self.batch(body["instances"][0])]}

    serve.run(Model.bind(), route_prefix="/v1/models/m:predict")
    print("READY", flush=True)
    import time

    while True:
        time.sleep(3600)


if __name__ == "__main__":
    kind, model_dir, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if kind == "ray":
        run_ray(model_dir, port)
    else:
        import uvicorn

        uvicorn.run(starlette_app(model_dir, kind == "constant"), host="127.0.0.1", port=port,
                    log_level="warning", access_log=False)
