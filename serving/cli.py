"""`baton serve`: tensorflow_model_server's flags, our server.

The flags are parsed by absl.flags (the library TensorFlow's own Python tools use) on a
private `FlagValues`, never the global `absl.flags.FLAGS`: `--flag=value` and `--flag value`;
booleans also as bare `--flag`, `--noflag` and `--flag=true|false`; `--flagfile=FILE` reads
more flags from a file. Usage errors exit 2 naming the flag and the value received; an
unknown flag gets a "did you mean". SIGTERM/SIGINT stop the server gracefully (in-flight
requests finish, new ones are refused), then exit 0.
"""

from __future__ import annotations

import difflib
import os
import signal
import sys
import threading
from typing import Any

from absl import flags

from baton import logs
from baton.errors import EXIT_USAGE, UsageError
from baton.serving.conventions import DEFAULT_GRPC_PORT, DEFAULT_REST_PORT

log = logs.get("serving.cli")

_PORT = flags.IntegerParser(0, 65535)
_NON_NEGATIVE = flags.IntegerParser(0)

# flag -> (absl parser, default, help). The defaults are ServerOptions' (a test checks);
# only flags given on the command line are passed on, so ServerOptions stays the one source.
SERVER_FLAGS: dict[str, tuple[flags.ArgumentParser, Any, str]] = {
    "port": (_PORT, DEFAULT_GRPC_PORT, "gRPC port"),
    "rest_api_port": (_PORT, DEFAULT_REST_PORT, "REST port (0 disables REST)"),
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
}
# Accepted for drop-in compatibility, with tensorflow_model_server's types; no effect here.
IGNORED: dict[str, flags.ArgumentParser] = {
    "rest_api_num_threads": flags.IntegerParser(),
    "tensorflow_session_parallelism": flags.IntegerParser(),
    "tensorflow_intra_op_parallelism": flags.IntegerParser(),
    "tensorflow_inter_op_parallelism": flags.IntegerParser(),
    "enable_signature_method_name_check": flags.BooleanParser(),
    "xla_cpu_compilation_enabled": flags.BooleanParser(),
    "per_process_gpu_memory_fraction": flags.FloatParser(),
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
        hint = difflib.get_close_matches(e.flagname, SERVER_FLAGS, n=1)
        raise UsageError(f"unknown flag --{e.flagname}"
                         + (f"; did you mean --{hint[0]}?" if hint else "")) from None
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
    return {name: fv[name].value for name in SERVER_FLAGS if fv[name].present}


def parse_args(argv: list[str]):
    """Returns ServerOptions; raises UsageError naming the flag and value received."""
    from baton.serving.server import ServerOptions

    opts = ServerOptions(**_parse(argv))
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
    log.info("shutting down")
    server.stop(grace=10.0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
