"""Stage types by name, imported lazily: adding a stage is one module and one line here.

Like Metaflow's plugin lists, the registry is `(name, dotted module path)` pairs, so `baton --help`
and spec validation of names never import TensorFlow or Beam. A user stage is named by a dotted
path, `my.module:fn` (a function `fn(ctx, config)`, config a plain dict unless the module defines
`Config`), and needs no registration at all.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from baton.configs import did_you_mean
from baton.errors import EXIT_USAGE, BatonError
from baton.pipeline.hooks import HOOKS, StageDeclaration, guarded, normalize_inputs, user_line

STAGES: list[tuple[str, str]] = [
    ("ingest", "baton.pipeline.stages.ingest"),
    ("statistics", "baton.pipeline.stages.statistics"),
    ("validate", "baton.pipeline.stages.validate"),
    ("transform", "baton.pipeline.stages.transform"),
    ("train", "baton.pipeline.stages.train"),
    ("federated", "baton.pipeline.stages.federated"),
    ("evaluate", "baton.pipeline.stages.evaluate"),
    ("export", "baton.pipeline.stages.export"),
    ("check", "baton.pipeline.stages.check"),
    ("edge", "baton.pipeline.stages.edge"),
    ("push", "baton.pipeline.stages.push"),
]

_BY_NAME = dict(STAGES)


class UnknownStageType(BatonError, LookupError):
    """A stage type that is neither registered nor a loadable `module:function` path."""

    exit_code = EXIT_USAGE


@dataclasses.dataclass(frozen=True)
class StageType:
    """A resolved stage type: its run function and its declaration (pipeline.hooks)."""

    name: str
    module: ModuleType
    run: Callable[..., Any]
    declaration: StageDeclaration
    search_dir: Path | None = None  # the spec's directory, where a user stage's module lives

    @property
    def config_cls(self) -> type | None:
        return self.declaration.config

    @property
    def inputs(self) -> Mapping[str, bool]:
        return self.declaration.inputs

    @property
    def outputs(self) -> tuple[str, ...]:
        return self.declaration.outputs

    @property
    def cacheable(self) -> bool:
        return self.declaration.cacheable

    @property
    def early_inputs(self) -> tuple[str, ...]:
        return self.declaration.early_inputs

    def hook(self, name: str) -> Callable[..., Any] | None:
        """The stage's hook `name` (one of pipeline.hooks.HOOKS), or None if it has none."""
        if name not in HOOKS:
            raise KeyError(f"unknown stage hook {name!r}; hooks are {', '.join(HOOKS)}")
        fn = self.declaration.hooks.get(name)
        return None if fn is None else guarded(self.name, name, fn)

    def code_files(self) -> list[Path]:
        """Source files whose text is the stage's code version: the module, its code_deps, and
        for a user stage (`module:fn`) every module it imports from the spec's directory (a
        helper beside the spec is part of the stage's code: editing it reruns the stage)."""
        files = [Path(self.module.__file__ or "")]
        if ":" in self.name:
            from baton.pipeline.user_code import user_code_files

            files.extend(user_code_files([self.name], self.search_dir))
        for dep in self.declaration.code_deps:
            # Located, not imported: a cached run must not pay for TensorFlow's import.
            found = importlib.util.find_spec(dep)
            if found is not None and found.origin:
                p = Path(found.origin)
                files.extend(sorted(p.parent.rglob("*.py")) if p.name == "__init__.py" else [p])
        unique = dict.fromkeys(f.resolve() for f in files if f.is_file())
        return list(unique)


def known_names() -> list[str]:
    return [name for name, _ in STAGES]


def is_known(name: str) -> bool:
    return name in _BY_NAME or ":" in name


def hint(name: str) -> str:
    return did_you_mean(name, known_names(), cutoff=0.5)


