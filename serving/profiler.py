"""TensorFlow's ProfilerService on the gRPC port: present, and refused with a clear status.

tensorflow_model_server registers `tensorflow.ProfilerService` (TSL's profiler_service.proto:
Profile, Terminate, Monitor) on its gRPC port when `--enable_profiler` is true (its
default), so TensorBoard's "capture profile" can trace the server. Baton does not serve
it: the profiler's protos and server ship only inside TensorFlow's C++ runtime, and its
traces would show this Python process, not a TF Serving one. Rather than grpc's generic
"Method not found!", each method answers UNIMPLEMENTED with a message that names the
service, the reason and the alternative, so a profiling client reports something a user
can act on. `--enable_profiler=false` leaves the service out, as in TF Serving.
"""

from __future__ import annotations

import grpc

SERVICE = "tensorflow.ProfilerService"
METHODS = ("Profile", "Terminate", "Monitor")
MESSAGE = (f"{SERVICE} is not served by baton serve (TF Serving's --enable_profiler): "
           "its traces come from TensorFlow's C++ model server. Profile the model with "
           "tf.profiler.experimental.start/stop in a Python process, or run it on "
           "tensorflow/serving.")


async def _refuse(request: bytes, context) -> bytes:
    await context.abort(grpc.StatusCode.UNIMPLEMENTED, MESSAGE)
    return b""  # not reached: abort raises


def add_profiler_refusal(server) -> None:
    """Registers every ProfilerService method on `server`, each refusing with MESSAGE."""
    handlers = {m: grpc.unary_unary_rpc_method_handler(_refuse) for m in METHODS}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
