"""Keras identifiers as a spec writes them: the names Keras knows, and what each fits.

Shared by the checks at plan time (graphs.objective_checks) and the building at train time
(graphs.objectives): which losses, metrics and optimizers exist (for "did you mean"), which
task an identifier plainly belongs to, whether it compares one-hot targets.
"""

from __future__ import annotations

from baton.configs import did_you_mean

# "accuracy" in Keras' compile() means the accuracy that fits the targets; here, class ids.
ACCURACY_ALIASES = ("accuracy", "acc")
_REGRESSION_ONLY = (
    "mean_squared", "mean_absolute", "mse", "mae", "mape", "msle", "r2", "root_mean_squared",
    "log_cosh", "pearson", "concordance", "poisson", "cosine",
)
_CLASSIFICATION_ONLY = (
    "accuracy", "crossentropy", "auc", "precision", "recall", "hinge", "top_k", "io_u", "iou",
    "f1", "f_beta", "fbeta", "true_", "false_", "sensitivity", "specificity", "kl_div", "kld",
)
LOSSES_DEFAULT = ""  # the built-in: softmax cross-entropy on logits, squared error (regression)


def snake(name: str) -> str:
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i and (not name[i - 1].isupper()):
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


def fits_task(name: str, task: str) -> bool:
    """False when a Keras loss/metric identifier plainly belongs to the other task."""
    s = snake(name)
    if task == "regression":
        return not any(k in s for k in _CLASSIFICATION_ONLY)
    return not any(s == k or s.startswith(k) for k in _REGRESSION_ONLY)


def wants_one_hot(name: str) -> bool:
    """Keras' classification losses and metrics compare targets shaped like the logits, except
    the `sparse_` ones, which take class ids."""
    return "sparse" not in snake(name)


# ------------------------------------------------------------------ names (for did-you-mean)
def loss_names() -> list[str]:
    from keras.src import losses

    return sorted(n for n in losses.ALL_OBJECTS_DICT if n not in ("Loss", "LossFunctionWrapper"))


def metric_names() -> list[str]:
    from keras.src import metrics

    skip = ("Metric", "metric", "MeanMetricWrapper", "mean_metric_wrapper", "Mean", "Sum")
    return sorted(n for n in metrics.ALL_OBJECTS_DICT if n not in skip) + list(ACCURACY_ALIASES[1:])


def optimizer_names() -> list[str]:
    from keras.src import optimizers

    skip = ("optimizer", "lossscaleoptimizer", "multioptimizer", "optimizermap")
    return sorted(n for n in optimizers.ALL_OBJECTS_DICT if n not in skip)


def unknown_identifier(kind: str, value: str, names: list[str]) -> str:
    mean = did_you_mean(value, names, cutoff=0.5)
    return (
        f"unknown Keras {kind} {value!r}{mean}; give a Keras {kind} identifier "
        f"({', '.join(names[:12])}, ...) or 'module:function'. Received: {value!r}"
    )
