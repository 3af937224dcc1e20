"""docs/architecture.md lists each package's layers as pyproject's contracts declare them."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _doc_bullets() -> dict[str, str]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    bullets: dict[str, str] = {}
    for m in re.finditer(r"^- `(\w+)`: (.*?)(?=^- |^\S|\Z)", text, re.M | re.S):
        bullets[m.group(1)] = m.group(2)
    return bullets


def test_every_module_of_a_layers_contract_is_in_the_docs():
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    bullets = _doc_bullets()
    checked = 0
    layered = [c for c in contracts["contracts"] if c.get("type") == "layers"]
    last = [c["containers"][0].split(".")[-1] for c in layered if len(c["containers"]) == 1]
    for c in contracts["contracts"]:
        if c.get("type") != "layers" or len(c["containers"]) != 1:
            continue
        package = c["containers"][0].split(".")[-1]
        if last.count(package) > 1:  # k8s and pipeline.commands.k8s: the bullet names the path
            package = c["containers"][0].removeprefix("baton.")
        if package not in bullets:  # sub-packages (dataplane, release...) are named in prose
            continue
        modules = {m.strip("() ") for layer in c["layers"] for m in layer.split("|")}
        modules.discard("__main__")
        documented = set(re.findall(r"\w+", bullets[package]))
        assert modules <= documented, (package, sorted(modules - documented))
        checked += 1
    assert checked >= 14  # the packages and the subpackages with a bullet (graphs.tft: `tft`)
