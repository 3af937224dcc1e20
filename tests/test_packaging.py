"""The installed layout: one `baton` namespace over the card's folders, nothing else."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("pipeline", "graphs", "strategies", "serving", "k8s")


def _py(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("name", FOLDERS)
def test_folders_are_not_importable_outside_the_checkout(name, tmp_path):
    out = _py(f"import {name}", tmp_path)
    assert out.returncode != 0 and "No module named" in out.stderr, out.stdout + out.stderr
    assert _py(f"import baton.{name}", tmp_path).returncode == 0


def test_every_module_imports_under_baton_and_nothing_top_level(tmp_path):
    """Imports every module of the five packages from outside the checkout: any leftover
    `import pipeline...` fails here (the checkout is not on sys.path)."""
    code = (
        "import importlib, pkgutil, sys\n"
        "import baton\n"
        f"for top in {FOLDERS!r}:\n"
        "    pkg = importlib.import_module('baton.' + top)\n"
        "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        if m.name.endswith('__main__'):\n"
        "            continue\n"
        "        importlib.import_module(m.name)\n"
        f"bad = [m for m in sys.modules if m.split('.')[0] in {FOLDERS!r}]\n"
        "assert not bad, bad\n"
        "print('ok', len([m for m in sys.modules if m.startswith('baton.')]))\n"
    )
    out = _py(code, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert int(out.stdout.split()[1]) > 100


def test_pyproject_lists_every_folder_that_holds_code_or_data():
    """package-dir maps each folder, so the package list is explicit: a new subfolder that
    is not listed would be missing from a wheel."""
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(conf["packages"])
    mapping = conf["package-dir"]
    assert set(mapping) == {"baton", *(f"baton.{f}" for f in FOLDERS)}
    wanted = {"baton"}
    for d in (ROOT / "baton").iterdir():  # baton's own subpackages (storage), not the symlinks
        if d.is_dir() and not d.is_symlink() and (d / "__init__.py").is_file():
            wanted.add(f"baton.{d.name}")
    for folder in FOLDERS:
        for d in [ROOT / folder, *(ROOT / folder).rglob("*")]:
            if d.is_dir() and d.name != "__pycache__" and any(
                    p.is_file() for p in d.iterdir()):
                rel = d.relative_to(ROOT).parts
                wanted.add(".".join(("baton", *rel)))
    assert wanted == listed, {"missing": sorted(wanted - listed), "extra": sorted(listed - wanted)}


def test_the_checkout_view_matches_the_installed_one():
    """baton/<folder> are symlinks to the folders, so tools that walk the tree (mypy,
    import-linter) see the names that setuptools' package-dir installs."""
    for folder in FOLDERS:
        link = ROOT / "baton" / folder
        assert link.is_symlink() and link.resolve() == (ROOT / folder).resolve()


def test_a_users_pipeline_module_beside_the_spec_is_imported_not_shadowed(tmp_path):
    (tmp_path / "pipeline.py").write_text(
        "from baton import stage\n\n"
        "@stage(outputs=('out',))\n"
        "def hello(ctx, config):\n"
        "    (ctx.output('out') / 'hi.txt').write_text('from the user pipeline.py')\n")
    (tmp_path / "spec.yaml").write_text(
        "pipeline: mine\nstages:\n  - name: a\n    type: pipeline:hello\n")
    out = subprocess.run([sys.executable, "-m", "baton", "run", "spec.yaml", "--runs-dir",
                          "runs", "-q"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    [hi] = (tmp_path / "runs").rglob("hi.txt")
    assert hi.read_text() == "from the user pipeline.py"


def test_console_script_and_module_entry_points(tmp_path):
    exe = Path(sys.executable).parent / "baton"
    for cmd in ([str(exe), "--help"], [sys.executable, "-m", "baton", "--help"],
                [sys.executable, "-m", "baton.serving", "--help"]):
        out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, (cmd, out.stderr)
        assert "usage: baton" in out.stdout, cmd