def resolve(name: str, search_dir: Path | None = None) -> StageType:
    """Import the stage type `name` (registered name or `my.module:fn`).

    A user module is looked up on sys.path and then in `search_dir` (the spec's directory), so
    `type: my_stages:clean` works for a my_stages.py beside the spec without PYTHONPATH; the
    directory goes last so it never shadows an installed package.
    """
    if name in _BY_NAME:
        module = importlib.import_module(_BY_NAME[name])
        fn = module.run
    elif ":" in name:
        mod_name, _, fn_name = name.partition(":")
        if search_dir is not None and str(search_dir) not in sys.path:
            sys.path.append(str(search_dir))
        try:
            module = importlib.import_module(mod_name)
        except ImportError as exc:
            raise UnknownStageType(f"cannot import stage module {mod_name!r}: {exc}") from None
        except Exception as exc:  # noqa: BLE001 (user code: any error at import is the user's to fix)
            where = user_line(exc)  # the user's line, not the one in Baton that refused it
            raise UnknownStageType(f"cannot import stage module {mod_name!r}: "
                                   f"{type(exc).__name__}: {exc}{where}") from None
        fn = getattr(module, fn_name, None)
        if not callable(fn):
            raise UnknownStageType(f"module {mod_name!r} has no function {fn_name!r}")
    else:
        raise UnknownStageType(
            f"unknown stage type {name!r}{hint(name)}; known types: {', '.join(known_names())}, "
            "or a user stage as 'package.module:function'"
        )

    declaration = getattr(fn, "baton_declaration", None)
    if not isinstance(declaration, StageDeclaration):
        declaration = module_declaration(module)
    return StageType(name=name, module=module, run=fn, declaration=declaration,
                     search_dir=search_dir)


def module_declaration(module: ModuleType) -> StageDeclaration:
    """A built-in stage's declaration, from its module attributes (INPUTS, Config, hooks...)."""
    try:
        return StageDeclaration(
            inputs=normalize_inputs(getattr(module, "INPUTS", {})),
            outputs=tuple(getattr(module, "OUTPUTS", ())),
            config=getattr(module, "Config", None),
            cacheable=bool(getattr(module, "CACHEABLE", True)),
            code_deps=tuple(getattr(module, "CODE_DEPS", ())),
            early_inputs=tuple(getattr(module, "EARLY_INPUTS", ())),
            hooks={h: getattr(module, h) for h in HOOKS if callable(getattr(module, h, None))},
        )
    except TypeError as exc:
        raise UnknownStageType(f"stage module {module.__name__!r}: {exc}") from None


def stage(
    *,
    inputs: Mapping[str, bool] | tuple[str, ...] = (),
    outputs: tuple[str, ...] = (),
    config: type | None = None,
    cacheable: bool = True,
    code_deps: tuple[str, ...] = (),
    early_inputs: tuple[str, ...] = (),
    check_spec: Callable[..., Any] | None = None,
    check_options: Callable[..., Any] | None = None,
    check_inputs: Callable[..., Any] | None = None,
    external_inputs: Callable[..., Any] | None = None,
    cache_valid: Callable[..., Any] | None = None,
    run_settings: Callable[..., Any] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare a user stage function's interface, for specs that name it as `module:fn`.

    Every argument is a member of `baton.StageHooks` (pipeline/hooks.py says when each hook
    runs); an argument that does not fit (an early input that is not an input, a hook that is
    not callable) is a TypeError at import time, which the spec check reports with file:line.

    Example::

        @stage(inputs={"examples": True}, outputs=("report",), config=MyConfig,
               external_inputs=lambda config, spec_dir: [spec_dir / config.path])
        def summarize(ctx, config): ...
    """
    hooks = {name: fn for name, fn in (
        ("check_spec", check_spec), ("check_options", check_options),
        ("check_inputs", check_inputs), ("external_inputs", external_inputs),
        ("cache_valid", cache_valid), ("run_settings", run_settings)) if fn is not None}
    declaration = StageDeclaration(
        inputs=normalize_inputs(inputs), outputs=tuple(outputs), config=config,
        cacheable=cacheable, code_deps=tuple(code_deps), early_inputs=tuple(early_inputs),
        hooks=hooks,
    )

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.baton_declaration = declaration  # type: ignore[attr-defined]
        return fn

    return wrap
