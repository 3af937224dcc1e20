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
                    "--tensorflow_session_parallelism=2", "--xla_cpu_compilation_enabled",
                    "--noenable_signature_method_name_check",
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
    for name in [*cli.SERVER_FLAGS, *cli.IGNORED]:
        assert f"--{name}:" in out or f"--[no]{name}:" in out
    assert "(default: '8500')" in out and "(default: 'true')" in out
