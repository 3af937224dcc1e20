"""`baton serve`: tensorflow_model_server's flags, our server.

The flags are parsed by absl.flags (the library TensorFlow's own Python tools use) on a
private `FlagValues`, never the global `absl.flags.FLAGS`: `--flag=value` and `--flag value`;
booleans also as bare `--flag`, `--noflag` and `--flag=true|false`; `--flagfile=FILE` reads
more flags from a file. Usage errors exit 2 naming the flag and the value received; an
unknown flag gets a "did you mean". SIGTERM/SIGINT stop the server gracefully (in-flight
requests finish, new ones are refused), then exit 0.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

from absl import flags

from baton import logs
from baton.configs import closest
from baton.errors import EXIT_FAILED, EXIT_USAGE, BatonError, UsageError
from baton.serving.conventions import DEFAULT_GRPC_PORT, DEFAULT_REST_PORT, SERVING

log = logs.get("serving.cli")

_PORT = flags.IntegerParser(0, 65535)
_NON_NEGATIVE = flags.IntegerParser(0)

# flag -> (absl parser, default, help). The defaults are ServerOptions' (a test checks);
# only flags given on the command line are passed on, so ServerOptions stays the one source.
SERVER_FLAGS: dict[str, tuple[flags.ArgumentParser, Any, str]] = {
    "port": (_PORT, DEFAULT_GRPC_PORT, "gRPC port"),
    "rest_api_port": (_PORT, DEFAULT_REST_PORT,
                      "REST port (0 disables REST; tensorflow_model_server's default is 0)"),
    "host": (flags.ArgumentParser(), "127.0.0.1", "address to bind"),
    "model_name": (flags.ArgumentParser(), "default", "name of the model"),
    "model_base_path": (flags.ArgumentParser(), "",
                        "directory holding <version>/saved_model.pb"),
    "model_config_file": (flags.ArgumentParser(), "",
                          "ModelServerConfig text proto (instead of the two above)"),
    "model_config_file_poll_wait_seconds": (
        flags.FloatParser(), 0.0, "seconds between re-reads of --model_config_file (0: once)"),
    "enable_batching": (flags.BooleanParser(), False,
                        "merge concurrent requests into one signature call"),
    "batching_parameters_file": (flags.ArgumentParser(), "", "BatchingParameters text proto"),
    "file_system_poll_wait_seconds": (flags.FloatParser(), 1.0,
                                      "seconds between base path polls"),
    "monitoring_config_file": (flags.ArgumentParser(), "",
                               "MonitoringConfig text proto (Prometheus path)"),
    "rest_api_timeout_in_ms": (_NON_NEGATIVE, 30000, "REST request timeout"),
    "enable_model_warmup": (flags.BooleanParser(), True, "replay assets.extra warmup requests"),
    "grpc_max_message_bytes": (_NON_NEGATIVE, 64 * 1024 * 1024, "ours: max gRPC message size"),
    "rest_api_max_body_bytes": (_NON_NEGATIVE, 32 * 1024 * 1024,
                                "ours: larger REST bodies get 413"),
    "bind_free_ports": (flags.BooleanParser(), False,
                        "ours: bind both APIs to free ports and print them"),
    "ports_file": (flags.ArgumentParser(), "",
                   "ours: write {'grpc','rest','pid'} JSON here once listening"),
    "max_connections": (_NON_NEGATIVE, 0,
                        "ours: open connections of both APIs together (0: the descriptor "
                        "limit less a reserve, at most 10000)"),
    "connection_idle_timeout_seconds": (
        flags.FloatParser(0.0), 60.0,
        "ours: a connection without a request in progress is closed after this (0: never)"),
    "grpc_socket_path": (flags.ArgumentParser(), "",
                         "also serve gRPC on this Unix socket (with --port=0: only there)"),
    "grpc_channel_arguments": (flags.ArgumentParser(), "",
                               "comma-separated key=value gRPC server arguments"),
    "enable_signature_method_name_check": (
        flags.BooleanParser(), False,
        "Classify/Regress/MultiInference accept only signatures of their method_name"),
    "enable_serialization_as_tensor_content": (
        flags.BooleanParser(), False, "Predict outputs as tensor_content, not typed fields"),
    "enable_profiler": (flags.BooleanParser(), True,
                        "serve tensorflow.ProfilerService (TensorBoard's capture profile)"),
    "num_request_iterations_for_warmup": (_NON_NEGATIVE, 0,
                                          "replays of each warmup record (0: once)"),
    "saved_model_tags": (flags.ArgumentParser(), SERVING,
                         "comma-separated tags of the meta graph to load"),
    "tensorflow_session_parallelism": (_NON_NEGATIVE, 0,
                                       "TensorFlow intra and inter op threads (0: auto)"),
    "tensorflow_intra_op_parallelism": (_NON_NEGATIVE, 0, "intra-op threads (0: auto)"),
    "tensorflow_inter_op_parallelism": (_NON_NEGATIVE, 0, "inter-op threads (0: auto)"),
    "prefer_tflite_model": (flags.BooleanParser(), False,
                            "serve <version>/model.tflite (LiteRT) when it is there"),
    "num_tflite_pools": (flags.IntegerParser(1), 1, "LiteRT interpreters per TFLite model"),
    "allow_version_labels_for_unavailable_models": (
        flags.BooleanParser(), False,
        "a new label may name a version that is not available yet"),
}
# Accepted for drop-in compatibility, with tensorflow_model_server's types; no effect here:
# each tunes machinery this server does not have (why, per flag, in docs/serving.md).
IGNORED: dict[str, flags.ArgumentParser] = {
    "rest_api_num_threads": flags.IntegerParser(),  # one event loop, no HTTP thread pool
    "grpc_max_threads": flags.IntegerParser(),  # the gRPC server runs on the same loop
    "num_load_threads": flags.IntegerParser(),  # versions load one at a time, off the loop
    "num_unload_threads": flags.IntegerParser(),
    "max_num_load_retries": flags.IntegerParser(),  # a failed version is retried when its
    "load_retry_interval_micros": flags.IntegerParser(),  # directory changes or after 30 s
    "flush_filesystem_caches": flags.BooleanParser(),
    "remove_unused_fields_from_bundle_metagraph": flags.BooleanParser(),
    "xla_cpu_compilation_enabled": flags.BooleanParser(),  # TF2 functions jit as exported
    "xla_gpu_compilation_enabled": flags.BooleanParser(),  # no GPU serving path
    "per_process_gpu_memory_fraction": flags.FloatParser(),
    "skip_initialize_tpu": flags.BooleanParser(),  # no TPU serving path
    # each interpreter runs one call at a time; the batcher batches requests (tflite_servable)
    "num_tflite_interpreters_per_pool": flags.IntegerParser(),
}
# tensorflow_model_server flags for features this server does not have: accepted at their
# default, refused by name with any other value (exit 2), never silently ignored.
REFUSED: dict[str, tuple[flags.ArgumentParser, Any, str]] = {
    "ssl_config_file": (flags.ArgumentParser(), "",
                        "TLS is not implemented; terminate TLS in front of the server"),
    "use_alts_credentials": (flags.BooleanParser(), False, "ALTS is not implemented"),
    "platform_config_file": (flags.ArgumentParser(), "",
                             "only the TensorFlow SavedModel platform is served"),
    "tensorflow_session_config_file": (
        flags.ArgumentParser(), "",
        "no TF1 Session here; use --tensorflow_intra_op_parallelism/"
        "--tensorflow_inter_op_parallelism"),
    "enable_per_model_batching_parameters": (
        flags.BooleanParser(), False, "one --batching_parameters_file serves every model"),
    "thread_pool_factory_config_file": (flags.ArgumentParser(), "",
                                        "custom thread pools are not implemented"),
    "mixed_precision": (flags.ArgumentParser(), "", "mixed precision is not implemented"),
    "enable_grpc_healthcheck_service": (
        flags.BooleanParser(), False,
        "grpc.health.v1 is not served; probe GET /v1/models/NAME (REST) or GetModelStatus"),
    "rest_api_enable_cors_support": (
        flags.BooleanParser(), False, "CORS preflight is not implemented"),
}
USAGE_LINE = "usage: baton serve --model_name=NAME --model_base_path=DIR [flags]"


class _Invalid(Exception):
    """A flag value that does not parse. Deliberately not a ValueError: absl.flags recasts
    a parser's ValueError into its own message, which names neither flag nor value our way."""


