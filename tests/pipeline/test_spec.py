"""Bad specs are refused before anything runs, each with the file, the line and a hint."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from baton.errors import SpecError
from baton.pipeline.plan import plan
from baton.pipeline.spec import PipelineSpec, StageSpec, load_spec, spec_from_dict

F = "tests.pipeline.fake_stages"

GOOD = f"""\
pipeline: demo
stages:
  - name: source
    type: {F}:source
    config: {{path: data.txt}}
  - name: upper
    type: {F}:upper
    inputs: {{lines: source.lines}}
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text(textwrap.dedent(text))
    return p


def problems(tmp_path: Path, text: str) -> str:
    with pytest.raises(SpecError) as info:
        plan(load_spec(write(tmp_path, text)))
    assert info.value.exit_code == 2
    return str(info.value)


def test_good_spec_plans_in_dependency_order(tmp_path):
    p = plan(load_spec(write(tmp_path, GOOD)))
    assert p.order == ("source", "upper")
    assert p.configs["source"].path == "data.txt"


def test_yaml_syntax_error_names_line(tmp_path):
    msg = problems(tmp_path, "pipeline: demo\nstages:\n  - name: [unclosed\n")
    assert "spec.yaml:" in msg and "not valid YAML" in msg


def test_unknown_stage_type_gets_did_you_mean(tmp_path):
    msg = problems(tmp_path, "pipeline: demo\nstages:\n  - name: a\n    type: ingset\n")
    assert "spec.yaml:4" in msg and "unknown stage type 'ingset'" in msg
    assert "did you mean 'ingest'" in msg


def test_unknown_config_key_gets_did_you_mean_and_line(tmp_path):
    text = GOOD.replace("config: {path: data.txt}", "config:\n      pth: data.txt")
    msg = problems(tmp_path, text)
    assert "spec.yaml:6" in msg and "'pth'" in msg and "did you mean 'path'" in msg


def test_wrong_config_type_names_field_and_value(tmp_path):
    text = GOOD.replace("config: {path: data.txt}", "config:\n      repeat: lots")
    msg = problems(tmp_path, text)
    assert "spec.yaml:6" in msg and "repeat" in msg and "expected an integer" in msg
    assert "Received: 'lots' (str)" in msg


def test_config_value_rejected_by_post_init(tmp_path):
    msg = problems(tmp_path, GOOD.replace("{path: data.txt}", "{repeat: 0}"))
    assert "Received: repeat=0" in msg


def test_missing_required_input(tmp_path):
    text = GOOD.replace("    inputs: {lines: source.lines}\n", "")
    msg = problems(tmp_path, text)
    assert "needs input 'lines'" in msg and "spec.yaml:6" in msg


def test_dangling_input(tmp_path):
    msg = problems(tmp_path, GOOD.replace("source.lines", "sorce.lines"))
    assert "unknown stage 'sorce'" in msg and "did you mean 'source'" in msg
    assert "dangling" in msg and "spec.yaml:8" in msg


def test_unknown_output_of_upstream(tmp_path):
    msg = problems(tmp_path, GOOD.replace("source.lines", "source.line"))
    assert "has no output 'line'" in msg and "did you mean 'lines'" in msg


def test_cycle_is_refused(tmp_path):
    text = f"""\
    pipeline: demo
    stages:
      - name: a
        type: {F}:upper
        inputs: {{lines: b.upper}}
      - name: b
        type: {F}:upper
        inputs: {{lines: a.upper}}
    """
    msg = problems(tmp_path, text)
    assert "cycle" in msg and ("a -> b -> a" in msg or "b -> a -> b" in msg)


def test_unknown_stage_key_and_top_level_key(tmp_path):
    text = GOOD.replace("    inputs:", "    input:").replace("pipeline: demo", "pipeline: demo\nstagse: []")
    msg = problems(tmp_path, text)
    assert "unknown key 'input'" in msg and "did you mean 'inputs'" in msg
    assert "unknown top-level key 'stagse'" in msg and "did you mean 'stages'" in msg


def test_duplicate_stage_name_and_duplicate_key(tmp_path):
    msg = problems(tmp_path, GOOD + f"  - name: upper\n    type: {F}:count\n    inputs: {{lines: source.lines}}\n")
    assert "duplicate stage name 'upper'" in msg
    msg = problems(tmp_path, "pipeline: demo\npipeline: other\nstages: []\n")
    assert "duplicate key 'pipeline'" in msg and "spec.yaml:2" in msg


