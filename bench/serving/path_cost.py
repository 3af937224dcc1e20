"""The serving loop's own cost of one Predict, per API: no network, no model run.

    .venv/bin/python bench/serving/path_cost.py [--requests 20000] [--profile grpc|rest]

Feeds the bytes a load generator sends (wrk's REST request, h2load's HEADERS and DATA)
straight into the server's protocol objects (HttpProtocol, H2Connection) with a transport
that only collects what is written, and the batcher replaced by an immediate completion
with the model's real outputs (computed once): what remains is exactly the Python work
the event loop thread does per request (parsing, routing, input conversion and checks,
submit, response encoding, metrics, framing). That thread is what limits req/s at
concurrency 64 on a small machine, and unlike req/s on a shared machine this number
hardly moves with the machine's load: it is the thread's CPU time (`time.thread_time`),
best of 5 runs; 64 requests are read per loop iteration, as from 64 connections. `--profile` prints cProfile's
top entries for one API.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests", "serving"), os.path.dirname(__file__)]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


BURST = 64  # requests read per loop iteration (a closed loop of 64 connections)


class _Transport:
    """What the protocols write to, kept only to be counted."""

    def __init__(self):
        self.n = 0

    def write(self, data) -> None:
        self.n += len(data)

    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 40000) if name == "peername" else default

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        return None

    def pause_reading(self) -> None:
        return None

    def resume_reading(self) -> None:
        return None


def _service(model_dir: str):
    """A ModelService over the real servable whose submit completes at once."""
    from baton.serving.batcher import BatchScheduler
    from baton.serving.config import BatchingOptions, ModelConfig
    from baton.serving.manager import ModelManager
    from baton.serving.metrics import Metrics
    from baton.serving.service import ModelService

    manager = ModelManager([ModelConfig("m", os.path.dirname(model_dir))], poll_seconds=0)
    manager.start()
    scheduler = BatchScheduler(BatchingOptions(max_batch_size=256), batching=True)
    metrics = Metrics(depth=scheduler.depth, loaded=manager.loaded_versions, batching=True)
    service = ModelService(manager, scheduler, metrics)
    servable = manager.resolve("m")
    import numpy as np

    outputs = servable.signatures["serving_default"]({"x": np.full((1, 32), 0.5, np.float32)})

    def submit(servable, sig, feeds, done, loop, api="", timeout=0.0, key=None):
        done({k: v.copy() for k, v in outputs.items()}, None)

    service.submit = submit
    return service, manager, scheduler


async def _grpc(service, n: int) -> float:
    from hpack import Encoder
    from run_bench import grpc_request

    from baton.serving.grpc_service import add_services
    from baton.serving.http2 import GrpcServer
    from baton.serving.http2.connection import H2Connection

    server = GrpcServer(max_receive_message_length=64 << 20)
    server.loop = asyncio.get_running_loop()
    add_services(server, service)
    conn = H2Connection(server)
    t = _Transport()
    conn.connection_made(t)
    def frame(ftype, flags, sid, payload):
        return (len(payload).to_bytes(3, "big") + bytes([ftype, flags])
                + sid.to_bytes(4, "big") + payload)

    # a client that reads everything: windows as large as they go
    conn.data_received(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                       + frame(4, 0, 0, b"\0\4\x7f\xff\xff\xff")
                       + frame(8, 0, 0, (2**31 - 1 - 65535).to_bytes(4, "big")))
    msg = grpc_request({"instances": [[0.5] * 32]}).SerializeToString()
    data = b"\0" + len(msg).to_bytes(4, "big") + msg
    enc = Encoder()
    fields = [(":method", "POST"), (":scheme", "http"),
              (":path", "/tensorflow.serving.PredictionService/Predict"),
              (":authority", "x"), ("content-type", "application/grpc"), ("te", "trailers")]
    first, block = enc.encode(fields), enc.encode(fields)  # the second, as h2load's: indexed
    reqs = [frame(1, 4, sid, first if sid == 1 else block) + frame(0, 1, sid, data)
            for sid in range(1, 2 * n, 2)]
    t0 = time.thread_time()
    for i in range(0, n, BURST):
        for r in reqs[i:i + BURST]:
            conn.data_received(r)
        await asyncio.sleep(0)  # the loop's next iteration: what the reads scheduled
    dt = time.thread_time() - t0
    assert t.n > n * 100 and not conn.streams and server.in_flight == 0, "not all answered"
    conn.connection_lost(None)
    return dt / n


async def _rest(service, n: int) -> float:
    from baton.serving.http import HttpProtocol, HttpServerState
    from baton.serving.rest import RestApi

    state = HttpServerState(RestApi(service, None), 1 << 20, 30.0)
    conn = HttpProtocol(state)
    t = _Transport()
    conn.connection_made(t)
    body = json.dumps({"instances": [[0.5] * 32]}).encode()
    req = (b"POST /v1/models/m:predict HTTP/1.1\r\nHost: 127.0.0.1:8501\r\n"
           b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    t0 = time.thread_time()
    for i in range(0, n, BURST):
        for _ in range(min(BURST, n - i)):
            conn.data_received(req)
        await asyncio.sleep(0)
    dt = time.thread_time() - t0
    assert t.n > n * 100, "no responses written"
    conn.connection_lost(None)
    return dt / n


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--profile", choices=["grpc", "rest"])
    ap.add_argument("--api", choices=["both", "rest"], default="both",
                    help="rest: REST only (e.g. an older tree on PYTHONPATH, for an A/B)")
    a = ap.parse_args()
    import fixture_models as fm

    from baton.serving.server import freeze_heap, new_event_loop

    with tempfile.TemporaryDirectory() as tmp:
        model = fm.build_mlp(os.path.join(tmp, "m", "1"))
        service, manager, scheduler = _service(model)
        freeze_heap()
        loop = new_event_loop()
        try:
            if a.profile:
                fn = _grpc if a.profile == "grpc" else _rest
                prof = cProfile.Profile()
                prof.enable()
                loop.run_until_complete(fn(service, a.requests))
                prof.disable()
                pstats.Stats(prof).sort_stats("tottime").print_stats(30)
                return 0
            best = {"REST": 1.0, "gRPC": 1.0}
            for _ in range(a.runs):
                best["REST"] = min(best["REST"], loop.run_until_complete(
                    _rest(service, a.requests)))
                if a.api == "both":
                    best["gRPC"] = min(best["gRPC"], loop.run_until_complete(
                        _grpc(service, a.requests)))
            if a.api == "rest":
                print(f"loop us per REST Predict (best of {a.runs} x {a.requests}): "
                      f"{best['REST'] * 1e6:.2f}")
                return 0
            print(f"loop us per Predict (best of {a.runs} x {a.requests}): REST "
                  f"{best['REST'] * 1e6:.2f}, gRPC {best['gRPC'] * 1e6:.2f} "
                  f"(gRPC/REST {best['gRPC'] / best['REST']:.2f})")
        finally:
            loop.close()
            scheduler.close(1)
            manager.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
