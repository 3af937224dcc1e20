"""A grpc.aio closed-loop load generator for TF Serving's Predict (own process).

    python grpc_load.py PORT MODEL BODY_JSON CONCURRENCY SECONDS  -> prints JSON stats
"""

import asyncio
import json
import sys
import time


async def main(port, model, body, conc, seconds):
    import grpc
    import numpy as np
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    from baton.serving.tensor_proto import from_ndarray

    inst = json.loads(body)["instances"][0]
    req = predict_pb2.PredictRequest()
    req.model_spec.name = model
    if isinstance(inst, dict):
        for k, v in inst.items():
            from_ndarray(np.array([v], dtype=object if isinstance(v, str) else np.float32),
                         req.inputs[k])
    else:
        from_ndarray(np.array([inst], np.float32), req.inputs["x"])
    ch = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    stub = prediction_service_pb2_grpc.PredictionServiceStub(ch)
    await stub.Predict(req)
    lat, errors = [], 0
    end = time.perf_counter() + seconds

    async def worker():
        nonlocal errors
        while time.perf_counter() < end:
            t = time.perf_counter()
            try:
                await stub.Predict(req)
                lat.append(time.perf_counter() - t)
            except grpc.RpcError:
                errors += 1

    t0 = time.perf_counter()
    await asyncio.gather(*[worker() for _ in range(conc)])
    el = time.perf_counter() - t0
    lat.sort()
    print(json.dumps({"rps": len(lat) / el, "p50_ms": lat[len(lat) // 2] * 1e3,
                      "p99_ms": lat[int(len(lat) * 0.99)] * 1e3, "errors": errors}))
    await ch.close()


if __name__ == "__main__":
    p, m, b, c, s = sys.argv[1:]
    asyncio.run(main(int(p), m, b, int(c), float(s)))
