"""Stage types by name, imported lazily: adding a stage is one module and one line here.

Like Metaflow's plugin lists, the registry is `(name, dotted module path)` pairs, so `baton --help`
and spec validation of names never import TensorFlow or Beam. A user stage is named by a dotted
path, `my.module:fn` (a function `fn(ctx, config)`, config a plain dict unless the module defines
`Config`), and needs no registration at all.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import sys
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

STAGES: list[tuple[str, str]] = [
    ("ingest", "pipeline.stages.ingest"),
    ("statistics", "pipeline.stages.statistics"),
    ("validate", "pipeline.stages.validate"),
    ("transform", "pipeline.stages.transform"),
    ("train", "pipeline.stages.train"),
    ("evaluate", "pipeline.stages.evaluate"),
    ("export", "pipeline.stages.export"),
    ("check", "pipeline.stages.check"),
    ("edge", "pipeline.stages.edge"),
    ("push", "pipeline.stages.push"),
]

_BY_NAME = dict(STAGES)


class UnknownStageType(LookupError):
    """A stage type that is neither registered nor a loadable `module:function` path."""


@dataclasses.dataclass(frozen=True)
class StageType:
    """A resolved stage type: its run function and declared interface."""

    name: str
    module: ModuleType
    run: Callable[..., Any]
    config_cls: type | None  # None: the config is passed as a plain dict
    inputs: Mapping[str, bool]  # input name -> required
    outputs: tuple[str, ...]
    cacheable: bool

    def hook(self, name: str) -> Callable[..., Any] | None:
        """An optional hook (`external_inputs`, `check_spec`, `cache_valid`): the function's own,
        else the module's."""
        return getattr(self.run, name, None) or getattr(self.module, name, None)

    def code_files(self) -> list[Path]:
        """Source files whose text is the stage's code version (module + CODE_DEPS modules)."""
        files = [Path(self.module.__file__ or "")]
        for dep in getattr(self.module, "CODE_DEPS", ()):
            mod = importlib.import_module(dep)
            if mod.__file__:
                p = Path(mod.__file__)
                files.extend(sorted(p.parent.rglob("*.py")) if p.name == "__init__.py" else [p])
        return [f for f in files if f.is_file()]


def known_names() -> list[str]:
    return [name for name, _ in STAGES]


def is_known(name: str) -> bool:
    return name in _BY_NAME or ":" in name


def hint(name: str) -> str:
    match = difflib.get_close_matches(name, known_names(), n=1, cutoff=0.5)
    return f" (did you mean {match[0]!r}?)" if match else ""


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
            where = ""
            if isinstance(exc, SyntaxError) and exc.filename:
                where = f" ({exc.filename}, line {exc.lineno})"
            else:
                frames = traceback.extract_tb(exc.__traceback__)
                if frames:
                    where = f" ({frames[-1].filename}, line {frames[-1].lineno})"
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

    def declared(attr: str, default: Any) -> Any:
        # A decorated user function declares its own interface; otherwise the module does.
        return getattr(fn, f"baton_{attr.lower()}", getattr(module, attr, default))

    inputs = declared("INPUTS", {})
    if not isinstance(inputs, Mapping):
        inputs = {n: True for n in inputs}
    return StageType(
        name=name,
        module=module,
        run=fn,
        config_cls=declared("Config", None),
        inputs=dict(inputs),
        outputs=tuple(declared("OUTPUTS", ())),
        cacheable=bool(declared("CACHEABLE", True)),
    )


def stage(
    *,
    inputs: Mapping[str, bool] | tuple[str, ...] = (),
    outputs: tuple[str, ...] = (),
    config: type | None = None,
    cacheable: bool = True,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare a user stage function's interface, for specs that name it as `module:fn`.

    Example::

        @stage(inputs={"examples": True}, outputs=("report",), config=MyConfig)
        def summarize(ctx, config): ...
    """

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.baton_inputs = inputs  # type: ignore[attr-defined]
        fn.baton_outputs = outputs  # type: ignore[attr-defined]
        fn.baton_config = config  # type: ignore[attr-defined]
        fn.baton_cacheable = cacheable  # type: ignore[attr-defined]
        return fn

    return wrap
