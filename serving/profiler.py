"""TensorFlow's ProfilerService on the gRPC port, so TensorBoard can capture a profile.

tensorflow_model_server registers `tensorflow.ProfilerService` (TSL's
profiler_service.proto) on its gRPC port when `--enable_profiler` is true (its default);
TensorBoard's "capture profile" and `tf.profiler.experimental.client.trace` call its
`Profile` method. TSL's server (ProfilerServiceImpl) answers it by running a profiler
session for `duration_ms`, writing the collected XSpace to
`<repository_root>/<session_id>/<host_name>.xplane.pb` (where the client's TensorBoard
reads it: repository_root is the client's `<logdir>/plugins/profile`) and returning
`empty_trace`; `Terminate` ends a session early; `Monitor` is not implemented there.

This is the same service, in this process: TensorFlow's own profiler session
(`_pywrap_profiler.ProfilerSession`, what `tf.profiler.experimental.start/stop` use)
traces the server's TensorFlow runtime (every signature run, on every thread) while
requests are served; TensorFlow exports its XSpace (to a private temporary directory)
and the file is moved where TSL's server writes it. The session
runs on a worker thread, never on the serving loop. TSL's server itself cannot be used:
it listens on its own port, on all interfaces.

The request names a directory on the server's machine, as with TF Serving: anyone who
reaches the gRPC port can make the server write a trace file there. `session_id` and
`host_name` may not climb out of it (`/`, `..`); `--enable_profiler=false` removes the
service. One profile at a time (TensorFlow's profiler is process-wide), at most
MAX_DURATION_MS each.
"""

from __future__ import annotations

import asyncio
import functools
import glob
import os
import socket
import tempfile
import threading

import grpc

SERVICE = "tensorflow.ProfilerService"
MAX_DURATION_MS = 10 * 60 * 1000


@functools.lru_cache(maxsize=1)
def _messages():
    """ProfileRequest/ProfileResponse/TerminateRequest/TerminateResponse (field numbers
    of TSL's profiler_service.proto); TensorFlow ships ProfileOptions, not these."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from tensorflow.tsl.profiler.protobuf import profiler_options_pb2

    pool = descriptor_pool.DescriptorPool()
    opts = descriptor_pb2.FileDescriptorProto()
    profiler_options_pb2.DESCRIPTOR.CopyToProto(opts)
    pool.Add(opts)
    f = descriptor_pb2.FileDescriptorProto(name="baton_profiler_service.proto",
                                           package="tensorflow", syntax="proto3",
                                           dependency=[opts.name])
    FD = descriptor_pb2.FieldDescriptorProto
    opt = FD.LABEL_OPTIONAL
    req = f.message_type.add(name="ProfileRequest")
    req.field.add(name="duration_ms", number=1, type=FD.TYPE_UINT64, label=opt)
    req.field.add(name="max_events", number=2, type=FD.TYPE_UINT64, label=opt)
    req.field.add(name="tools", number=3, type=FD.TYPE_STRING, label=FD.LABEL_REPEATED)
    req.field.add(name="opts", number=4, type=FD.TYPE_MESSAGE, label=opt,
                  type_name=".tensorflow.ProfileOptions")
    req.field.add(name="repository_root", number=5, type=FD.TYPE_STRING, label=opt)
    req.field.add(name="session_id", number=6, type=FD.TYPE_STRING, label=opt)
    req.field.add(name="host_name", number=7, type=FD.TYPE_STRING, label=opt)
    resp = f.message_type.add(name="ProfileResponse")
    resp.field.add(name="empty_trace", number=7, type=FD.TYPE_BOOL, label=opt)
    term = f.message_type.add(name="TerminateRequest")
    term.field.add(name="session_id", number=1, type=FD.TYPE_STRING, label=opt)
    f.message_type.add(name="TerminateResponse")
    pool.Add(f)
    get = message_factory.GetMessageClass
    return tuple(get(pool.FindMessageTypeByName(f"tensorflow.{n}")) for n in
                 ("ProfileRequest", "ProfileResponse", "TerminateRequest",
                  "TerminateResponse"))


def _fields(data: bytes, wanted: int):
    """The payloads of length-delimited field `wanted` in a serialized message."""
    i, n = 0, len(data)
    while i < n:
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, i = _varint(data, i)
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        elif wire == 2:
            size, i = _varint(data, i)
            if number == wanted:
                yield data[i:i + size]
            i += size
        else:
            raise ValueError(f"unexpected wire type {wire} in an XSpace")


def _varint(data: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7


def event_count(xspace: bytes) -> int:
    """Events in a serialized XSpace (planes = 1, a plane's lines = 3, a line's events = 4).

    Read from the wire format, so that no event name Python's protobuf would refuse
    (proto3 strings must be valid UTF-8) can make a captured trace look unreadable.
    """
    return sum(1 for plane in _fields(xspace, 1) for line in _fields(plane, 3)
               for _ in _fields(line, 4))


class _Busy(Exception):  # noqa: N818
    pass


class Profiler:
    """One profiling session at a time; `terminate` ends the running one early."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._session_id: str | None = None

    def profile(self, request) -> bool:
        """Traces for the request's duration and writes its XSpace; True if it is empty."""
        from tensorflow.python.profiler.internal import _pywrap_profiler

        if not self._lock.acquire(blocking=False):
            raise _Busy("Another profiling session is active.")
        try:
            self._stop.clear()
            self._session_id = request.session_id
            opts = request.opts
            options = {"host_tracer_level": opts.host_tracer_level or 2,
                       "device_tracer_level": opts.device_tracer_level or 1,
                       "python_tracer_level": opts.python_tracer_level}
            with tempfile.TemporaryDirectory(prefix="baton-profile-") as tmp:
                session = _pywrap_profiler.ProfilerSession()
                session.start(tmp, options)
                try:
                    self._stop.wait(min(request.duration_ms, MAX_DURATION_MS) / 1e3)
                finally:
                    # TensorFlow's own export: <tmp>/plugins/profile/<run>/<host>.xplane.pb
                    session.export_to_tb()
                found = glob.glob(os.path.join(tmp, "plugins", "profile", "*", "*.xplane.pb"))
                if not found:
                    raise OSError("TensorFlow's profiler exported no trace")
                with open(found[0], "rb") as f:
                    data = f.read()
            empty = event_count(data) == 0
            directory = os.path.join(request.repository_root, request.session_id)
            os.makedirs(directory, exist_ok=True)
            host = request.host_name or socket.gethostname()
            path = os.path.join(directory, f"{host}.xplane.pb")
            with open(path + ".tmp", "wb") as f:
                f.write(data)
            os.replace(path + ".tmp", path)
            return empty
        finally:
            self._session_id = None
            self._lock.release()

    def terminate(self, session_id: str) -> None:
        if self._session_id is not None and self._session_id == session_id:
            self._stop.set()


