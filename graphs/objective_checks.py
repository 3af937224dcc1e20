"""The spec's `loss:`, `metrics:` and `optimizer:` checked without building them, at plan time.

What `baton run` refuses before anything runs (exit 2): an unknown Keras identifier (did you
mean), a module that cannot be imported, an optimizer or learning-rate schedule mapping with
unknown keys or arguments (checked against the class's signature), a loss or metric that
plainly belongs to the other task. Building them is graphs.objectives'.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from baton.configs import did_you_mean
from baton.graphs.keras_names import (
    ACCURACY_ALIASES,
    fits_task,
    loss_names,
    metric_names,
    optimizer_names,
    unknown_identifier,
)
from baton.graphs.user_refs import RefError, import_ref, is_ref


def check_loss(value: str, search_dir: Path | str | None = None) -> list[str]:
    """Problems of `loss:` that the spec shows (unknown identifier, unimportable module)."""
    if not value:
        return []
    if is_ref(value):
        return _check_ref(value, search_dir, "loss function")
    return [] if value in loss_names() else [unknown_identifier("loss", value, loss_names())]


def check_metrics(values: Sequence[str], search_dir: Path | str | None = None) -> list[str]:
    problems: list[str] = []
    names = metric_names()
    for i, v in enumerate(values):
        if is_ref(v):
            problems += [f"[{i}]: {p}" for p in _check_ref(v, search_dir, "metric function")]
        elif v not in names and v not in ACCURACY_ALIASES:
            problems.append(f"[{i}]: {unknown_identifier('metric', v, names)}")
    return problems


def check_optimizer(
    value: Any, search_dir: Path | str | None = None, field: str = "config.optimizer"
) -> list[str]:
    """Problems of `optimizer:` that the spec shows: an unknown identifier or class, and for a
    `{class_name, config}` mapping the arguments its class and its learning-rate schedule do
    not take (a typo would otherwise fail when the train stage builds the optimizer). `field`
    is where the setting sits, to name the exact key in each problem."""
    if isinstance(value, Mapping):
        return _check_optimizer_mapping(value, field)
    if value == "":
        return []  # unset: the model's compile() optimizer, else adam
    if not isinstance(value, str):
        return [f"expected an identifier, a mapping or 'module:function'. Received: {value!r}"]
    if is_ref(value):
        return _check_ref(value, search_dir, "optimizer function")
    names = optimizer_names()
    if value.lower() not in names:
        return [unknown_identifier("optimizer", value, names)]
    return []


_MAPPING_KEYS = {"class_name", "config", "module", "registered_name"}  # Keras' serialized form


def _optimizer_classes() -> dict[str, type]:
    """Keras' optimizer classes by lower-case name (how `keras.optimizers.get` matches them)."""
    from keras.src import optimizers

    return {n: optimizers.ALL_OBJECTS_DICT[n] for n in optimizer_names()}


def _schedule_classes() -> dict[str, type]:
    """Keras' learning-rate schedules by class name (`keras.optimizers.schedules`)."""
    import keras

    found = {n: getattr(keras.optimizers.schedules, n) for n in dir(keras.optimizers.schedules)}
    base = keras.optimizers.schedules.LearningRateSchedule
    return {n: c for n, c in found.items()
            if isinstance(c, type) and issubclass(c, base) and c is not base}


def _check_optimizer_mapping(value: Mapping[str, Any], field: str) -> list[str]:
    """`{class_name, config}`: the class among Keras' optimizers, its arguments by signature,
    a learning-rate schedule inside. Nothing is built: an optimizer made at plan time would
    start TensorFlow's runtime before the stage sets its threads and strategy."""
    name = value.get("class_name")
    if not isinstance(name, str) or set(value) - _MAPPING_KEYS:
        return [
            "a mapping must be {class_name: NAME, config: {...}} as keras.optimizers.get "
            f"takes. Received: {dict(value)!r}"
        ]
    config = value.get("config") or {}
    if not isinstance(config, Mapping):
        return [f"config must be a mapping of {name}'s arguments. Received: {field}.config={config!r}"]
    classes = _optimizer_classes()
    if is_ref(name):
        return [
            f"class_name names a Keras optimizer ({', '.join(c.__name__ for c in classes.values())}); "
            f"for your own give optimizer: 'module:function' returning it. "
            f"Received: {field}.class_name={name!r}"
        ]
    cls = classes.get(name.lower())
    if cls is None:
        known = [c.__name__ for c in classes.values()]
        return [
            f"unknown Keras optimizer {name!r}{did_you_mean(name, known, ignore_case=True)}; give one of "
            f"{', '.join(known)} (or optimizer: 'module:function'). Received: {field}.class_name={name!r}"
        ]
    problems = check_arguments(cls, config, f"{field}.config")
    if "learning_rate" in config:
        problems += _check_learning_rate(config["learning_rate"], f"{field}.config.learning_rate")
    return problems


