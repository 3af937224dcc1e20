"""Each fact once: a second definition of a shared name or number in the product code fails here.

The product code is the top-level packages (pipeline, graphs, strategies, serving, k8s) and the
modules of baton/ itself (its subfolders are symlinks to the packages). The scans read the AST, so
comments and the prose of docstrings and messages may still mention a name or a number; only
code that spells a fact as a literal counts.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from baton import errors
from baton.strategies import factory

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pipeline", "graphs", "strategies", "serving", "k8s")


def product_files() -> list[Path]:
    files = [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]
    files += sorted((ROOT / "baton").glob("*.py"))
    return [p for p in files if "__pycache__" not in p.parts]


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def parsed() -> Iterator[tuple[str, ast.AST]]:
    for path in product_files():
        yield rel(path), ast.parse(path.read_text(), filename=str(path))


def constants(tree: ast.AST) -> Iterator[ast.Constant]:
    """Literal constants, leaving out the text parts of f-strings (prose, not values)."""
    in_fstring = {
        id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and id(node) not in in_fstring:
            yield node


def strategy_literals() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    home = rel(Path(factory.__file__).resolve())
    for name, tree in parsed():
        if name == home:
            continue
        hits = [
            f"{name}:{c.lineno}: {c.value!r}"
            for c in constants(tree)
            if isinstance(c.value, str) and c.value in factory.STRATEGIES
        ]
        if hits:
            found[name] = hits
    return found


def test_strategy_names_are_spelled_once():
    assert factory.STRATEGIES == (
        "one_device", "mirrored", "multi_worker_mirrored", "parameter_server",
    )
    found = strategy_literals()
    second = [hit for hits in found.values() for hit in hits]
    assert not second, (
        "strategy names are defined once, in baton.strategies.factory (Strategy, STRATEGIES, "
        "ONE_DEVICE, ...); import them instead of spelling them:\n" + "\n".join(second)
    )


def test_the_typed_config_fields_take_the_one_literal():
    import typing

    from baton.pipeline.spec import ClusterConfig
    from baton.pipeline.stages import train

    assert typing.get_type_hints(ClusterConfig)["strategy"] == factory.Strategy
    assert typing.get_type_hints(train.Config)["strategy"] == factory.Strategy | None


EXIT_NUMBERS = {errors.EXIT_TRANSIENT, errors.EXIT_INTERRUPTED, errors.EXIT_PREEMPTED}
EXIT_NAMES = {"returncode", "exit_code", "exitcode", "rc", "code", "status"}
EXIT_CALLS = {"sys.exit", "os._exit", "exit", "SystemExit"}


def _int(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def _named(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def exit_code_literals(name: str, tree: ast.AST) -> Iterator[str]:
    for c in constants(tree):
        if _int(c) in EXIT_NUMBERS:
            yield f"{name}:{c.lineno}: {c.value}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Return) and node.value is not None and _int(node.value) == 2:
            yield f"{name}:{node.lineno}: return 2"
        if (isinstance(node, ast.Call) and ast.unparse(node.func) in EXIT_CALLS
                and node.args and _int(node.args[0]) is not None):
            yield f"{name}:{node.lineno}: {ast.unparse(node)}"
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any((_named(s) or "").lower() in EXIT_NAMES for s in sides) and any(
                _int(s) in {1, 2} for s in sides
            ):
                yield f"{name}:{node.lineno}: {ast.unparse(node)}"


def test_exit_codes_come_from_baton_errors():
    home = rel(Path(errors.__file__).resolve())
    found = [hit for name, tree in parsed() if name != home
             for hit in exit_code_literals(name, tree)]
    assert not found, (
        "exit codes are defined once, in baton.errors (EXIT_OK, EXIT_FAILED, EXIT_USAGE, "
        "EXIT_TRANSIENT, EXIT_INTERRUPTED, EXIT_PREEMPTED); use them:\n" + "\n".join(found)
    )


@pytest.mark.parametrize("source, expected", [
    ("import sys\nsys.exit(2)\n", 1),
    ("def f():\n    return 2\n", 1),
    ("x = 143\n", 1),
    ("if proc.returncode == 1:\n    pass\n", 1),
    ("'''exits 143'''\n# 130\nmsg = f'exit {c} (143)'\n", 0),
])
def test_the_exit_code_scan_sees_literals_not_prose(source, expected):
    assert len(list(exit_code_literals("x.py", ast.parse(source)))) == expected


# Functions that once had two definitions (issue 40): one home each, imported from there.
ONE_HOME = {
    "did_you_mean": "baton/configs.py",
    "make_strategy": "strategies/factory.py",
    "parse_fault": "strategies/faults.py",
}


def function_homes(name: str) -> list[str]:
    return [f"{path}:{node.lineno}" for path, tree in parsed() for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name]


@pytest.mark.parametrize("name", sorted(ONE_HOME))
def test_a_shared_function_is_defined_once(name):
    homes = function_homes(name)
    assert [h.split(":")[0] for h in homes] == [ONE_HOME[name]], (
        f"{name} is defined once, in {ONE_HOME[name]}; import it from there. Found: {homes}"
    )
