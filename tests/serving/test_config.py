import pytest

from baton.serving.cli import UsageError, main, parse_args
from baton.serving.config import (
    BatchingOptions,
    ConfigError,
    VersionPolicy,
    load_batching_parameters,
    load_model_config_file,
    load_monitoring_config,
)


def test_batching_parameters_text_proto(tmp_path):
    p = tmp_path / "batching.config"
    p.write_text("max_batch_size { value: 64 }\nbatch_timeout_micros { value: 2000 }\n"
                 "max_enqueued_batches { value: 3 }\nnum_batch_threads { value: 2 }\n"
                 "allowed_batch_sizes: 8\nallowed_batch_sizes: 64\n")
    b = load_batching_parameters(str(p))
    assert (b.max_batch_size, b.batch_timeout_micros, b.max_enqueued_batches,
            b.num_batch_threads, b.allowed_batch_sizes) == (64, 2000, 3, 2, (8, 64))


def test_batching_parameters_errors_name_the_field(tmp_path):
    p = tmp_path / "b.config"
    p.write_text("max_batch_size { value: 64 }\nallowed_batch_sizes: 8\nallowed_batch_sizes: 32\n")
    with pytest.raises(ConfigError, match="allowed_batch_sizes.*64.*Received: \\[8, 32\\]"):
        load_batching_parameters(str(p))
    p.write_text("max_batch_sise { value: 64 }")
    with pytest.raises(ConfigError, match="max_batch_sise"):
        load_batching_parameters(str(p))
    with pytest.raises(ConfigError, match="max_batch_size must be >= 1. Received: 0"):
        BatchingOptions(max_batch_size=0)


def test_monitoring_config(tmp_path):
    p = tmp_path / "m.config"
    p.write_text('prometheus_config { enable: true, path: "/metrics/x" }')
    assert load_monitoring_config(str(p)) == "/metrics/x"
    p.write_text("prometheus_config { enable: false }")
    assert load_monitoring_config(str(p)) is None


def test_model_config_file_policies_and_labels(tmp_path):
    p = tmp_path / "models.config"
    p.write_text("""
model_config_list {
  config { name: "a" base_path: "/m/a" model_platform: "tensorflow"
           model_version_policy { specific { versions: 1 versions: 3 } }
           version_labels { key: "stable" value: 1 } version_labels { key: "canary" value: 3 } }
  config { name: "b" base_path: "/m/b" model_version_policy { all {} } }
  config { name: "c" base_path: "/m/c" model_version_policy { latest { num_versions: 2 } } }
  config { name: "d" base_path: "/m/d" }
}""")
    a, b, c, d = load_model_config_file(str(p))
    assert a.policy.select([1, 2, 3, 4]) == [1, 3]
    assert dict(a.labels) == {"stable": 1, "canary": 3}
    assert b.policy.select([5, 1, 2]) == [1, 2, 5]
    assert c.policy.select([1, 2, 3]) == [2, 3]
    assert d.policy == VersionPolicy("latest", 1) and d.policy.select([4, 9]) == [9]


def test_model_config_file_rejects_duplicates_and_control_characters(tmp_path):
    p = tmp_path / "models.config"
    p.write_text('model_config_list { config { name: "a" base_path: "/x" } '
                 'config { name: "a" base_path: "/y" } }')
    with pytest.raises(ConfigError, match="duplicate model name. Received: 'a'"):
        load_model_config_file(str(p))
    p.write_text('model_config_list { config { name: "a\\tb" base_path: "/x" } }')
    with pytest.raises(ConfigError, match="without control characters. Received: 'a\\\\tb'"):
        load_model_config_file(str(p))


def test_model_names_with_reserved_characters_are_accepted(tmp_path):
    """TF Serving takes any model name; http_rest_api_util_test's reserved characters
    reach the REST API percent-encoded (test_http_rest_api_util.py)."""
    name = "modelname!#$%&'()*+,/:;=?@[]"
    p = tmp_path / "models.config"
    quoted = name.replace("'", "\\'")
    p.write_text(f'model_config_list {{ config {{ name: "{quoted}" base_path: "/x" }} }}')
    assert [c.name for c in load_model_config_file(str(p))] == [name]


def test_flags_both_forms():
    o = parse_args(["--model_name=penguins", "--model_base_path", "/m", "--port", "9000",
                    "--rest_api_port=9001", "--enable_batching",
                    "--file_system_poll_wait_seconds=0.5", "--rest_api_num_threads=8"])
    assert (o.model_name, o.model_base_path, o.port, o.rest_api_port) == (
        "penguins", "/m", 9000, 9001)
    assert o.enable_batching and o.file_system_poll_wait_seconds == 0.5
    assert o.host == "127.0.0.1"
    assert not parse_args(["--model_base_path=/m", "--enable_batching=false"]).enable_batching


@pytest.mark.parametrize("argv, needle", [
    (["--model_base_path=/m", "--port=http"], "--port must be an integer. Received: 'http'"),
    (["--model_base_path=/m", "--port=70000"], "Received: '70000'"),
    (["--model_base_path=/m", "--enable_batching=maybe"], "Received: 'maybe'"),
    (["--model_base_path=/m", "--modle_name=x"], "did you mean --model_name"),
    (["--model_name=x"], "--model_base_path"),
])
def test_usage_errors_name_flag_and_value(argv, needle, capsys):
    with pytest.raises(UsageError, match=None) as e:
        parse_args(argv)
    assert needle in str(e.value)
    assert main(argv) == 2
    assert needle in capsys.readouterr().err


def test_missing_config_file_exits_2(tmp_path, capsys):
    assert main([f"--model_config_file={tmp_path}/none.config", "--bind_free_ports"]) == 2
    assert "none.config" in capsys.readouterr().err


def test_model_config_file_poll_wait_seconds_is_a_real_flag():
    o = parse_args(["--model_config_file=/c/models.config",
                    "--model_config_file_poll_wait_seconds=60"])
    assert o.model_config_file_poll_wait_seconds == 60.0
    assert parse_args(["--model_config_file=/c"]).model_config_file_poll_wait_seconds == 0
    with pytest.raises(UsageError, match="Received: 'soon'"):
        parse_args(["--model_config_file=/c", "--model_config_file_poll_wait_seconds=soon"])


def test_batching_thread_pool_name(tmp_path):
    p = tmp_path / "b.config"
    p.write_text('thread_pool_name { value: "my_pool" }')
    assert load_batching_parameters(str(p)).thread_pool_name == "my_pool"
    assert BatchingOptions().thread_pool_name == "batch_threads"