def _check(request) -> str | None:
    """Why the request is refused, or None."""
    if not request.repository_root:
        return "ProfileRequest.repository_root is empty"
    for field in ("session_id", "host_name"):
        value = getattr(request, field)
        if "/" in value or "\\" in value or value in (".", ".."):
            return f"ProfileRequest.{field} must be a plain name. Received: {value!r}"
    if not request.session_id:
        return "ProfileRequest.session_id is empty"
    return None


def add_profiler_service(server, profiler: Profiler | None = None) -> Profiler:
    """Registers Profile, Terminate (and Monitor, unimplemented as in TSL) on `server`
    (grpc.aio or the native h2grpc server); the handlers take and return bytes."""
    profiler = profiler or Profiler()
    req_t, resp_t, term_t, term_resp_t = _messages()

    async def profile(raw: bytes, context) -> bytes:
        request = req_t.FromString(raw)
        why = _check(request)
        if why is not None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, why)
        loop = asyncio.get_running_loop()
        try:
            empty = await loop.run_in_executor(None, profiler.profile, request)
        except _Busy as e:
            await context.abort(grpc.StatusCode.ALREADY_EXISTS, str(e))
        except OSError as e:
            await context.abort(grpc.StatusCode.INTERNAL,
                                f"cannot write the profile to {request.repository_root}: {e}")
        return resp_t(empty_trace=empty).SerializeToString()

    async def terminate(raw: bytes, context) -> bytes:
        profiler.terminate(term_t.FromString(raw).session_id)
        return term_resp_t().SerializeToString()

    async def monitor(raw: bytes, context) -> bytes:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Monitor is not implemented")
        return b""  # not reached: abort raises

    handlers = {name: grpc.unary_unary_rpc_method_handler(fn) for name, fn in
                (("Profile", profile), ("Terminate", terminate), ("Monitor", monitor))}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    return profiler
