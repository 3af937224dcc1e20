"""The model a train stage names, built and checked: `model: mlp` or `model: "my.module:fn"`.

Both are model functions of one contract, `function(spec: ModelSpec) -> keras.Model`
(graphs/model_spec.py): a registered name is looked up in `graphs.models.MODELS`, anything else
is imported as user code (`graphs.user_refs`: sys.path, then the spec's directory). Baton calls
the function inside the strategy scope on every task, after seeding Keras, so every task starts
from the same weights; before the first training step the result is checked (a `keras.Model`,
callable on the features dict, logits or probabilities `[B, num_classes]`, `[B]`/`[B, 1]` for
regression), and anything else is a StageError naming the function and what it received.

A model built on its own `keras.Input`s (TFX's `Input(shape=(1,), name=...)`) instead of
`spec.inputs` is accepted when it answers the features dict with the right shape: Keras matches
a dict to inputs by name and adapts `[B]` to `[B, 1]` on real tensors (a symbolic call does not,
so it is checked on a batch of zeros). When it does not, the error says its inputs are the cause.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from baton.errors import StageError
from baton.graphs.feature_spec import FeatureSpec
from baton.graphs.model_spec import ModelSpec
from baton.graphs.models import MODELS, unknown_model
from baton.graphs.user_refs import RefError, import_ref, is_ref


def describe(name: str) -> str:
    """How messages name the model function: `mlp (built-in)` or `'my_model:build'`."""
    return f"{name} (built-in)" if name in MODELS else repr(name)


def resolve(name: str, search_dir: Path | str | None = None) -> Callable[[ModelSpec], Any]:
    """The model function `name` stands for; RefError for an unknown name or a bad module."""
    if name in MODELS:
        return MODELS[name].function
    if not is_ref(name):
        raise RefError(unknown_model(name))
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
    custom_config: Mapping[str, Any] | None = None,
    hyperparameters: Mapping[str, Any] | None = None,
) -> Any:
    """Call model function `name` on a fresh ModelSpec (inside the caller's strategy scope)."""
    import keras

    try:
        fn = resolve(name, search_dir)
    except RefError as exc:
        raise StageError(f"train.config.model: {exc}") from None
    spec = ModelSpec.from_feature_spec(feature_spec, params, custom_config, hyperparameters)
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
    """The model, called on the features dict, gives outputs of the task's shape: symbolically
    first, then (a model on its own Inputs, which Keras adapts only on real tensors) on zeros."""
    import keras

    fresh = ModelSpec.from_feature_spec(spec.feature_spec, spec.params).inputs
    try:
        out = model(dict(fresh))
        problem = _output_problem(out, spec, name, model)
    except Exception as exc:  # noqa: BLE001 - user code
        problem = (f"model function {describe(name)} returned a model that cannot be called on "
                   f"the features dict {_show_inputs(spec)}: {type(exc).__name__}: {exc}")
    if problem is None:
        return
    own = own_inputs(model, spec)
    if own is None:
        raise StageError(problem)
    try:  # Keras maps a dict to inputs by name, and [B] to [B, 1], on real tensors only
        out = model({k: keras.ops.zeros((2, *v.shape[1:]), v.dtype) for k, v in fresh.items()})
        if _output_problem(out, spec, name, model) is None:
            return
    except Exception:  # noqa: BLE001 - the error below names the cause
        pass
    raise StageError(
        f"model function {describe(name)} built its model on its own keras.Input(s) {own}, not "
        f"on spec.inputs {_show_inputs(spec)}: build it on spec.inputs, e.g. "
        "keras.Model(spec.inputs, outputs), taking each feature as spec.inputs[name] "
        f"(scalars are [B]: Reshape((1,)) before concatenating). Then: {problem}")


def own_inputs(model: Any, spec: ModelSpec) -> str | None:
    """The model's own `keras.Input`s (name and shape), when they are not the features' as
    `spec.inputs` gives them; None when they are (or the model has no symbolic inputs)."""
    try:
        inputs = list(model.inputs or ())
    except (AttributeError, ValueError):
        return None
    if not inputs:
        return None
    features = {f.name: (None, *f.shape) for f in spec.feature_spec.features}
    mine = {getattr(x, "name", ""): tuple(x.shape) for x in inputs}
    if all(features.get(k) == v for k, v in mine.items()):
        return None
    return "[" + ", ".join(
        f"{k!r}: [{', '.join('B' if d is None else str(d) for d in v)}]" for k, v in mine.items()
    ) + "]"


def _output_problem(out: Any, spec: ModelSpec, name: str, model: Any = None) -> str | None:
    import keras

    if isinstance(out, Mapping | list | tuple):
        return (f"model function {describe(name)} returned a model with several outputs; the "
                f"train stage needs one tensor of logits. Received: {type(out).__name__} of "
                f"{len(out)}")
    shape = tuple(keras.ops.shape(out))
    k = spec.num_classes
    if spec.task == "regression":
        ok = len(shape) == 1 or (len(shape) == 2 and shape[1] == 1)
        want = "[B] or [B, 1]"
    else:
        ok = len(shape) == 2 and shape[1] == k
        want = f"logits [B, {k}] (one per class of {spec.label!r}; or probabilities: a softmax)"
    if ok:
        return None
    got = "[" + ", ".join("B" if d is None else str(d) for d in shape) + "]"
    if spec.task != "regression" and k == 2 and len(shape) == 2 and shape[1] == 1:
        from baton.graphs.model_outputs import last_activation

        found = last_activation(model) if model is not None else None
        unit = "a sigmoid" if found is not None and found[0] == "sigmoid" else "a logit"
        classes = ", ".join(map(repr, spec.feature_spec.label.vocabulary))
        return (f"model function {describe(name)} returned a model whose output has shape "
                f"{got}: one unit ({unit}) for the 2 classes of {spec.label!r} ({classes}). "
                "Baton's classifiers give one value per class: end it in Dense(2, "
                "activation='softmax') (probabilities) or Dense(2) (logits). Received: output "
                f"shape {got}")
    return (f"model function {describe(name)} returned a model whose output has shape {got}; "
            f"the {spec.task} task needs {want}. Received: output shape {got}")


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


def carry_weights(trained: Any, clean: Any, name: str) -> None:
    """The trained weights into the same model rebuilt outside any strategy (the artifact).

    A built-in model's by layer name, its sharded tables concatenated
    (graphs.sharded_embedding.merge_into); an own model's in order, since its layers may be
    auto-named differently in the second build.
    """
    import numpy as np

    if name in MODELS:
        from baton.graphs.sharded_embedding import merge_into

        merge_into(trained, clean)
        return
    values = [np.asarray(w.numpy()) for w in trained.weights]
    if len(values) != len(clean.weights):
        raise StageError(
            f"model function {name!r} built a model with {len(clean.weights)} weights the second "
            f"time it was called and {len(values)} the first; it must build the same model "
            "every time (the artifact is rebuilt outside the training strategy)"
        )
    clean.set_weights(values)


def exported(trained: Any, clean: Any, name: str, feature_spec: Mapping[str, Any],
             params: Mapping[str, Any]) -> dict[str, Any]:
    """`clean` given `trained`'s weights (`carry_weights`), and what train_info says of it: its
    parameter count and, for a built-in that leaves transformed outputs out (the cnn takes
    only its image), a warning naming them (`models.ignored`; the stage logs it)."""
    from baton.graphs.models import count_params, ignored

    carry_weights(trained, clean, name)
    left_out = ignored(name, FeatureSpec.from_dict(feature_spec), params) if name in MODELS else []
    return {"params": count_params(clean), **({"ignored_outputs": left_out} if left_out else {})}
