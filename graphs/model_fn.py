"""The model a train stage names, built and checked: `model: mlp` or `model: "my.module:fn"`.

Both are model functions of one contract, `function(spec: ModelSpec) -> keras.Model`
(graphs/model_spec.py): a registered name is looked up in `graphs.models.MODELS`, anything else
is imported as user code (`graphs.user_refs`: sys.path, then the spec's directory). Baton calls
the function inside the strategy scope on every task, after seeding Keras, so every task starts
from the same weights; before the first training step the result is checked (a `keras.Model`,
callable on the features dict, logits `[B, num_classes]` or `[B]`/`[B, 1]` for regression), and
anything else is a StageError naming the function and what it received.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from baton.errors import StageError
from baton.graphs.feature_spec import FeatureSpec
from baton.graphs.model_spec import ModelSpec
from baton.graphs.models import MODELS
from baton.graphs.user_refs import RefError, import_ref, is_ref


def describe(name: str) -> str:
    """How messages name the model function: `mlp (built-in)` or `'my_model:build'`."""
    return f"{name} (built-in)" if name in MODELS else repr(name)


def resolve(name: str, search_dir: Path | str | None = None) -> Callable[[ModelSpec], Any]:
    """The model function `name` stands for; RefError for an unknown name or a bad module."""
    if name in MODELS:
        return MODELS[name].function
    if not is_ref(name):
        import difflib

        hint = difflib.get_close_matches(name, list(MODELS), n=1)
        mean = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise RefError(
            f"model must be one of {', '.join(MODELS)} or a model function 'module:function'"
            f"{mean}. Received: {name!r}"
        )
    fn = import_ref(name, search_dir, what="model function")
    if not callable(fn):
        raise RefError(f"model {name!r} is a {type(fn).__name__}, not a function. Received: {fn!r}")
    return fn


def build(
    name: str,
    feature_spec: FeatureSpec,
    params: Mapping[str, Any] | None = None,
    seed: int = 0,
    search_dir: Path | str | None = None,
) -> Any:
    """Call model function `name` on a fresh ModelSpec (inside the caller's strategy scope)."""
    import keras

    try:
        fn = resolve(name, search_dir)
    except RefError as exc:
        raise StageError(f"train.config.model: {exc}") from None
    spec = ModelSpec.from_feature_spec(feature_spec, params)
    keras.utils.set_random_seed(seed)  # same initial weights on every task and every retry
    try:
        model = fn(spec)
    except StageError:
        raise
    except Exception as exc:  # noqa: BLE001 - user code: report what it was given
        from baton.graphs.user_refs import user_line

        raise StageError(
            f"model function {describe(name)} raised {type(exc).__name__}: {exc}{user_line(exc)}; "
            f"it was called with {_show_spec(spec)}"
        ) from None
    if not isinstance(model, keras.Model):
        raise StageError(
            f"model function {describe(name)} must return a keras.Model. Received: "
            f"{type(model).__module__}.{type(model).__name__} ({_short(model)})"
        )
    check_output(model, spec, name)
    return model


def check_output(model: Any, spec: ModelSpec, name: str) -> None:
    """The model, called symbolically on the features dict, gives logits of the task's shape."""
    import keras

    fresh = ModelSpec.from_feature_spec(spec.feature_spec, spec.params).inputs
    try:
        out = model(dict(fresh))
    except Exception as exc:  # noqa: BLE001 - user code
        raise StageError(
            f"model function {describe(name)} returned a model that cannot be called on the "
            f"features dict {_show_inputs(spec)}: {type(exc).__name__}: {exc}"
        ) from None
    if isinstance(out, Mapping | list | tuple):
        raise StageError(
            f"model function {describe(name)} returned a model with several outputs; the train "
            f"stage needs one tensor of logits. Received: {type(out).__name__} of {len(out)}"
        )
    shape = tuple(keras.ops.shape(out))
    k = spec.num_classes
    if spec.task == "regression":
        ok = len(shape) == 1 or (len(shape) == 2 and shape[1] == 1)
        want = "[B] or [B, 1]"
    else:
        ok = len(shape) == 2 and shape[1] == k
        want = f"logits [B, {k}] (one per class of {spec.label!r})"
    if not ok:
        got = "[" + ", ".join("B" if d is None else str(d) for d in shape) + "]"
        raise StageError(
            f"model function {describe(name)} returned a model whose output has shape {got}; "
            f"the {spec.task} task needs {want}. Received: output shape {got}"
        )


def _show_inputs(spec: ModelSpec) -> str:
    parts = []
    for key, x in spec.inputs.items():
        dims = ", ".join("B" if d is None else str(d) for d in x.shape)
        parts.append(f"{key}: {x.dtype}[{dims}]")
    return "{" + ", ".join(parts) + "}"


def _show_spec(spec: ModelSpec) -> str:
    return (
        f"ModelSpec(inputs={_show_inputs(spec)}, task={spec.task!r}, "
        f"num_classes={spec.num_classes}, label={spec.label!r}, params={dict(spec.params)!r})"
    )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
