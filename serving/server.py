"""The model server: manager + batcher + REST + gRPC + metrics on one asyncio loop.

`ModelServer(options).start()` loads the initial versions (blocking, as
tensorflow_model_server does, so "started" means "serving"), then binds both APIs on a
background event loop and returns; `stop()` shuts down gracefully: listeners close,
requests on kept-alive connections get 503, in-flight requests and queued batches finish.

With `--model_config_file_poll_wait_seconds` > 0 the model config file is read again
every that many seconds and applied as HandleReloadConfigRequest applies a config (TF
Serving's PollFilesystemAndReloadConfig); a file that does not parse, or a config that
cannot be applied, is logged and the server keeps serving what it serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import gc
import logging
import os
import stat
import threading
import time

from baton.serving.batcher import BatchScheduler
from baton.serving.config import (
    BatchingOptions,
    ModelConfig,
    base_path,
    grpc_channel_arguments,
    load_batching_parameters,
    load_model_config_file,
    load_monitoring_config,
)
from baton.serving.conventions import DEFAULT_GRPC_PORT, DEFAULT_REST_PORT, SERVING
from baton.serving.http import HttpProtocol, HttpServerState
from baton.serving.loader import load_servable
from baton.serving.manager import ModelManager
from baton.serving.metrics import Metrics
from baton.serving.rest import RestApi
from baton.serving.servable import set_parallelism
from baton.serving.service import ModelService
from baton.storage.filesystems import check_bucket

log = logging.getLogger(__name__)

# Young-generation threshold while serving (CPython's default is 700). Request handling
# allocates short-lived, almost always acyclic objects; fewer, slightly larger young
# collections cost the same in total but interrupt the event loop less often.
GC_GEN0_THRESHOLD = 5000
# Without --enable_batching: how many requests (of any number of rows) may wait for one of
# the model threads before more are refused with UNAVAILABLE.
UNBATCHED_MAX_WAITING = 4096


def freeze_heap() -> None:
    """Moves everything alive now (TensorFlow's modules: ~270k objects) out of the GC.

    A full (generation 2) collection walks every tracked object; with TensorFlow loaded
    that is 50-170 ms with the GIL held, i.e. a stall of every in-flight request, and it
    was the whole p99 tail under load. Frozen objects are never scanned. Called once at
    start, after the imports and before any model is loaded: a loaded version (6-15k
    objects) stays collectable, so unloading it frees its cycles with a plain
    `gc.collect()` of the unfrozen objects (1-2 ms), not an unfreeze and a full walk.
    """
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def import_runtime() -> None:
    """Imports what serving a model uses (TensorFlow, grpc, the TF Serving protos), so
    the freeze at start covers them rather than leaving them to every collection."""
    import tensorflow  # noqa: F401

    import baton.serving.grpc_service  # noqa: F401
    import baton.serving.h2grpc  # noqa: F401


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop (a dependency, `uvloop>=0.19`, on every platform but Windows, which
    uvloop does not support; there, and with BATON_SERVING_UVLOOP=0, the stdlib loop).

    The REST path is one recv and one send per request; uvloop's libuv transports do
    those with far less Python around them (~10% more req/s under load). Nothing else
    differs: the HTTP protocol, gRPC (grpc.aio) and the batcher hand-offs are plain
    asyncio APIs.
    """
    if os.name == "nt" or os.environ.get("BATON_SERVING_UVLOOP", "1") == "0":
        return asyncio.new_event_loop()
    import uvloop

    return uvloop.new_event_loop()


def grpc_implementation() -> str:
    """"native" (h2grpc.py: HTTP/2 on the serving loop) unless BATON_SERVING_GRPC=grpcio.

    Every method of TF Serving's API is unary; the native server answers them with the
    same servicers at about 3x grpc.aio's calls per second on this loop
    (docs/benchmarks-serving.md), because a call never leaves the event loop thread.
    grpcio's grpc.aio server stays available, e.g. to compare the two.
    """
    value = os.environ.get("BATON_SERVING_GRPC", "native")
    if value not in ("native", "grpcio"):
        raise ValueError(f"BATON_SERVING_GRPC must be native or grpcio. Received: {value!r}")
    return value


@dataclasses.dataclass(frozen=True)
class ServerOptions:
    """tensorflow_model_server's flags (and a few of ours, marked)."""

    port: int = DEFAULT_GRPC_PORT
    rest_api_port: int = DEFAULT_REST_PORT
    host: str = "127.0.0.1"  # ours: TF Serving binds 0.0.0.0; we bind loopback by default
    model_name: str = "default"
    model_base_path: str = ""
    model_config_file: str = ""
    enable_batching: bool = False
    batching_parameters_file: str = ""
    file_system_poll_wait_seconds: float = 1.0
    monitoring_config_file: str = ""
    rest_api_timeout_in_ms: int = 30000
    model_config_file_poll_wait_seconds: float = 0.0
    enable_model_warmup: bool = True
    grpc_max_message_bytes: int = 64 * 1024 * 1024
    rest_api_max_body_bytes: int = 32 * 1024 * 1024  # ours: larger bodies get 413
    bind_free_ports: bool = False  # ours: both APIs on free ports (tests, demos)
    ports_file: str = ""  # ours: write {"grpc": p, "rest": p} once bound
    grpc_socket_path: str = ""  # gRPC also (with --port=0: only) on this Unix socket
    grpc_channel_arguments: str = ""  # "key=value,...", passed to the gRPC server
    enable_signature_method_name_check: bool = False
    enable_serialization_as_tensor_content: bool = False
    enable_profiler: bool = True  # tensorflow.ProfilerService on the gRPC port (profiler.py)
    num_request_iterations_for_warmup: int = 0
    saved_model_tags: str = SERVING
    tensorflow_session_parallelism: int = 0
    tensorflow_intra_op_parallelism: int = 0
    tensorflow_inter_op_parallelism: int = 0
    allow_version_labels_for_unavailable_models: bool = False
    prefer_tflite_model: bool = False  # <version>/model.tflite through LiteRT (loader.py)
    num_tflite_pools: int = 1


class ModelServer:
    """One server process' worth of serving. Thread-safe start/stop; not restartable."""

    def __init__(self, options: ServerOptions, models: list[ModelConfig] | None = None):
        self.options = options
        self._models = models
        self.grpc_port: int | None = None
        self.rest_port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self._config_thread: threading.Thread | None = None
        self._config_failed = False

    # -- start -----------------------------------------------------------------------
    def _model_configs(self) -> list[ModelConfig]:
        if self._models is not None:
            return self._models
        o = self.options
        if o.model_config_file:
            return load_model_config_file(o.model_config_file)
        return [ModelConfig(o.model_name, base_path(o.model_base_path))]

    def start(self) -> ModelServer:
        o = self.options
        configs = self._model_configs()
        for c in configs:  # a bucket that is missing or refuses us: one line, before serving
            check_bucket(c.base_path, f"model {c.name!r} base path")
        metrics_path = load_monitoring_config(o.monitoring_config_file or None)
        if o.enable_batching:
            batching = load_batching_parameters(o.batching_parameters_file or None)
            if not o.batching_parameters_file:
                batching = dataclasses.replace(batching,
                                               num_batch_threads=min(4, os.cpu_count() or 1))
        else:
            # Each request is its own call (TF Serving's Session::Run, no batching
            # queue): 4 run at once, and up to UNBATCHED_MAX_WAITING requests of any size
            # wait for a thread (the scheduler counts requests, not rows, without batching).
            batching = BatchingOptions(max_batch_size=1,
                                       max_enqueued_batches=UNBATCHED_MAX_WAITING,
                                       num_batch_threads=4)
        tags = tuple(t.strip() for t in o.saved_model_tags.split(",") if t.strip())
        loader = functools.partial(load_servable, tags=tags,
                                   warmup_iterations=o.num_request_iterations_for_warmup,
                                   prefer_tflite=o.prefer_tflite_model,
                                   tflite_pools=o.num_tflite_pools)
        self.manager = ModelManager(configs, o.file_system_poll_wait_seconds,
                                    warmup=o.enable_model_warmup, loader=loader)
        self.manager.allow_unavailable_labels = o.allow_version_labels_for_unavailable_models
        self.scheduler = BatchScheduler(batching, batching=o.enable_batching)
        self.metrics = Metrics(depth=self.scheduler.depth, loaded=self.manager.loaded_versions,
                               batching=o.enable_batching,
                               thread_pool_name=batching.thread_pool_name)
        self.scheduler.metrics = self.metrics
        self.service = ModelService(self.manager, self.scheduler, self.metrics,
                                    o.enable_signature_method_name_check,
                                    o.enable_serialization_as_tensor_content,
                                    o.enable_profiler)
        import_runtime()
        set_parallelism(o.tensorflow_intra_op_parallelism or o.tensorflow_session_parallelism,
                        o.tensorflow_inter_op_parallelism or o.tensorflow_session_parallelism)
        freeze_heap()
        self.manager.start()
        gc.collect()
        self.manager.listeners.append(self._on_version_change)
        g0, g1, g2 = gc.get_threshold()
        if 0 < g0 < GC_GEN0_THRESHOLD:
            gc.set_threshold(GC_GEN0_THRESHOLD, g1, g2)
        timeout_s = max(o.rest_api_timeout_in_ms, 0) / 1e3
        self._http = HttpServerState(RestApi(self.service, metrics_path, timeout_s),
                                     o.rest_api_max_body_bytes, timeout_s)
        self._loop = new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="serving-loop",
                                        daemon=True)
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._bind(), self._loop).result(timeout=60)
        except BaseException:
            self.stop(grace=0)
            raise
        self._write_ports()
        if (self._models is None and o.model_config_file
                and o.model_config_file_poll_wait_seconds > 0):
            self._config_thread = threading.Thread(target=self._poll_config,
                                                   name="model-config-poll", daemon=True)
            self._config_thread.start()
        return self

    def _poll_config(self) -> None:
        wait = self.options.model_config_file_poll_wait_seconds
        while not self._stopped.wait(wait):
            self.reload_config_file()

    def reload_config_file(self) -> bool:
        """Reads --model_config_file and applies it; False on any failure.

        TF Serving applies the file on every poll; here a config equal to the one being
        served is skipped unless the last attempt failed (a label that named a version
        still loading is applied once that version is available). A config set over
        gRPC meanwhile is replaced by the file's at the next poll, as in TF Serving.
        """
        from baton.serving.config import ConfigError
        from baton.serving.status import ServingError

        path = self.options.model_config_file
        try:
            configs = load_model_config_file(path)
        except ConfigError as e:
            log.error("Failed to read ModelServerConfig file: %s", e)
            return False
        if not self._config_failed and configs == self.manager.configs():
            return True
        try:
            self.manager.reload_config(configs)
        except ServingError as e:
            self._config_failed = True
            log.error("PollFilesystemAndReloadConfig failed to ReloadConfig: %s", e.message)
            return False
        self._config_failed = False
        log.info("Reloaded model config from %s: %s", path, [c.name for c in configs])
        return True

    @staticmethod
    def _on_version_change(name: str, version: int, state: str) -> None:
        if state in ("AVAILABLE", "END", "FAILED"):
            # the loader's garbage, or the unloaded version's cycles: only unfrozen
            # objects are walked (the loaded versions and little else), 1-2 ms
            gc.collect()

    async def _bind(self) -> None:
        import grpc

        from baton.serving.grpc_service import add_services
        from baton.serving.h2grpc import GrpcServer, channel_options

        o = self.options
        loop = asyncio.get_running_loop()
        self._rest_server = None
        if o.rest_api_port or o.bind_free_ports:
            self._rest_server = await loop.create_server(
                lambda: HttpProtocol(self._http), o.host,
                0 if o.bind_free_ports else o.rest_api_port, backlog=2048, reuse_address=True)
            self.rest_port = self._rest_server.sockets[0].getsockname()[1]
        mb = o.grpc_max_message_bytes
        want = 0 if o.bind_free_ports else o.port
        # --grpc_socket_path: gRPC on a Unix socket too; with --port=0 on it only (TF Serving)
        tcp = not (o.grpc_socket_path and o.port == 0 and not o.bind_free_ports)
        channel_args = grpc_channel_arguments(o.grpc_channel_arguments)
        if grpc_implementation() == "native":
            # the message sizes and grpc.max_concurrent_streams, as grpc core reads them
            # (the user's value wins over --grpc_max_message_bytes, as for grpcio)
            kwargs, ignored = channel_options(channel_args, mb, mb)
            native = GrpcServer(**kwargs)
            self._grpc = native
            add_services(native, self.service)
            if ignored:  # grpc core's other settings; the native server has no grpc core
                log.info("--grpc_channel_arguments the native gRPC server does not apply "
                         "(grpcio's does, BATON_SERVING_GRPC=grpcio): %s", ",".join(ignored))
            if o.grpc_socket_path:
                with contextlib.suppress(OSError):  # a stale socket, as grpc core unlinks it
                    if stat.S_ISSOCK(os.stat(o.grpc_socket_path).st_mode):
                        os.unlink(o.grpc_socket_path)
                await native.bind_unix(o.grpc_socket_path)
            try:
                if tcp:
                    self.grpc_port = await native.bind_tcp(o.host, want)
            except OSError as e:
                raise OSError(f"cannot bind gRPC to {o.host}:{want}: {e}") from None
        else:
            args = dict([("grpc.max_receive_message_length", mb),
                         ("grpc.max_send_message_length", mb), ("grpc.so_reuseport", 0),
                         *channel_args])  # the user's value of a key wins
            aio = grpc.aio.server(options=list(args.items()))
            self._grpc = aio
            add_services(aio, self.service)
            if o.grpc_socket_path and not aio.add_insecure_port(f"unix:{o.grpc_socket_path}"):
                raise OSError(f"cannot bind gRPC to unix:{o.grpc_socket_path}")
            host = f"[{o.host}]" if ":" in o.host else o.host
            if tcp:
                self.grpc_port = aio.add_insecure_port(f"{host}:{want}")
                if not self.grpc_port:
                    raise OSError(f"cannot bind gRPC to {o.host}:{want}")
            await aio.start()
        self._sweeper = loop.create_task(self._sweep())
        if self.grpc_port:
            log.info("Running gRPC ModelServer at %s:%s ...", o.host, self.grpc_port)
        if o.grpc_socket_path:
            log.info("Running gRPC ModelServer at UNIX socket %s ...", o.grpc_socket_path)
        if self.rest_port:
            log.info("Exporting HTTP/REST API at:%s:%s ...", o.host, self.rest_port)

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(0.05)
            self._http.sweep()

    def _write_ports(self) -> None:
        if self.options.ports_file:
            import json

            tmp = self.options.ports_file + ".tmp"
            with open(tmp, "w") as f:
                json.dump({"grpc": self.grpc_port, "rest": self.rest_port, "pid": os.getpid()}, f)
            os.replace(tmp, self.options.ports_file)

    # -- stop ------------------------------------------------------------------------
    def stop(self, grace: float = 10.0) -> None:
        """Graceful: refuse new requests, finish in-flight ones (up to `grace` s)."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        loop = self._loop
        if loop is not None and loop.is_running():
            fut = asyncio.run_coroutine_threadsafe(self._shutdown(grace), loop)
            try:
                fut.result(timeout=grace + 10)
            except Exception:  # noqa: BLE001 - shutting down regardless
                log.exception("error during shutdown")
            loop.call_soon_threadsafe(loop.stop)
            assert self._thread is not None  # set together with self._loop in start()
            self._thread.join(timeout=10)
            loop.close()
        if self._config_thread is not None:
            self._config_thread.join(timeout=30)
        if hasattr(self, "scheduler"):
            self.scheduler.close(timeout=grace)
        if hasattr(self, "manager"):
            self.manager.stop()

    async def _shutdown(self, grace: float) -> None:
        self._http.closing = True
        rest_server = getattr(self, "_rest_server", None)
        if rest_server is not None:
            rest_server.close()
        stop_grpc = None
        if getattr(self, "_grpc", None) is not None:
            stop_grpc = asyncio.ensure_future(self._grpc.stop(grace))
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and (self._http.in_flight or not self.scheduler.idle):
            await asyncio.sleep(0.01)
        for c in list(self._http.connections):
            if not c.busy and c.transport is not None:
                c.transport.close()
        if stop_grpc is not None:
            await stop_grpc
        if getattr(self, "_sweeper", None) is not None:
            self._sweeper.cancel()

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
