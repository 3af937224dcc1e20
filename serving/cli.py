"""`baton serve`: tensorflow_model_server's flags, our server.

Accepts `--flag=value` and `--flag value`; booleans also as bare `--flag`. Usage errors
exit 2 naming the flag and the value received. SIGTERM/SIGINT stop the server
gracefully (in-flight requests finish, new ones are refused), then exit 0.
"""

from __future__ import annotations

import difflib
import logging
import signal
import sys
import threading

from baton.errors import EXIT_USAGE, UsageError

_TRUE = {"true", "1", "yes", "t", "y"}
_FALSE = {"false", "0", "no", "f", "n"}

# flag -> (type, help). Types: int, float, str, bool.
FLAGS: dict[str, tuple[type, str]] = {
    "port": (int, "gRPC port (default 8500)"),
    "rest_api_port": (int, "REST port (default 8501; 0 disables REST)"),
    "host": (str, "address to bind (default 127.0.0.1)"),
    "model_name": (str, "name of the model (default 'default')"),
    "model_base_path": (str, "directory holding <version>/saved_model.pb"),
    "model_config_file": (str, "ModelServerConfig text proto (overrides the two above)"),
    "model_config_file_poll_wait_seconds": (
        float, "seconds between re-reads of --model_config_file (default 0: read once)"),
    "enable_batching": (bool, "merge concurrent requests into one signature call"),
    "batching_parameters_file": (str, "BatchingParameters text proto"),
    "file_system_poll_wait_seconds": (float, "seconds between base path polls (default 1)"),
    "monitoring_config_file": (str, "MonitoringConfig text proto (Prometheus path)"),
    "rest_api_timeout_in_ms": (int, "REST request timeout (default 30000)"),
    "enable_model_warmup": (bool, "replay assets.extra warmup requests (default true)"),
    "grpc_max_message_bytes": (int, "ours: max gRPC message size"),
    "rest_api_max_body_bytes": (int, "ours: larger REST bodies get 413 (default 32 MiB)"),
    "bind_free_ports": (bool, "ours: bind both APIs to free ports and print them"),
    "ports_file": (str, "ours: write {'grpc','rest','pid'} JSON here once listening"),
}
# Accepted for drop-in compatibility; no effect here.
IGNORED = {"rest_api_num_threads", "tensorflow_session_parallelism",
           "tensorflow_intra_op_parallelism", "tensorflow_inter_op_parallelism",
           "enable_signature_method_name_check",
           "xla_cpu_compilation_enabled", "per_process_gpu_memory_fraction"}

USAGE = "usage: baton serve --model_name=NAME --model_base_path=DIR [flags]\n\nflags:\n" + "".join(
    f"  --{k:<32}{v[1]}\n" for k, v in FLAGS.items())


def _convert(flag: str, kind: type, raw: str):
    if kind is bool:
        low = raw.lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise UsageError(f"--{flag} must be true or false. Received: {raw!r}")
    try:
        value = kind(raw)
    except ValueError:
        raise UsageError(f"--{flag} must be {'an integer' if kind is int else 'a number'}. "
                         f"Received: {raw!r}") from None
    if flag in ("port", "rest_api_port") and not 0 <= value <= 65535:
        raise UsageError(f"--{flag} must be a port in 0..65535. Received: {raw!r}")
    if flag in ("rest_api_timeout_in_ms", "grpc_max_message_bytes",
                "rest_api_max_body_bytes") and value < 0:
        raise UsageError(f"--{flag} must be >= 0. Received: {raw!r}")
    return value


def parse_args(argv: list[str]):
    """Returns ServerOptions; raises UsageError naming the flag and value received."""
    from baton.serving.server import ServerOptions

    values: dict = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if not arg.startswith("--") or arg == "--":
            raise UsageError(f"unexpected argument. Received: {arg!r}")
        name, eq, raw = arg[2:].partition("=")
        negated = not eq and name.startswith("no") and FLAGS.get(name[2:], (None,))[0] is bool
        key = name[2:] if negated else name
        if key in IGNORED:
            if not eq and i < len(argv) and not argv[i].startswith("--"):
                i += 1
            continue
        if key not in FLAGS:
            hint = difflib.get_close_matches(key, FLAGS, n=1)
            raise UsageError(f"unknown flag --{name}" + (f"; did you mean --{hint[0]}?"
                                                         if hint else ""))
        kind = FLAGS[key][0]
        if negated:
            values[key] = False
            continue
        if not eq:
            if kind is bool and (i >= len(argv) or argv[i].lower() not in _TRUE | _FALSE):
                values[key] = True
                continue
            if i >= len(argv):
                raise UsageError(f"--{key} needs a value. Received: nothing")
            raw = argv[i]
            i += 1
        values[key] = _convert(key, kind, raw)
    opts = ServerOptions(**values)
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
        print(USAGE)
        return 0
    try:
        opts = parse_args(argv)
    except UsageError as e:
        print(f"baton serve: {e}\n\n{USAGE}", file=sys.stderr)
        return EXIT_USAGE
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    from baton.serving.config import ConfigError
    from baton.serving.server import ModelServer

    server = ModelServer(opts)
    try:
        server.start()
    except ConfigError as e:
        print(f"baton serve: {e}", file=sys.stderr)
        server.stop(grace=0)
        return EXIT_USAGE
    except OSError as e:
        print(f"baton serve: cannot listen on {opts.host}: {e}", file=sys.stderr)
        server.stop(grace=0)
        return 1
    print(f"Running gRPC ModelServer at {opts.host}:{server.grpc_port} ...", flush=True)
    if server.rest_port:
        print(f"Exporting HTTP/REST API at:{opts.host}:{server.rest_port} ...", flush=True)
    done = threading.Event()

    def on_signal(signum, frame):
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not done.wait(0.5):
        pass
    logging.getLogger("serving").info("shutting down")
    server.stop(grace=10.0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