def _check_learning_rate(value: Any, field: str) -> list[str]:
    """A number, or a Keras schedule mapping whose class and arguments exist. YAML reads `1e-3`
    (no dot) as text, which Keras only refuses once training starts."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return []
    if not isinstance(value, Mapping):
        return [
            "learning_rate must be a number or a schedule {class_name: ExponentialDecay, config: "
            f"{{...}}}} (YAML reads 1e-3 as text: write 1.0e-3). Received: {field}={value!r} "
            f"({type(value).__name__})"
        ]
    name = value.get("class_name")
    config = value.get("config") or {}
    if not isinstance(name, str) or set(value) - _MAPPING_KEYS or not isinstance(config, Mapping):
        return [
            "a learning-rate schedule is {class_name: ExponentialDecay, config: {...}}. "
            f"Received: {field}={dict(value)!r}"
        ]
    if value.get("module", "keras.optimizers.schedules") != "keras.optimizers.schedules":
        return []  # a schedule registered elsewhere: Keras looks it up when the stage runs
    classes = _schedule_classes()
    if name not in classes:
        return [
            f"unknown Keras learning-rate schedule {name!r}{did_you_mean(name, classes, ignore_case=True)}; give "
            f"one of {', '.join(sorted(classes))}. Received: {field}.class_name={name!r}"
        ]
    return check_arguments(classes[name], config, f"{field}.config")


# ------------------------------------------------------------------ arguments by signature
def check_arguments(target: Any, config: Mapping[str, Any], field: str) -> list[str]:
    """Keyword arguments `config` gives `target` (a class, or a function) that it does not take,
    with a did-you-mean, and the ones it needs that `config` lacks, read from its signature.
    `field` is where `config` sits in the spec (`config.callbacks[0].config`)."""
    accepted, required = keyword_arguments(target)
    name = getattr(target, "__name__", repr(target))
    problems, hinted = [], set()
    for key, val in config.items():
        if accepted is None or key in accepted:
            continue
        hint = did_you_mean(str(key), accepted, ignore_case=True)
        hinted.add(hint)
        takes = "" if hint else f"; it takes: {', '.join(accepted) or 'no arguments'}"
        problems.append(
            f"{name} has no argument {key!r}{hint}{takes}. Received: {field}.{key}={val!r}"
        )
    missing = [r for r in required if r not in config and f" (did you mean {r!r}?)" not in hinted]
    if missing:
        problems.append(
            f"{name} needs the argument(s) {', '.join(map(repr, missing))}. Received: {field}={dict(config)!r}"
        )
    return problems


def keyword_arguments(target: Any) -> tuple[list[str] | None, list[str]]:
    """(the keyword arguments `target` takes, or None when it takes any; those it needs).

    A class's `**kwargs` means any keyword, except in Keras' own classes, which pass them to
    their base class: there the bases' arguments are added up to one without `**kwargs`
    (`Adam(**kwargs)` -> `BaseOptimizer(..., **kwargs)`, which refuses the rest)."""
    try:
        params = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        return None, []
    required = [p.name for p in params if p.default is p.empty and p.kind in _KEYWORD]
    if not isinstance(target, type):
        return (None if _takes_any(params) else _names(params)), required
    return _class_keywords(target), required


_KEYWORD = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def _names(params: Sequence[inspect.Parameter]) -> list[str]:
    return [p.name for p in params if p.kind in _KEYWORD]


def _takes_any(params: Sequence[inspect.Parameter]) -> bool:
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def _class_keywords(cls: type) -> list[str] | None:
    """The keywords `cls(...)` takes, following `**kwargs` through Keras' own base classes."""
    names: list[str] = []
    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if init is None:
            continue
        if klass is object:
            return names
        try:
            params = list(inspect.signature(init).parameters.values())[1:]  # after self
        except (TypeError, ValueError):
            return None
        names += [n for n in _names(params) if n not in names]
        if not _takes_any(params):
            return names
        if not klass.__module__.startswith("keras."):
            return None  # the user's **kwargs: whatever it does with them is theirs
    return names


def task_problems(loss: str, metrics: Sequence[str], task: str) -> list[str]:
    """Keras identifiers that do not fit the task (known once the feature spec exists)."""
    problems = []
    if loss and not is_ref(loss) and not fits_task(loss, task):
        problems.append(f"loss {loss!r} does not fit a {task} task. Received: loss={loss!r}")
    for i, m in enumerate(metrics):
        if not is_ref(m) and not fits_task(m, task):
            problems.append(
                f"metrics[{i}] {m!r} does not fit a {task} task. Received: metrics[{i}]={m!r}"
            )
    return problems


def _check_ref(ref: str, search_dir: Path | str | None, what: str) -> list[str]:
    try:
        obj = import_ref(ref, search_dir, what=what)
    except RefError as exc:
        return [str(exc)]
    return [] if callable(obj) else [f"{ref!r} is not callable. Received: {type(obj).__name__}"]
