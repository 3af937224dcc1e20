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

The same settings are checked without being built, at plan time, in graphs.objective_checks
(over the identifiers of graphs.keras_names).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from baton.graphs.keras_names import (
    ACCURACY_ALIASES,
    loss_names,
    metric_names,
    optimizer_names,
    snake,
    unknown_identifier,
    wants_one_hot,
)
from baton.graphs.user_refs import RefError, import_ref, is_ref


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
    return snake(getattr(obj, "__name__", type(obj).__name__))


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
            raise RefError(unknown_identifier("loss", value, loss_names()))
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

    per_example.__name__ = f"loss_{snake(label.split(':')[-1])}"
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
        if isinstance(v, str) and v in ACCURACY_ALIASES:
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
                raise RefError(unknown_identifier("metric", v, metric_names()))
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
            raise RefError(unknown_identifier("optimizer", value, optimizer_names()))
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
