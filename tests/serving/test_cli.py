"""`baton serve`'s flags, parsed by absl.flags on a private FlagValues (serving/cli.py)."""

import dataclasses

import pytest
from absl import flags

from baton.serving import cli
from baton.serving.cli import UsageError, main, parse_args
from baton.serving.server import ServerOptions


def test_flag_defaults_are_server_options_defaults():
    defaults = {f.name: f.default for f in dataclasses.fields(ServerOptions)}
    assert {name: default for name, (_, default, _) in cli.SERVER_FLAGS.items()} == defaults
    fv = cli.flag_values()
    assert {name: fv[name].default for name in cli.SERVER_FLAGS} == defaults


def test_parsing_never_touches_the_global_flags():
    before = set(flags.FLAGS)
    parse_args(["--model_base_path=/m", "--port=9000"])
    assert set(flags.FLAGS) == before and "port" not in flags.FLAGS
    # parse state lives in a fresh FlagValues: one parse does not leak into the next
    assert parse_args(["--model_base_path=/m"]).port == 8500


def test_boolean_forms():
    base = ["--model_base_path=/m"]
    assert parse_args([*base, "--enable_batching"]).enable_batching
    assert parse_args([*base, "--enable_batching=true"]).enable_batching
    assert parse_args([*base, "--enable_batching=1"]).enable_batching
    assert not parse_args([*base, "--enable_model_warmup=false"]).enable_model_warmup
    assert not parse_args([*base, "--noenable_model_warmup"]).enable_model_warmup
    assert parse_args([*base, "--enable_batching", "--enable_batching=false"]) == parse_args(base)


def test_ignored_flags_are_accepted_with_tf_serving_types():
    o = parse_args(["--model_base_path=/m", "--rest_api_num_threads", "16",
                    "--grpc_max_threads=8", "--xla_cpu_compilation_enabled",
                    "--noflush_filesystem_caches", "--max_num_load_retries=2",
                    "--per_process_gpu_memory_fraction=0.5"])
    assert o == ServerOptions(model_base_path="/m")
    with pytest.raises(UsageError, match="--rest_api_num_threads must be an integer. "
                                         "Received: 'lots'"):
        parse_args(["--model_base_path=/m", "--rest_api_num_threads=lots"])


