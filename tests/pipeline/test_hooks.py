"""Stage hooks are declared once (pipeline/hooks.py) and `@baton.stage` accepts every one."""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import baton
from baton.pipeline import hooks, registry
from baton.pipeline.plan import plan
from baton.pipeline.spec import load_spec


def test_the_protocol_the_decorator_and_the_table_name_the_same_hooks():
    protocol = {n for n, v in vars(hooks.StageHooks).items()
                if callable(v) and not n.startswith("_")} - {"run"}
    assert protocol == set(hooks.HOOKS)
    params = set(inspect.signature(baton.stage).parameters)
    assert set(hooks.HOOKS) <= params
    declared = {f.name for f in __import__("dataclasses").fields(hooks.StageDeclaration)}
    assert params - set(hooks.HOOKS) <= declared  # inputs, outputs, config, ... are fields
    text = (Path(__file__).resolve().parents[2] / "docs" / "architecture.md").read_text()
    for name in hooks.HOOKS:
        assert f"`{name}(" in text, name


def test_decorator_keeps_every_hook_and_declaration():
    def check(config, inputs):
        return []

    def ext(config, spec_dir):
        return []

    def valid(outputs):
        return None

    def cspec(config, stage, spec):
        return []

    def copts(config, options, stage, spec):
        return []

    def settings(config, options, spec):
        return {}

    @baton.stage(inputs={"a": True, "b": False}, outputs=("o",), cacheable=False,
                 code_deps=("baton.errors",), early_inputs=("a",), check_inputs=check,
                 external_inputs=ext, cache_valid=valid, check_spec=cspec, check_options=copts,
                 run_settings=settings)
    def fn(ctx, config):
        return None

    st = registry.StageType("t", sys.modules[__name__], fn, fn.baton_declaration)
    assert st.inputs == {"a": True, "b": False} and st.outputs == ("o",)
    assert not st.cacheable and st.early_inputs == ("a",)
    for name, f in [("check_inputs", check), ("external_inputs", ext), ("cache_valid", valid),
                    ("check_spec", cspec), ("check_options", copts),
                    ("run_settings", settings)]:
        assert st.declaration.hooks[name] is f and st.hook(name).__wrapped__ is f
    assert any(p.name == "errors.py" for p in st.code_files())
    with pytest.raises(KeyError, match="unknown stage hook 'chek_spec'"):
        st.hook("chek_spec")


@pytest.mark.parametrize("kwargs, message", [
    ({"early_inputs": ("x",), "inputs": ("a",), "check_inputs": lambda c, i: []},
     "early_inputs \\['x'\\] are not inputs"),
    ({"early_inputs": ("a",), "inputs": ("a",)}, "without a check_inputs hook"),
    ({"cache_valid": "not a function"}, "cache_valid' must be callable"),
])
def test_declarations_that_cannot_work_are_refused_when_declared(kwargs, message):
    with pytest.raises(TypeError, match=message):
        baton.stage(**kwargs)


def test_builtin_stages_declare_through_their_modules():
    ev = registry.resolve("evaluate")
    assert ev.early_inputs == ("transform_graph",) and ev.hook("check_inputs") is not None
    assert registry.resolve("push").hook("cache_valid") is not None
    assert registry.resolve("ingest").hook("external_inputs") is not None
    assert registry.resolve("train").hook("check_options") is not None


def _user_module(tmp_path: Path) -> None:
    (tmp_path / "checked_stages.py").write_text(textwrap.dedent("""\
        import baton

        def _spec(config, stage, spec):
            return [] if config.get("size", 1) > 0 else [f"size must be > 0. Received: {config['size']}"]

        def _opts(config, options, stage, spec):
            return [] if not options.workers else [f"runs on one process. Received: workers={options.workers}"]

        @baton.stage(outputs=("out",), check_spec=_spec, check_options=_opts)
        def make(ctx, config):
            (ctx.output("out") / "x.txt").write_text("x")
        """))


def test_user_check_spec_is_a_spec_error(tmp_path):
    _user_module(tmp_path)
    spec = tmp_path / "spec.yaml"
    spec.write_text("pipeline: demo\nstages:\n  - name: a\n    type: checked_stages:make\n"
                    "    config: {size: 0}\n")
    with pytest.raises(baton.SpecError, match="size must be > 0. Received: 0"):
        plan(load_spec(spec))


def test_user_check_options_exits_2_before_anything_runs(tmp_path):
    _user_module(tmp_path)
    (tmp_path / "spec.yaml").write_text(
        "pipeline: demo\nstages:\n  - name: a\n    type: checked_stages:make\n")
    out = subprocess.run([sys.executable, "-m", "baton", "run", "spec.yaml", "--workers", "2",
                          "--runs-dir", "runs"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2, out.stderr
    assert "stage 'a': runs on one process. Received: workers=2" in out.stderr
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").rglob("x.txt"))


def test_a_bad_declaration_in_a_user_module_is_a_spec_error_with_file_and_line(tmp_path):
    (tmp_path / "bad_decl.py").write_text(
        "import baton\n\n@baton.stage(early_inputs=('x',))\ndef f(ctx, config):\n    pass\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text("pipeline: demo\nstages:\n  - name: a\n    type: bad_decl:f\n")
    with pytest.raises(baton.SpecError) as info:
        plan(load_spec(spec))
    assert "bad_decl.py" in str(info.value) and "early_inputs" in str(info.value)


def test_a_user_stage_reruns_when_a_helper_it_imports_beside_the_spec_changes(tmp_path):
    """The helper module is part of the stage's code identity (was: a stale cache hit)."""
    (tmp_path / "text_helpers.py").write_text("def shout(s):\n    return s.upper()\n")
    (tmp_path / "helped_stages.py").write_text(textwrap.dedent("""\
        import baton
        from text_helpers import shout

        @baton.stage(outputs=("out",))
        def make(ctx, config):
            (ctx.output("out") / "x.txt").write_text(shout("hi"))
        """))
    (tmp_path / "spec.yaml").write_text(
        "pipeline: demo\nstages:\n  - name: a\n    type: helped_stages:make\n")

    runs: list[Path] = []

    def run() -> str:
        out = subprocess.run([sys.executable, "-m", "baton", "run", "spec.yaml", "--runs-dir",
                              "runs"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        runs.append(Path(out.stdout.strip().splitlines()[-1]))  # the run directory
        return out.stderr

    assert "a done in" in run()
    assert "a: cached" in run()
    (tmp_path / "text_helpers.py").write_text("def shout(s):\n    return s.upper() + '!'\n")
    third = run()
    assert "a done in" in third and "cached" not in third
    assert (runs[-1] / "a" / "out" / "x.txt").read_text() == "HI!"


def test_a_hook_that_raises_is_a_stage_error_naming_the_hook_and_the_users_line(tmp_path):
    (tmp_path / "raising_hooks.py").write_text(textwrap.dedent("""\
        import baton

        def _spec(config, stage, spec):
            return [1 / 0]

        @baton.stage(outputs=("out",), check_spec=_spec)
        def make(ctx, config):
            pass
        """))
    (tmp_path / "spec.yaml").write_text(
        "pipeline: demo\nstages:\n  - name: a\n    type: raising_hooks:make\n")
    out = subprocess.run([sys.executable, "-m", "baton", "run", "spec.yaml", "--runs-dir", "runs"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr
    assert ("stage type 'raising_hooks:make': its check_spec hook raised ZeroDivisionError: "
            "division by zero") in out.stderr
    assert "raising_hooks.py, line 4)" in out.stderr