class _Phrased(flags.ArgumentParser):
    """A stock absl parser whose failure names the flag and the value received."""

    def __init__(self, *, name: str, inner: flags.ArgumentParser):
        self.name = name
        self.inner = inner
        self.syntactic_help = inner.syntactic_help

    def flag_type(self) -> str:
        return self.inner.flag_type()

    def parse(self, argument):
        try:
            return self.inner.parse(argument)
        except (TypeError, ValueError):
            raise _Invalid(f"--{self.name} must be {self._expected(argument)}. "
                           f"Received: {argument!r}") from None

    def _expected(self, argument) -> str:
        if isinstance(self.inner, flags.BooleanParser):
            return "true or false"
        if isinstance(self.inner, flags.IntegerParser):
            try:  # an integer out of the flag's range, or no integer at all?
                flags.IntegerParser().parse(argument)
            except (TypeError, ValueError):
                return "an integer"
        return self.inner.syntactic_help or "valid"


def flag_values() -> flags.FlagValues:
    """A fresh FlagValues holding `baton serve`'s flags (absl keeps parse state in it)."""
    fv = flags.FlagValues()
    table = [(n, p, d, h) for n, (p, d, h) in SERVER_FLAGS.items()]
    table += [(n, p, None, "accepted for compatibility; no effect")
              for n, p in IGNORED.items()]
    table += [(n, p, d, f"refused unless {d!r}: {why}") for n, (p, d, why) in REFUSED.items()]
    table.append(("version", flags.BooleanParser(), False, "print the versions and exit"))
    for name, parser, default, help_text in table:
        flag = flags.Flag(_Phrased(name=name, inner=parser), None, name,
                          default, help_text, boolean=isinstance(parser, flags.BooleanParser))
        flags.DEFINE_flag(flag, flag_values=fv, module_name="baton serve")
    return fv


