"""User code named in a spec as `"module:function"`: found, imported and reported at its line.

The one lookup every part of Baton uses for user references (a model function, a loss, a
metric, an optimizer factory, a callback): the module is imported from `sys.path` and then from
the spec's directory (`search_dir`, appended last so a `my_model.py` beside the spec works
without PYTHONPATH and never shadows an installed package), as user stages are
(pipeline/registry.py). A module that fails to import is a `RefError` naming the user's file
and line; the task processes of a cluster get `search_dir` explicitly in their job (never a
pickled object), so they import the same file.
"""

from __future__ import annotations

import importlib
import sys
import traceback
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

from baton.errors import EXIT_USAGE, BatonError


class RefError(BatonError, ValueError):
    """A `module:function` reference that cannot be imported or names nothing callable
    (a spec problem: exit 2 where the spec check finds it, a stage error when training does)."""

    exit_code = EXIT_USAGE


def is_ref(value: Any) -> bool:
    """True for a `"module:attr"` string (the form of every user reference in a spec)."""
    return isinstance(value, str) and ":" in value and not value.startswith(":")


def modules_of(refs: Iterable[Any]) -> list[str]:
    """The modules of the `"module:attr"` references among `refs`, once each, in order: what a
    trained model's artifact must import again to load its custom layers and losses."""
    out: list[str] = []
    for ref in refs:
        if is_ref(ref):
            name = str(ref).partition(":")[0]
            if name not in out:
                out.append(name)
    return out


def add_search_dir(search_dir: Path | str | None) -> None:
    """Make `search_dir` importable (after everything already on sys.path)."""
    if search_dir and str(search_dir) not in sys.path:
        sys.path.append(str(search_dir))


def import_module(name: str, search_dir: Path | str | None = None, what: str = "module") -> ModuleType:
    """Import module `name` (sys.path, then `search_dir`); RefError with the user's file:line."""
    add_search_dir(search_dir)
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        if _is_the_module_itself(exc, name):
            raise RefError(
                f"cannot import {what} {name!r}: {exc}{_where_searched(search_dir)}") from None
        # the module was found, and an import in it failed: say where, not "not found"
        raise RefError(
            f"cannot import {what} {name!r}: an import in it failed: {exc}{user_line(exc)}"
        ) from None
    except Exception as exc:  # noqa: BLE001 - user code: any error at import is the user's to fix
        # a SyntaxError's str() holds its own "(file, line N)": the message alone, then ours
        text = exc.msg if isinstance(exc, SyntaxError) and exc.msg else str(exc)
        raise RefError(
            f"cannot import {what} {name!r}: {type(exc).__name__}: {text}{user_line(exc)}"
        ) from None


def _is_the_module_itself(exc: ImportError, name: str) -> bool:
    """Whether `exc` says `name` (or a package above it) is not there, rather than that a
    module it imports is missing."""
    missing = getattr(exc, "name", None)
    return not missing or name == missing or name.startswith(missing + ".")


def import_ref(ref: str, search_dir: Path | str | None = None, what: str = "function") -> Any:
    """The object `ref` (`"module:attr"`, attr may be dotted) names; RefError if there is none."""
    if not is_ref(ref):
        raise RefError(f"expected 'module:{what}'. Received: {ref!r}")
    mod_name, _, attr = ref.partition(":")
    module = import_module(mod_name, search_dir, what="module")
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            public = sorted(n for n in vars(module) if not n.startswith("_"))
            raise RefError(
                f"module {mod_name!r} ({getattr(module, '__file__', '?')}) has no {what} "
                f"{attr!r}. Received: {ref!r}; it defines: {', '.join(public[:20])}"
            )
    return obj


def user_line(exc: BaseException) -> str:
    """` (file, line N)` of the deepest frame of `exc` in user code (not Baton, not importlib)."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f" ({exc.filename}, line {exc.lineno})"
    ours = str(Path(__file__).resolve().parents[1])  # the checkout or the installed baton
    frames = traceback.extract_tb(exc.__traceback__)
    theirs = [
        f for f in frames
        if not f.filename.startswith("<")
        and not str(Path(f.filename).resolve()).startswith(ours)
        and "importlib" not in f.filename
    ]
    picked = theirs or frames
    return f" ({picked[-1].filename}, line {picked[-1].lineno})" if picked else ""


def custom_objects(modules: list[str], search_dir: Path | str | None = None) -> dict[str, Any]:
    """Keras classes and functions defined in the user's `modules`, for `keras.saving.load_model`.

    Keras finds a class it did not define only when it is registered
    (`@keras.saving.register_keras_serializable`) or handed over as a custom object; this
    hands over every Keras-saveable class the user's modules define, by class name and by
    registered name, so a custom layer reloads with or without the decorator.
    """
    import keras

    out: dict[str, Any] = {}
    for name in modules:
        module = import_module(name, search_dir)
        for obj in vars(module).values():
            if not isinstance(obj, type) or str(obj.__module__).startswith("keras"):
                continue  # the user's classes, defined here or imported from their helpers
            if issubclass(obj, keras.layers.Layer | keras.losses.Loss | keras.metrics.Metric):
                out[obj.__name__] = obj
                out[keras.saving.get_registered_name(obj)] = obj
    return out


def _where_searched(search_dir: Path | str | None) -> str:
    return f" (looked on sys.path and in {search_dir})" if search_dir else " (looked on sys.path)"
