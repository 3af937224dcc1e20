"""Every hook a stage may define, declared once, with its signature and when it runs.

A stage is `run(ctx, config) -> dict | None`; around it the runner calls optional hooks so a
stage can refuse a bad spec before anything runs, name files outside the run that its cache
key must cover, or veto a cache hit whose effect outside the run is gone. Like Metaflow's
`StepDecorator` base, this Protocol is the one place that lists them all.

Built-in stages declare their interface as module attributes (`INPUTS`, `Config`,
`check_spec`, ...). A user stage function declares the same things as arguments of
`@baton.stage(...)`; `StageHooks` names both spellings (the module attribute in upper case
for the declarations, the function name for hooks).

When each hook runs:

- `check_spec(config, stage, spec)`: when the spec is planned (`baton run`, `--check`), once
  per stage, with the stage's typed config, its StageSpec and the PipelineSpec. Returns a list
  of problems (spec errors, exit 2, reported with file:line).
- `check_options(config, options, stage, spec)`: before any stage runs, with the run's
  RunOptions (`--workers`, `--strategy`, `--inject-failure`, ...). Problems exit 2.
- `check_inputs(config, inputs)`: during the run, as soon as the inputs named by
  `early_inputs` are written (before the stages between run), with their paths. Problems
  are spec errors that only the data could settle (exit 2).
- `external_inputs(config, spec_dir)`: before the stage runs: files outside the run it reads
  (a CSV, a curated schema); their content hashes join the cache key.
- `run_settings(config, options, spec)`: before the stage runs: the run's settings beyond
  its config that shape its outputs (the train stage's resolved topology: a `--workers 2` run
  after a one-process one is not a cache hit); a JSON-able mapping that joins the cache key.
- `cache_valid(outputs)`: on a cache hit, with the cached outputs' paths: a reason string
  vetoes the hit (push: the serving directory lost its version), None keeps it.

A hook that raises is a StageError (exit 1) naming the stage type, the hook, the exception and
the line of the user's code, never a traceback.
"""

from __future__ import annotations

import dataclasses
import traceback
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from baton.errors import BatonError, StageError

if TYPE_CHECKING:
    from baton.pipeline.context import RunOptions, StageContext

# hook name -> what it is for (docs/api.md and the error for an unknown hook quote this)
HOOKS: dict[str, str] = {
    "check_spec": "check the config against the whole spec when it is planned",
    "check_options": "check the run's flags before any stage runs",
    "check_inputs": "check the config against early_inputs once they are written",
    "external_inputs": "files outside the run whose content joins the cache key",
    "run_settings": "the run's settings beyond the config that join the cache key",
    "cache_valid": "veto a cache hit whose effect outside the run is gone",
}


class StageHooks(Protocol):
    """The whole interface of a stage; every member except `run` is optional."""

    def run(self, ctx: StageContext, config: Any) -> Mapping[str, Any] | None:
        """Do the work: read `ctx.inputs`, write each output into `ctx.output(name)`."""

    def check_spec(self, config: Any, stage: Any, spec: Any) -> Iterable[str]:
        """Problems with this stage's config in the context of the whole PipelineSpec."""

    def check_options(self, config: Any, options: RunOptions, stage: Any,
                      spec: Any) -> Iterable[str]:
        """Problems with the run's options (topology, fault rehearsal) for this stage."""

    def check_inputs(self, config: Any, inputs: Mapping[str, Path]) -> Iterable[str]:
        """Problems the data settles, from the `early_inputs` as soon as they exist."""

    def external_inputs(self, config: Any, spec_dir: Path | None) -> Iterable[Path]:
        """Files outside the run that the stage reads; hashed into its cache key."""

    def run_settings(self, config: Any, options: RunOptions, spec: Any) -> Mapping[str, Any]:
        """The run's settings (flags, the spec's cluster section) that shape the outputs;
        joined to the cache key."""

    def cache_valid(self, outputs: Mapping[str, Path]) -> str | None:
        """None to accept a cache hit, or the reason to run the stage again."""


@dataclasses.dataclass(frozen=True)
class StageDeclaration:
    """What a stage declares besides `run`: its interface, caching and hooks.

    Built from a stage module's attributes or from `@stage(...)`'s arguments; the runner and
    the planner read stages only through this.
    """

    inputs: Mapping[str, bool] = dataclasses.field(default_factory=dict)  # name -> required
    outputs: tuple[str, ...] = ()
    config: type | None = None  # None: the config is passed as a plain dict
    cacheable: bool = True
    code_deps: tuple[str, ...] = ()  # modules whose source is part of the stage's code version
    early_inputs: tuple[str, ...] = ()  # inputs that check_inputs needs
    hooks: Mapping[str, Callable[..., Any]] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.hooks) - set(HOOKS))
        if unknown:
            raise TypeError(f"unknown stage hook(s) {unknown}; hooks are {', '.join(HOOKS)}")
        for name, fn in self.hooks.items():
            if not callable(fn):
                raise TypeError(f"stage hook {name!r} must be callable. Received: {fn!r}")
        missing = [k for k in self.early_inputs if k not in self.inputs]
        if missing:
            raise TypeError(f"early_inputs {missing} are not inputs of the stage; "
                            f"inputs: {list(self.inputs)}")
        if self.early_inputs and "check_inputs" not in self.hooks:
            raise TypeError("early_inputs is given without a check_inputs hook to use them")


def guarded(stage_type: str, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` (the hook `name` of `stage_type`) with its exceptions as a StageError naming the
    stage type, the hook, the exception and the line of the user's code it came from; Baton's
    own errors pass through."""

    def call(*args: Any) -> Any:
        try:
            return fn(*args)
        except BatonError:
            raise
        except Exception as exc:  # noqa: BLE001 - user code: any failure is reported, named
            raise StageError(f"stage type {stage_type!r}: its {name} hook raised "
                             f"{type(exc).__name__}: {exc}{user_line(exc)}") from exc

    call.__wrapped__ = fn  # type: ignore[attr-defined]
    return call


def user_line(exc: BaseException) -> str:
    """" (file, line N)" of the innermost frame of `exc` in the user's code (outside
    baton.pipeline, importlib and generated code), or "" when there is none."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f" ({exc.filename}, line {exc.lineno})"
    frames = traceback.extract_tb(exc.__traceback__)
    ours = str(Path(__file__).resolve().parent)  # baton.pipeline
    theirs = [f for f in frames if not f.filename.startswith("<")
              and not str(Path(f.filename).resolve()).startswith(ours)
              and "importlib" not in f.filename]
    picked = theirs or frames
    return f" ({picked[-1].filename}, line {picked[-1].lineno})" if picked else ""


def normalize_inputs(inputs: Mapping[str, bool] | Iterable[str]) -> dict[str, bool]:
    """`{"a": True}` or `("a", "b")` (all required) as a name -> required mapping."""
    if isinstance(inputs, Mapping):
        return {str(k): bool(v) for k, v in inputs.items()}
    return {str(n): True for n in inputs}