def usage() -> str:
    return f"{USAGE_LINE}\n{flag_values().get_help(prefix='')}\n"


def _parse(argv: list[str]) -> dict[str, Any]:
    """The flags given in argv and their values; UsageError naming the flag and value."""
    fv = flag_values()
    try:
        rest = fv(["baton serve", *argv])[1:]
    except _Invalid as e:
        raise UsageError(str(e)) from None
    except flags.UnrecognizedFlagError as e:
        hint = closest(e.flagname, [*SERVER_FLAGS, *IGNORED, *REFUSED])
        raise UsageError(f"unknown flag --{e.flagname}"
                         + (f"; did you mean --{hint}?" if hint else "")) from None
    except flags.Error as e:
        message = str(e)
        if message.startswith("Missing value for flag "):  # only the last argument can be
            raise UsageError(f"{message.rsplit(' ', 1)[-1]} needs a value. "
                             "Received: nothing") from None
        raise UsageError(message.removeprefix("ERROR:: ")) from None
    except ValueError as e:  # `--noenable_batching=1 does not take an argument`
        raise UsageError(str(e)) from None
    if rest:
        # absl stops at the first argument that is not a flag; the rest is left over
        where = len(argv) - len(rest)
        after = argv[where - 1] if where else ""
        name, tip = after.lstrip("-"), ""
        if after.startswith("-") and name in fv and fv[name].boolean:
            tip = f" (a boolean flag takes its value after '=': {after}={rest[0]})"
        raise UsageError(f"unexpected argument. Received: {rest[0]!r}{tip}")
    for name, (_, default, why) in REFUSED.items():
        if fv[name].present and fv[name].value != default:
            raise UsageError(f"--{name} is not supported by baton serve: {why}. "
                             f"Received: {fv[name].value!r}")
    return {name: fv[name].value for name in SERVER_FLAGS if fv[name].present}


