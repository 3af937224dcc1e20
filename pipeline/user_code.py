"""The source files behind a spec's user references, for cache keys and shipping to pods.

A spec names user code as `"module:function"` (a model function, a loss, a user stage...).
What that code does depends on the module's file and on every module it imports from the
spec's directory (a `helpers.py` beside the spec), so those files' bytes are part of the code
identity: editing any of them reruns the stage and starts its backups afresh, and they are what
`baton k8s` puts in the pods' ConfigMap. Installed packages are not followed (their version is
the environment's, not the spec's).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path


def user_code_files(refs: Iterable[str], spec_dir: Path | None) -> list[Path]:
    """Source files of the modules `refs` ("module:function") name, and of every module they
    import (transitively, any import statement, also inside functions) that lives under
    `spec_dir`. Sorted, absolute, no duplicates.

    A module is looked up beside the spec first (by path: a module of the same name imported
    earlier from elsewhere does not hide the spec's file), then imported from sys.path; one
    that cannot be found raises `baton.graphs.user_refs.RefError`. A module outside `spec_dir`
    contributes its own file only when `spec_dir` is None.
    """
    from baton.graphs.user_refs import import_module, is_ref

    root = spec_dir.resolve() if spec_dir is not None else None
    found: set[Path] = set()
    todo: list[Path] = []
    for ref in refs:
        if not is_ref(ref):
            continue
        name = ref.partition(":")[0]
        beside = _module_files(name, root) if root is not None else []
        if beside:  # the spec's own module (even if one of that name was imported from elsewhere)
            todo.extend(beside)
            continue
        module = import_module(name, spec_dir)
        file = getattr(module, "__file__", None)
        if not file:
            continue
        path = Path(file).resolve()
        if root is None or _under(path, root):
            todo.append(path)
    while todo:
        path = todo.pop()
        if path in found or path.suffix != ".py" or not path.is_file():
            continue
        found.add(path)
        if root is None:
            continue
        for name in _imported_names(path, root):
            todo.extend(_module_files(name, root))
    return sorted(found)


def _under(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def _imported_names(path: Path, root: Path) -> list[str]:
    """Dotted module names `path` imports (relative imports made absolute against `root`)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (SyntaxError, UnicodeDecodeError, OSError):
        return []
    package = _package_of(path, root)
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".") if package else []
                base_parts = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
                base = ".".join(p for p in base_parts if p)
                mod = ".".join(p for p in (base, node.module or "") if p)
            else:
                mod = node.module or ""
            if mod:
                names.append(mod)
            # `from pkg import helpers` may name a submodule
            names.extend(f"{mod}.{a.name}" if mod else a.name for a in node.names if a.name != "*")
    return names


def _package_of(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    else:
        parts = parts[:-1]
    return ".".join(parts)


def _module_files(name: str, root: Path) -> list[Path]:
    """Files under `root` for dotted `name`: the module and the packages on its way."""
    parts = name.split(".")
    out = []
    for i in range(1, len(parts) + 1):
        base = root.joinpath(*parts[:i])
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                out.append(candidate.resolve())
    return out