def test_bad_pipeline_name_and_cluster(tmp_path):
    text = GOOD.replace("pipeline: demo", "pipeline: Demo_1\ncluster: {workers: 0, strategy: ring}")
    msg = problems(tmp_path, text)
    assert "'pipeline' must be a name" in msg and "Received: 'Demo_1'" in msg
    assert "strategy" in msg and "ring" in msg


def test_user_stage_module_that_cannot_import(tmp_path):
    msg = problems(tmp_path, "pipeline: demo\nstages:\n  - name: a\n    type: nosuch.module:fn\n")
    assert "cannot import stage module 'nosuch.module'" in msg


def test_user_stage_beside_the_spec_imports_without_pythonpath(tmp_path):
    (tmp_path / "my_beside_stages.py").write_text(
        "from baton import stage\n\n"
        "@stage(outputs=('out',))\n"
        "def hello(ctx, config):\n"
        "    (ctx.output('out') / 'hi.txt').write_text('hi')\n")
    p = plan(load_spec(write(tmp_path, "pipeline: demo\nstages:\n  - name: a\n    type: my_beside_stages:hello\n")))
    assert p.types["a"].outputs == ("out",)


def test_user_stage_that_fails_at_import_is_a_spec_error_naming_file_and_line(tmp_path):
    (tmp_path / "my_broken_stages.py").write_text("x = 1\ndef run(ctx, config:\n    pass\n")
    (tmp_path / "my_raising_stages.py").write_text("import os\nVALUE = int(os.environ.get('NOPE', 'x'))\n")
    msg = problems(tmp_path, "pipeline: demo\nstages:\n  - name: a\n    type: my_broken_stages:run\n"
                             "  - name: b\n    type: my_raising_stages:run\n")
    assert "cannot import stage module 'my_broken_stages': SyntaxError" in msg
    assert f"({tmp_path / 'my_broken_stages.py'}, line 2)" in msg
    assert "cannot import stage module 'my_raising_stages': ValueError: invalid literal" in msg
    assert f"({tmp_path / 'my_raising_stages.py'}, line 2)" in msg


def test_every_bad_config_key_of_a_stage_is_reported_in_one_pass(tmp_path):
    msg = problems(tmp_path, GOOD.replace("config: {path: data.txt}",
                                          "config: {pth: x, repeat: many, extra: 1}"))
    assert "3 problems" in msg, msg
    assert "unknown setting 'pth' (did you mean 'path'?)" in msg
    assert "unknown setting 'extra'" in msg and "repeat: expected an integer. Received: 'many'" in msg
    # Value checks run once the types are right, next to the unknown keys.
    msg = problems(tmp_path, GOOD.replace("config: {path: data.txt}", "config: {pth: x, repeat: 0}"))
    assert "2 problems" in msg and "repeat must be >= 1. Received: repeat=0" in msg


def test_all_problems_reported_together(tmp_path):
    text = GOOD.replace("source.lines", "nowhere.lines").replace("path: data.txt", "pth: x")
    err = problems(tmp_path, text)
    assert "2 problems" in err


def test_python_object_spec_round_trips_through_yaml(tmp_path):
    spec = PipelineSpec(name="demo", stages=(
        StageSpec("source", f"{F}:source", {"path": "data.txt"}),
        StageSpec("upper", f"{F}:upper", inputs={"lines": "source.lines"}),
    ))
    assert plan(spec).order == ("source", "upper")
    import yaml

    again = spec_from_dict(yaml.safe_load(spec.to_yaml()))
    assert again.stages == spec.stages and again.name == spec.name


def test_embedded_default_spec_loads():
    spec = load_spec(None)
    assert spec.name == "penguins"
    types = [s.type for s in spec.stages]
    assert types[0] == "ingest" and types[-1] == "push"
    assert plan(spec).order.index("transform") < plan(spec).order.index("train")


@pytest.mark.parametrize("example", sorted((Path(__file__).resolve().parents[2] / "examples").glob("**/*.yaml")),
                         ids=lambda p: p.name if p.parent.name == "examples" else f"{p.parent.name}/{p.name}")
def test_every_example_spec_in_the_repo_plans(example):
    """The documented examples stay valid as stages and configs change."""
    assert plan(load_spec(example)).order