def version_text() -> str:
    """What `--version` prints, in tensorflow_model_server's two-line form."""
    from importlib import metadata

    def v(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "unknown"

    return (f"TensorFlow ModelServer: baton {v('baton')} "
            f"(tensorflow-serving-api {v('tensorflow-serving-api')})\n"
            f"TensorFlow Library: {v('tensorflow')}")


def parse_args(argv: list[str]):
    """Returns ServerOptions; raises UsageError naming the flag and value received."""
    from baton.serving.server import ServerOptions

    opts = ServerOptions(**_parse(argv))
    if opts.grpc_channel_arguments:
        from baton.serving.config import ConfigError, grpc_channel_arguments

        try:
            grpc_channel_arguments(opts.grpc_channel_arguments)
        except ConfigError as e:
            raise UsageError(str(e)) from None
    if not opts.model_config_file and not opts.model_base_path:
        raise UsageError("--model_base_path (or --model_config_file) is required. "
                         "Received: nothing")
    if opts.model_config_file and opts.model_base_path:
        raise UsageError("give --model_config_file or --model_base_path, not both. Received: "
                         f"--model_config_file={opts.model_config_file!r} "
                         f"--model_base_path={opts.model_base_path!r}")
    if opts.batching_parameters_file and not opts.enable_batching:
        raise UsageError("--batching_parameters_file needs --enable_batching. Received: "
                         f"--batching_parameters_file={opts.batching_parameters_file!r}")
    return opts


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help", "--helpfull") for a in argv):
        print(usage())
        return 0
    if any(a in ("--version", "--version=true", "--version=1") for a in argv):
        print(version_text())
        return 0
    try:
        opts = parse_args(argv)
    except UsageError as e:
        print(f"baton serve: {e}\n{USAGE_LINE}\n(--help lists the flags)", file=sys.stderr)
        return EXIT_USAGE
    try:  # this is an edge too (`python -m baton.serving`): the environment is read here
        fmt, level = logs.settings_from_env(os.environ)
    except ValueError as e:
        print(f"baton serve: {e}", file=sys.stderr)
        return EXIT_USAGE
    logs.configure(fmt, level, timestamps=True)
    from baton.serving.config import ConfigError
    from baton.serving.server import ModelServer

    server = ModelServer(opts)
    try:
        server.start()
    except ConfigError as e:
        print(f"baton serve: {e}", file=sys.stderr)
        server.stop(grace=0)
        return EXIT_USAGE
    except BatonError as e:  # StorageError: a bucket base path missing or refusing us
        print(f"baton serve: {e}", file=sys.stderr)
        server.stop(grace=0)
        return e.exit_code
    except OSError as e:
        print(f"baton serve: cannot listen on {opts.host}: {e}", file=sys.stderr)
        server.stop(grace=0)
        return EXIT_FAILED
    if server.grpc_port:
        print(f"Running gRPC ModelServer at {opts.host}:{server.grpc_port} ...", flush=True)
    if opts.grpc_socket_path:
        print(f"Running gRPC ModelServer at UNIX socket {opts.grpc_socket_path} ...", flush=True)
    if server.rest_port:
        print(f"Exporting HTTP/REST API at:{opts.host}:{server.rest_port} ...", flush=True)
    done = threading.Event()

    def on_signal(signum, frame):
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not done.wait(0.5):
        pass
    log.info("shutting down")
    server.stop(grace=10.0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
