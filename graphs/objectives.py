"""Loss, metrics and optimizer from a spec: Keras identifiers, `{class_name, config}`, or user code.

What the train stage's `loss:`, `metrics:` and `optimizer:` settings (and a model's own
`compile()`, graphs/compiled.py) turn into. Models output logits (the `model` artifact
contract), so a Keras loss or metric that takes `from_logits` is built with `from_logits=True`;
a model whose output is already a probability (graphs/model_outputs.py) gets them with
`from_logits=False` instead. The built-in models and any own model are trained the same way.

What a loss or metric is called with, `(y_true, y_pred)`:

- classification: `y_pred` the logits `[B, K]`; `y_true` the class ids `[B]` (int64) for a
  user function and the `sparse_` Keras losses and metrics, one-hot `[B, K]` for every other
  Keras identifier (`categorical_crossentropy`, `AUC`, `Precision`, ...), which compare targets
  shaped like the predictions.
- regression: `y_true` `[B, 1]` (float32), `y_pred` the model's output as `[B, 1]`.

A loss returns the per-example loss `[B]` (extra axes are averaged); the training loop averages
it over the *global* batch (`tf.nn.compute_average_loss`), so summing gradients over replicas
gives the mean gradient under every strategy. A user loss `"module:function"` must do no
reduction over the batch itself (a scalar is refused: it would be averaged twice).
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from baton.graphs.user_refs import RefError, import_ref, is_ref

# "accuracy" in Keras' compile() means the accuracy that fits the targets; here, class ids.
_ACCURACY_ALIASES = ("accuracy", "acc")
_REGRESSION_ONLY = (
    "mean_squared", "mean_absolute", "mse", "mae", "mape", "msle", "r2", "root_mean_squared",
    "log_cosh", "pearson", "concordance", "poisson", "cosine",
)
_CLASSIFICATION_ONLY = (
    "accuracy", "crossentropy", "auc", "precision", "recall", "hinge", "top_k", "io_u", "iou",
    "f1", "f_beta", "fbeta", "true_", "false_", "sensitivity", "specificity", "kl_div", "kld",
)
LOSSES_DEFAULT = ""  # the built-in: softmax cross-entropy on logits, squared error (regression)


def _snake(name: str) -> str:
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i and (not name[i - 1].isupper()):
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


def fits_task(name: str, task: str) -> bool:
    """False when a Keras loss/metric identifier plainly belongs to the other task."""
    s = _snake(name)
    if task == "regression":
        return not any(k in s for k in _CLASSIFICATION_ONLY)
    return not any(s == k or s.startswith(k) for k in _REGRESSION_ONLY)


def wants_one_hot(name: str) -> bool:
    """Keras' classification losses and metrics compare targets shaped like the logits, except
    the `sparse_` ones, which take class ids."""
    return "sparse" not in _snake(name)


# ------------------------------------------------------------------ names (for did-you-mean)
def loss_names() -> list[str]:
    from keras.src import losses

    return sorted(n for n in losses.ALL_OBJECTS_DICT if n not in ("Loss", "LossFunctionWrapper"))


def metric_names() -> list[str]:
    from keras.src import metrics

    skip = ("Metric", "metric", "MeanMetricWrapper", "mean_metric_wrapper", "Mean", "Sum")
    return sorted(n for n in metrics.ALL_OBJECTS_DICT if n not in skip) + list(_ACCURACY_ALIASES[1:])


def optimizer_names() -> list[str]:
    from keras.src import optimizers

    skip = ("optimizer", "lossscaleoptimizer", "multioptimizer", "optimizermap")
    return sorted(n for n in optimizers.ALL_OBJECTS_DICT if n not in skip)


def _unknown(kind: str, value: str, names: list[str]) -> str:
    match = difflib.get_close_matches(value, names, n=1, cutoff=0.5)
    mean = f" (did you mean {match[0]!r}?)" if match else ""
    return (
        f"unknown Keras {kind} {value!r}{mean}; give a Keras {kind} identifier "
        f"({', '.join(names[:12])}, ...) or 'module:function'. Received: {value!r}"
    )


# ------------------------------------------------------------------ checks without building
def check_loss(value: str, search_dir: Path | str | None = None) -> list[str]:
    """Problems of `loss:` that the spec shows (unknown identifier, unimportable module)."""
    if not value:
        return []
    if is_ref(value):
        return _check_ref(value, search_dir, "loss function")
    return [] if value in loss_names() else [_unknown("loss", value, loss_names())]


def check_metrics(values: Sequence[str], search_dir: Path | str | None = None) -> list[str]:
    problems: list[str] = []
    names = metric_names()
    for i, v in enumerate(values):
        if is_ref(v):
            problems += [f"[{i}]: {p}" for p in _check_ref(v, search_dir, "metric function")]
        elif v not in names and v not in _ACCURACY_ALIASES:
            problems.append(f"[{i}]: {_unknown('metric', v, names)}")
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
        return [_unknown("optimizer", value, names)]
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
            f"unknown Keras optimizer {name!r}{did_you_mean(name, known)}; give one of "
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
            f"unknown Keras learning-rate schedule {name!r}{did_you_mean(name, classes)}; give "
            f"one of {', '.join(sorted(classes))}. Received: {field}.class_name={name!r}"
        ]
    return check_arguments(classes[name], config, f"{field}.config")


# ------------------------------------------------------------------ arguments by signature
def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """` (did you mean 'X'?)` for the choice closest to `name` ignoring case, or "".

    pipeline.configs has the same hint for config keys; graphs cannot import pipeline."""
    by_lower = {c.lower(): c for c in choices}
    match = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    return f" (did you mean {by_lower[match[0]]!r}?)" if match else ""


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
        hint = did_you_mean(str(key), accepted)
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


# ------------------------------------------------------------------ building
def _with_logits(cls_or_fn: Any, from_logits: bool = True, **kwargs: Any) -> Any:
    """Keyword arguments with `from_logits` set when `cls_or_fn` takes that argument."""
    try:
        params: Any = inspect.signature(cls_or_fn).parameters
    except (TypeError, ValueError):
        params = {}
    if "from_logits" in params:
        kwargs["from_logits"] = from_logits
    return kwargs


def object_name(obj: Any) -> str:
    """How a Keras loss or metric object (from a model's `compile()`) is named: its `name`,
    else its function's or class's name, snake_case."""
    name = getattr(obj, "name", None)
    if isinstance(name, str) and name:
        return name
    return _snake(getattr(obj, "__name__", type(obj).__name__))


def keras_loss(obj: Any, from_logits: bool = True) -> Callable[[Any, Any], Any]:
    """An unreduced loss `(y_true, y_pred)` from a Keras loss class, function or instance,
    with `from_logits` where it takes the argument."""
    if isinstance(obj, type):
        return obj(**_with_logits(obj, from_logits, reduction=None))
    if inspect.isfunction(obj):
        kw = _with_logits(obj, from_logits)
        if not kw:
            return obj  # type: ignore[no-any-return]

        def with_kw(y: Any, p: Any) -> Any:
            return obj(y, p, **kw)

        return with_kw
    config = obj.get_config()  # an instance: rebuilt unreduced, from_logits as the outputs are
    config["reduction"] = None
    if "from_logits" in config:
        config["from_logits"] = from_logits
    return type(obj).from_config(config)


def make_loss(
    value: Any, task: str, num_classes: int, search_dir: Path | str | None = None,
    from_logits: bool = True,
) -> Callable[[Any, Any], Any] | None:
    """`(labels [B], outputs) -> per-example loss [B]`, or None for the built-in loss.

    `value`: "" (the built-in), a Keras loss identifier, `"module:function"`, or a Keras loss
    object as a model's `compile()` was given it. `from_logits=False`: the model outputs
    probabilities; the built-in is then the cross-entropy of the probabilities.
    """
    import keras
    import tensorflow as tf

    if not value:
        if from_logits or task == "regression":
            return None
        value = "sparse_categorical_crossentropy"  # the built-in, on probabilities
    if is_ref(value):
        fn = import_ref(value, search_dir, what="loss function")
        one_hot = False
        label = value
    elif isinstance(value, str):
        if value not in loss_names():
            raise RefError(_unknown("loss", value, loss_names()))
        fn = keras_loss(keras.losses.get(value), from_logits)
        one_hot = wants_one_hot(value)
        label = value
    else:
        fn = keras_loss(value, from_logits)
        label = object_name(value)
        one_hot = wants_one_hot(label)

    def per_example(labels: Any, logits: Any) -> Any:
        y_true, y_pred = targets(labels, logits, task, num_classes, one_hot)
        out = tf.convert_to_tensor(fn(y_true, y_pred))
        out = tf.cast(out, tf.float32)
        if out.shape.rank == 0:
            raise ValueError(
                f"loss {label!r} returned a scalar; it must return the per-example loss [B] "
                "(Baton averages it over the global batch). Received: shape []"
            )
        if out.shape.rank > 1:
            out = tf.reduce_mean(out, axis=list(range(1, out.shape.rank)))
        return out

    per_example.__name__ = f"loss_{_snake(label.split(':')[-1])}"
    # what the function itself receives from (labels, logits): check_objectives names it
    per_example.targets = (  # type: ignore[attr-defined]
        lambda labels, logits: targets(labels, logits, task, num_classes, one_hot))
    return per_example


def targets(labels: Any, logits: Any, task: str, num_classes: int, one_hot: bool) -> tuple[Any, Any]:
    """(y_true, y_pred) as losses and metrics see them (see the module docstring)."""
    import tensorflow as tf

    logits = tf.cast(logits, tf.float32)
    if task == "regression":
        y_pred = tf.reshape(logits, [-1, 1])
        return tf.reshape(tf.cast(labels, tf.float32), [-1, 1]), y_pred
    labels = tf.cast(labels, tf.int64)
    if one_hot:
        return tf.one_hot(labels, num_classes, dtype=tf.float32), logits
    return labels, logits


class EvalMetric:
    """A Keras metric with how its targets are shaped; `update(labels, logits)` in graph mode."""

    def __init__(self, metric: Any, one_hot: bool, task: str, num_classes: int) -> None:
        self.metric = metric
        self.one_hot = one_hot
        self.task = task
        self.num_classes = num_classes

    @property
    def name(self) -> str:
        return str(self.metric.name)

    def update(self, labels: Any, logits: Any) -> None:
        y_true, y_pred = targets(labels, logits, self.task, self.num_classes, self.one_hot)
        self.metric.update_state(y_true, y_pred)

    def result(self) -> float:
        return float(self.metric.result())

    def reset(self) -> None:
        self.metric.reset_state()


def make_metrics(
    values: Sequence[Any], task: str, num_classes: int, search_dir: Path | str | None = None,
    from_logits: bool = True,
) -> list[EvalMetric]:
    """The eval metrics named in `metrics:` (besides the built-in loss and accuracy).

    "accuracy"/"acc" (Keras compile()'s alias) is the built-in accuracy already recorded, so it
    adds nothing. A user `"module:function"` of `(y_true, y_pred) -> per-example values` is
    averaged over the split (keras.metrics.MeanMetricWrapper); a `keras.metrics.Metric` class,
    or a function taking no arguments that returns a Metric, gives that metric. A Keras metric
    object (as a model's `compile()` was given it) is used with `from_logits` set as the
    model's outputs are (`from_logits=False`: probabilities).
    """
    import keras

    out: list[EvalMetric] = []
    seen = {"loss", "accuracy"}
    for v in values:
        if isinstance(v, str) and v in _ACCURACY_ALIASES:
            continue
        if not isinstance(v, str):
            metric = _keras_metric(v, from_logits)
            one_hot = wants_one_hot(metric.name if isinstance(metric.name, str) else object_name(v))
        elif is_ref(v):
            fn = import_ref(v, search_dir, what="metric function")
            metric_class = isinstance(fn, type) and issubclass(fn, keras.metrics.Metric)
            if metric_class or _takes_no_args(fn):
                metric = fn()
            else:
                metric = keras.metrics.MeanMetricWrapper(fn, name=v.split(":")[-1].split(".")[-1])
            if not isinstance(metric, keras.metrics.Metric):
                raise RefError(
                    f"metric {v!r} returned {type(metric).__name__}, not a keras.metrics.Metric"
                )
            one_hot = False
        else:
            if v not in metric_names():
                raise RefError(_unknown("metric", v, metric_names()))
            metric = _keras_metric(keras.metrics.get(v), from_logits, name=v)
            one_hot = wants_one_hot(v)
        if metric.name in seen:
            continue
        seen.add(metric.name)
        out.append(EvalMetric(metric, one_hot, task, num_classes))
    return out


def _keras_metric(obj: Any, from_logits: bool, name: str | None = None) -> Any:
    """A fresh Keras metric from a class, a function or an instance, with `from_logits` set
    where it takes the argument."""
    import keras

    if inspect.isfunction(obj):
        return keras.metrics.MeanMetricWrapper(obj, name=name or obj.__name__,
                                               **_with_logits(obj, from_logits))
    cls: Any = obj if isinstance(obj, type) else type(obj)
    config = obj.get_config() if not isinstance(obj, type) else {}
    config.update(_with_logits(cls, from_logits))
    return cls.from_config(config) if config else cls()


def _takes_no_args(fn: Any) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return not [p for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY,
                                                                         p.POSITIONAL_OR_KEYWORD)]


def make_optimizer(value: Any, learning_rate: float, search_dir: Path | str | None = None) -> Any:
    """A Keras optimizer (call inside the strategy scope).

    `adam` and `sgd` keep Baton's settings (learning_rate from the stage; SGD with momentum
    0.9); another identifier is that Keras optimizer at `learning_rate`; a mapping goes to
    `keras.optimizers.get` as written (its own learning rate or schedule); `"module:function"`
    is called with no arguments and must return an optimizer.
    """
    import keras

    if isinstance(value, Mapping):
        try:
            opt = keras.optimizers.get(_with_schedule_module(value))
        except (TypeError, ValueError) as exc:
            raise RefError(
                f"keras.optimizers.get refused {dict(value)!r}: {str(exc).splitlines()[0]}"
            ) from None
    elif is_ref(value):
        fn = import_ref(value, search_dir, what="optimizer function")
        opt = fn()
    elif value == "adam":
        opt = keras.optimizers.Adam(learning_rate)
    elif value == "sgd":
        opt = keras.optimizers.SGD(learning_rate, momentum=0.9)
    else:
        if value.lower() not in optimizer_names():
            raise RefError(_unknown("optimizer", value, optimizer_names()))
        opt = keras.optimizers.get({"class_name": value.lower(), "config": {"learning_rate": learning_rate}})
    if not isinstance(opt, keras.optimizers.Optimizer):
        raise RefError(
            f"optimizer {value!r} gave {type(opt).__name__}, not a keras.optimizers.Optimizer"
        )
    return opt


def _with_schedule_module(value: Mapping[str, Any]) -> dict[str, Any]:
    """`{class_name, config}` with a nested learning-rate schedule mapping found among Keras'
    schedules (`ExponentialDecay`, ...) even when it does not say `module:`."""
    out = dict(value)
    config = dict(out.get("config") or {})
    lr = config.get("learning_rate")
    if isinstance(lr, Mapping) and "class_name" in lr and "module" not in lr:
        config["learning_rate"] = {"module": "keras.optimizers.schedules", **lr}
    out["config"] = config
    return out


def check_objectives(
    model: Any, spec: Any, loss_fn: Any, loss_name: str, metrics: Sequence[Any] = ()
) -> None:
    """Before the first step: the loss gives `[B]` and the metrics accept the model's output.

    Runs them eagerly on a two-row batch of zeros shaped as the feature spec says (class 0 or
    0.0 labels), metrics reset afterwards. A failure is a StageError naming the loss or metric
    and what it received.
    """
    import tensorflow as tf

    from baton.errors import StageError

    if loss_fn is None and not metrics:
        return
    rows = 2
    features = {
        f.name: tf.zeros([rows, *getattr(f, "shape", ())], tf.as_dtype(f.dtype))
        for f in spec.features
    }
    task = spec.label.task
    labels = tf.zeros([rows], tf.float32 if task == "regression" else tf.int64)
    logits = model(features, training=False)
    if loss_fn is not None:
        try:
            out = loss_fn(labels, logits)
        except Exception as exc:  # noqa: BLE001 - user code: name it and what it got
            raise StageError(
                f"train.config.loss {loss_name!r} failed on labels {_shape(labels)} and model "
                f"output {_shape(logits)}{_as_received(loss_fn, labels, logits)}: "
                f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
            ) from None
        if tuple(out.shape) != (rows,):
            raise StageError(
                f"train.config.loss {loss_name!r} must give the per-example loss [B]. Received: "
                f"shape {_shape(out)} for a batch of {rows}"
            )
    for m in metrics:
        try:
            m.update(labels, logits)
        except Exception as exc:  # noqa: BLE001
            raise StageError(
                f"train.config.metrics {m.name!r} failed on labels {_shape(labels)} and model "
                f"output {_shape(logits)}: {type(exc).__name__}: {str(exc).splitlines()[0]}"
            ) from None
        finally:
            m.reset()


def _as_received(loss_fn: Any, labels: Any, logits: Any) -> str:
    """` (given to it as y_true ..., y_pred ...)` where the loss function is handed other
    shapes than the raw labels and logits (a regression target as [B, 1], one-hot labels)."""
    convert = getattr(loss_fn, "targets", None)
    if convert is None:
        return ""
    y_true, y_pred = convert(labels, logits)
    if (_shape(y_true), _shape(y_pred)) == (_shape(labels), _shape(logits)):
        return ""
    return f" (given to it as y_true {_shape(y_true)}, y_pred {_shape(y_pred)})"


def _shape(x: Any) -> str:
    return f"{x.dtype.name}[{', '.join(str(d) for d in x.shape)}]"