@pytest.mark.parametrize("argv, message", [
    (["--port=70000"], "--port must be an integer in the range [0, 65535]. Received: '70000'"),
    (["--rest_api_timeout_in_ms=-1"],
     "--rest_api_timeout_in_ms must be a non-negative integer. Received: '-1'"),
    (["--file_system_poll_wait_seconds=soon"],
     "--file_system_poll_wait_seconds must be a number. Received: 'soon'"),
    (["--port"], "--port needs a value. Received: nothing"),
    (["--enable_batching", "false"], "unexpected argument. Received: 'false' (a boolean flag "
                                     "takes its value after '=': --enable_batching=false)"),
    (["extra"], "unexpected argument. Received: 'extra'"),
    (["--nomodel_name"], "unknown flag --nomodel_name; did you mean --model_name?"),
    (["--noenable_batching=1"], "--noenable_batching=1 does not take an argument"),
])
def test_usage_error_messages(argv, message, capsys):
    with pytest.raises(UsageError) as e:
        parse_args(["--model_base_path=/m", *argv])
    assert str(e.value) == message
    assert main(["--model_base_path=/m", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and cli.USAGE_LINE in err


def test_flagfile(tmp_path):
    f = tmp_path / "serve.flags"
    f.write_text("--model_name=penguins\n--model_base_path=/m\n--port=9100\n")
    o = parse_args([f"--flagfile={f}", "--port=9200"])
    assert (o.model_name, o.model_base_path, o.port) == ("penguins", "/m", 9200)


def test_help_lists_every_flag_and_exits_0(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(cli.USAGE_LINE)
    for name in [*cli.SERVER_FLAGS, *cli.IGNORED, *cli.REFUSED, "version"]:
        assert f"--{name}:" in out or f"--[no]{name}:" in out
    assert "(default: '8500')" in out and "(default: 'true')" in out


# tensorflow_model_server's whole flag list (model_servers/main.cc), each implemented here,
# accepted as a no-op tuning knob, or refused by name.
TF_SERVING_FLAGS = [
    "port", "grpc_socket_path", "rest_api_port", "rest_api_num_threads",
    "rest_api_timeout_in_ms", "rest_api_enable_cors_support", "enable_batching",
    "allow_version_labels_for_unavailable_models", "batching_parameters_file",
    "enable_per_model_batching_parameters", "model_config_file",
    "model_config_file_poll_wait_seconds", "model_name", "model_base_path",
    "num_load_threads", "num_unload_threads", "max_num_load_retries",
    "load_retry_interval_micros", "file_system_poll_wait_seconds", "flush_filesystem_caches",
    "tensorflow_session_parallelism", "tensorflow_session_config_file",
    "tensorflow_intra_op_parallelism", "tensorflow_inter_op_parallelism",
    "use_alts_credentials", "ssl_config_file", "platform_config_file",
    "per_process_gpu_memory_fraction", "saved_model_tags", "grpc_channel_arguments",
    "grpc_max_threads", "enable_model_warmup", "num_request_iterations_for_warmup", "version",
    "monitoring_config_file", "remove_unused_fields_from_bundle_metagraph",
    "prefer_tflite_model", "num_tflite_pools", "num_tflite_interpreters_per_pool",
    "enable_signature_method_name_check", "xla_cpu_compilation_enabled",
    "xla_gpu_compilation_enabled", "enable_profiler", "thread_pool_factory_config_file",
    "mixed_precision", "skip_initialize_tpu", "enable_grpc_healthcheck_service",
    "enable_serialization_as_tensor_content",
]


def test_every_tf_serving_flag_is_implemented_ignored_or_refused():
    known = {*cli.SERVER_FLAGS, *cli.IGNORED, *cli.REFUSED, "version"}
    assert set(TF_SERVING_FLAGS) - known == set()
    assert not set(cli.IGNORED) & set(cli.REFUSED) and not set(cli.REFUSED) & set(cli.SERVER_FLAGS)


def test_implemented_tf_serving_flags_reach_server_options():
    o = parse_args(["--model_base_path=/m", "--grpc_socket_path=/tmp/s.sock",
                    "--grpc_channel_arguments=grpc.max_connection_age_ms=2000,a=b",
                    "--enable_signature_method_name_check",
                    "--enable_serialization_as_tensor_content", "--enable_profiler=false",
                    "--num_request_iterations_for_warmup=3", "--saved_model_tags=serve,gpu",
                    "--tensorflow_intra_op_parallelism=2", "--tensorflow_inter_op_parallelism=1",
                    "--allow_version_labels_for_unavailable_models",
                    "--prefer_tflite_model", "--num_tflite_pools=3"])
    assert (o.grpc_socket_path, o.grpc_channel_arguments) == (
        "/tmp/s.sock", "grpc.max_connection_age_ms=2000,a=b")
    assert o.enable_signature_method_name_check and o.enable_serialization_as_tensor_content
    assert not o.enable_profiler and o.num_request_iterations_for_warmup == 3
    assert (o.saved_model_tags, o.tensorflow_intra_op_parallelism,
            o.tensorflow_inter_op_parallelism) == ("serve,gpu", 2, 1)
    assert o.allow_version_labels_for_unavailable_models
    assert o.prefer_tflite_model and o.num_tflite_pools == 3


@pytest.mark.parametrize("arg", ["--ssl_config_file=/etc/ssl.config", "--use_alts_credentials",
                                 "--mixed_precision=bfloat16",
                                 "--enable_grpc_healthcheck_service",
                                 "--platform_config_file=p.config",
                                 "--rest_api_enable_cors_support"])
def test_unsupported_tf_serving_flags_are_refused_by_name(arg, capsys):
    name = arg.split("=")[0].lstrip("-")
    with pytest.raises(UsageError, match=f"--{name} is not supported by baton serve"):
        parse_args(["--model_base_path=/m", arg])
    assert main(["--model_base_path=/m", arg]) == 2
    # at their defaults they are accepted (a flag file written for tensorflow_model_server)
    default = cli.REFUSED[name][1]
    value = str(default).lower() if isinstance(default, bool) else default
    assert parse_args(["--model_base_path=/m", f"--{name}={value}"]) == \
        ServerOptions(model_base_path="/m")


def test_bad_grpc_channel_arguments_are_a_usage_error():
    with pytest.raises(UsageError, match="key=value pairs. Received: 'nokey'"):
        parse_args(["--model_base_path=/m", "--grpc_channel_arguments=a=1,nokey"])


def test_version(capsys):
    assert main(["--version"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("TensorFlow ModelServer: baton ")
    assert out[1].startswith("TensorFlow Library: 2.")


# tensorflow_model_server's default (model_servers/server.h: `http_port = 0`, REST off).
UPSTREAM_REST_API_PORT_DEFAULT = 0


def test_rest_api_port_defaults_to_8501_unlike_tensorflow_model_server():
    """A deliberate difference (docs/serving.md): REST is on at 8501 unless told otherwise,
    the port the tensorflow/serving image's entrypoint passes and Baton's docs and demo
    use; --rest_api_port=0 turns it off, as upstream."""
    o = parse_args(["--model_base_path=/m"])
    assert o.rest_api_port == 8501 != UPSTREAM_REST_API_PORT_DEFAULT
    assert o.port == 8500  # the gRPC default is upstream's
    assert parse_args(["--model_base_path=/m", "--rest_api_port=0"]).rest_api_port == 0
    assert "tensorflow_model_server's default is 0" in " ".join(cli.usage().split())


def test_a_server_that_cannot_listen_exits_failed(monkeypatch, capsys):
    from baton.errors import EXIT_FAILED
    from baton.serving import server

    def start(self):
        raise OSError("[Errno 98] Address already in use")

    monkeypatch.setattr(server.ModelServer, "start", start)
    monkeypatch.setattr(server.ModelServer, "stop", lambda self, grace=10.0: None)
    assert main(["--model_base_path=/m", "--port=8500"]) == EXIT_FAILED
    assert "cannot listen on 127.0.0.1: [Errno 98]" in capsys.readouterr().err
