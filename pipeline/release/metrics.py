"""Evaluation metrics in plain numpy: small, exact, and the same in every stage that needs them.

Keras metrics would need a compiled model and a graph per slice; the eval split of a release
gate is small enough that exact numpy computations over all rows are simpler and deterministic.
Each metric has a direction (higher or lower is better) that the gate uses to read a bare
threshold number and to decide which way a change against the baseline is a regression.
"""

from __future__ import annotations

from typing import Any

CLASSIFICATION = ("accuracy", "auc", "loss", "precision", "recall", "calibration_error",
                  "example_count")
REGRESSION = ("mse", "mae", "rmse", "loss", "example_count")
PER_CLASS = ("precision", "recall")  # also reported as "precision/<class>"
LOWER_IS_BETTER = {"loss", "calibration_error", "mse", "mae", "rmse"}


def higher_is_better(name: str) -> bool:
    return name.split("/", 1)[0] not in LOWER_IS_BETTER


def is_known(name: str, task: str | None = None, classes: tuple[str, ...] | None = None) -> bool:
    """Whether `name` is a metric this module computes (for the task, and class when given)."""
    base, _, cls = name.partition("/")
    names = {"classification": CLASSIFICATION, "regression": REGRESSION}.get(
        task or "", CLASSIFICATION + REGRESSION)
    if cls:
        return base in PER_CLASS and task != "regression" and (classes is None or cls in classes)
    return base in names


def classification(probs: Any, labels: Any, classes: tuple[str, ...], bins: int = 10) -> dict:
    """Scalar metrics of a classifier; per-class precision/recall as "precision/<class>"."""
    import numpy as np

    n, c = probs.shape
    pred = probs.argmax(axis=1)
    out: dict[str, float] = {"example_count": float(n)}
    if n == 0:
        return out
    out["accuracy"] = float((pred == labels).mean())
    p_true = np.clip(probs[np.arange(n), labels], 1e-7, 1.0)
    out["loss"] = float(-np.log(p_true).mean())
    precisions, recalls, aucs = [], [], []
    for k in range(c):
        tp = float(((pred == k) & (labels == k)).sum())
        predicted, actual = float((pred == k).sum()), float((labels == k).sum())
        prec = tp / predicted if predicted else 0.0
        rec = tp / actual if actual else 0.0
        name = classes[k] if k < len(classes) else str(k)
        out[f"precision/{name}"], out[f"recall/{name}"] = prec, rec
        if actual:
            precisions.append(prec)
            recalls.append(rec)
            auc = binary_auc(probs[:, k], labels == k)
            if auc is not None:
                aucs.append(auc)
    out["precision"] = float(np.mean(precisions)) if precisions else 0.0
    out["recall"] = float(np.mean(recalls)) if recalls else 0.0
    if aucs:
        out["auc"] = float(np.mean(aucs))  # macro one-vs-rest
    out["calibration_error"] = float(calibration(probs, labels, bins)["ece"])
    return out


def binary_auc(scores: Any, positive: Any) -> float | None:
    """ROC AUC from ranks (Mann-Whitney U, ties averaged); None when one class is absent."""
    import numpy as np

    pos = int(positive.sum())
    neg = len(positive) - pos
    if pos == 0 or neg == 0:
        return None
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores), dtype="float64")
    sorted_scores = scores[order]
    i = 0
    while i < len(scores):
        j = i
        while j + 1 < len(scores) and sorted_scores[j + 1] == sorted_scores[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return float((ranks[positive].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


def calibration(probs: Any, labels: Any, bins: int = 10) -> dict[str, Any]:
    """Expected calibration error of the top-class confidence, with the reliability bins."""
    import numpy as np

    conf = probs.max(axis=1)
    correct = probs.argmax(axis=1) == labels
    edges = np.linspace(0.0, 1.0, bins + 1)
    table, ece = [], 0.0
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        mask = (conf > lo) & (conf <= hi) if lo > 0 else (conf >= lo) & (conf <= hi)
        count = int(mask.sum())
        if count:
            acc, mean_conf = float(correct[mask].mean()), float(conf[mask].mean())
            ece += count / len(conf) * abs(acc - mean_conf)
            table.append({"bin": [float(lo), float(hi)], "count": count,
                          "accuracy": acc, "confidence": mean_conf})
    return {"ece": ece, "bins": table}


def confusion(probs: Any, labels: Any, num_classes: int) -> list[list[int]]:
    """Confusion matrix: rows are true classes, columns predicted classes."""
    import numpy as np

    m = np.zeros((num_classes, num_classes), dtype=int)
    np.add.at(m, (labels, probs.argmax(axis=1)), 1)
    return m.tolist()


def regression(pred: Any, target: Any) -> dict[str, float]:
    import numpy as np

    n = len(target)
    out: dict[str, float] = {"example_count": float(n)}
    if n == 0:
        return out
    err = pred.reshape(-1).astype("float64") - target.astype("float64")
    out["mse"] = float((err ** 2).mean())
    out["mae"] = float(np.abs(err).mean())
    out["rmse"] = float(np.sqrt(out["mse"]))
    out["loss"] = out["mse"]
    return out


def compute(outputs: Any, labels: Any, task: str, classes: tuple[str, ...],
            bins: int = 10) -> dict[str, float]:
    """Metrics of model `outputs` (probabilities, or predictions for regression)."""
    if task == "regression":
        return regression(outputs, labels)
    return classification(outputs, labels, classes, bins)


def sliced(outputs: Any, labels: Any, task: str, classes: tuple[str, ...],
           slices: dict[str, list[str]], bins: int = 10) -> dict[str, dict[str, dict]]:
    """Metrics per value of each slicing column: {feature: {value: metrics}}.

    Missing values ("") form their own slice named "<missing>", so a model that fails on rows
    with missing data is visible rather than averaged away.
    """
    import numpy as np

    out: dict[str, dict[str, dict]] = {}
    for feature, values in slices.items():
        col = np.asarray(["<missing>" if v == "" else v for v in values], dtype=object)
        out[feature] = {}
        for value in sorted(set(col.tolist())):
            mask = col == value
            out[feature][value] = compute(outputs[mask], labels[mask], task, classes, bins)
    return out
