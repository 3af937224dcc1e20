"""A GrpcServer with a test echo service, in a process of its own (hostile-client tests).

    python h2_echo_server.py '{"limits": {...Http2Limits fields...}, "max_receive": N,
                              "max_connections": N}'

Prints its port, serves until SIGTERM, then stops gracefully (grace 10 s, as `baton
serve`) and prints on stderr how long the stop took. Methods of `test.Echo`: Echo
(async; metadata x-sleep seconds, x-size of the answer), Plain (sync: the request
reversed).
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
import time

import grpc

from baton.serving.connections import ConnectionTable, default_max_connections, sweep_forever
from baton.serving.http2 import GrpcServer, Http2Limits
from baton.serving.server import new_event_loop


def _ident(b):
    return b


async def echo(request, context):
    md = dict(context.invocation_metadata())
    if md.get("x-sleep"):
        await asyncio.sleep(float(md["x-sleep"]))
    if md.get("x-size"):
        return b"r" * int(md["x-size"])
    return b"echo:" + request


def plain(request, context):
    return request[::-1]


async def main(conf: dict) -> None:
    table = ConnectionTable(conf.get("max_connections") or default_max_connections())
    server = GrpcServer(max_receive_message_length=conf.get("max_receive", 4 << 20),
                        limits=Http2Limits(**conf.get("limits", {})), table=table)
    loop = asyncio.get_running_loop()
    sweeper = loop.create_task(sweep_forever(table, loop, 0.2))
    handlers = {"Echo": grpc.unary_unary_rpc_method_handler(echo, _ident, _ident),
                "Plain": grpc.unary_unary_rpc_method_handler(plain, _ident, _ident)}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Echo",
                                                                           handlers),))
    port = await server.bind_tcp("127.0.0.1", 0)
    print(port, flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    t = time.monotonic()
    await server.stop(10.0)
    sweeper.cancel()
    print(f"stopped in {time.monotonic() - t:.3f} s; in flight {server.in_flight}",
          file=sys.stderr, flush=True)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s")
    new_event_loop().run_until_complete(main(json.loads(sys.argv[1])))
