"""Import contracts (pyproject.toml `[tool.importlinter]`): lint-imports passes, and every
package keeps a contract for the layering of its own modules.

Function-level (lazy) imports count for import-linter, so a new import cycle inside a package
fails here (and in `make lint`) instead of hiding behind an import inside a function. The
contracts themselves are pinned too: dropping one from pyproject.toml fails this test.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# container -> layers contract that must exist, exhaustive (a new module must be placed)
LAYERED = (
    "baton",
    "baton.pipeline",
    "baton.pipeline.commands.k8s",
    "baton.pipeline.dataplane",
    "baton.pipeline.dataplane.beam",
    "baton.pipeline.dataplane.records",
    "baton.pipeline.dataplane.sources",
    "baton.pipeline.dataplane.statistics",
    "baton.pipeline.dataplane.transform",
    "baton.pipeline.release",
    "baton.pipeline.datasets",
    "baton.graphs",
    "baton.graphs.tft",
    "baton.strategies",
    "baton.serving",
    "baton.k8s",
    "baton.k8s.emulator",
    "baton.storage",
)
INDEPENDENT = ("baton.pipeline.commands.*", "baton.pipeline.stages.*")
TOP = ["__main__ | (tft)", "pipeline", "k8s", "serving | strategies", "graphs | storage",
       "(logs) | (energy)", "configs", "errors | (_version)"]


def _contracts() -> list[dict]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return config["contracts"]


def test_every_package_declares_the_layers_of_its_modules():
    layers = {
        c["containers"][0]: c
        for c in _contracts()
        if c["type"] == "layers" and len(c.get("containers", [])) == 1
    }
    missing = [p for p in LAYERED if p not in layers]
    assert not missing, f"no layers contract for {missing}"
    assert [p for p in LAYERED if not layers[p].get("exhaustive")] == []
    assert layers["baton"]["layers"] == TOP
    independent = {m for c in _contracts() if c["type"] == "independence" for m in c["modules"]}
    assert set(INDEPENDENT) <= independent


def test_lint_imports_keeps_every_contract():
    contracts = _contracts()
    run = subprocess.run(
        [sys.executable, "-c", "from importlinter.cli import lint_imports_command as m; m()"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": "200"},
    )
    out = " ".join(run.stdout.split())  # names may wrap
    assert run.returncode == 0, run.stdout + run.stderr
    for c in contracts:
        assert f"{' '.join(c['name'].split())} KEPT" in out, c["name"]
    assert f"Contracts: {len(contracts)} kept, 0 broken." in out
