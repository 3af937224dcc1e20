"""What a step counts, and how the counts read as metrics.

Every chunk (graphs.steps) and every evaluation (graphs.eval_step) returns its totals summed
over the batch and the replicas, in the order of `TOTALS`: the loss summed over examples, the
correct predictions (classification), the examples, and (a chunk only) the stop flag. Sums
travel through one all-reduce and add up over chunks; `totals_to_metrics` divides them once.
"""

from __future__ import annotations

from typing import Any

TOTALS = ("loss_sum", "correct", "examples", "stop")


def loss_per_example(task: str, labels: Any, logits: Any) -> Any:
    """Per-example loss: softmax cross-entropy on class ids, or squared error for regression."""
    import tensorflow as tf

    logits = tf.cast(logits, tf.float32)
    if task == "regression":
        return tf.square(tf.cast(labels, tf.float32) - logits[:, 0])
    return tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.cast(labels, tf.int64), logits=logits
    )


def correct_count(task: str, labels: Any, logits: Any) -> Any:
    import tensorflow as tf

    if task == "regression":
        return tf.constant(0.0)
    hits = tf.equal(tf.argmax(logits, axis=-1), tf.cast(labels, tf.int64))
    return tf.reduce_sum(tf.cast(hits, tf.float32))


def totals_to_metrics(totals: Any, task: str) -> dict[str, float]:
    """`{"loss": mean loss, "accuracy": ...}` from summed totals (accuracy for classification)."""
    loss_sum, correct, n = (float(x) for x in list(totals)[:3])
    n = max(n, 1.0)
    out = {"loss": loss_sum / n}
    if task != "regression":
        out["accuracy"] = correct / n
    return out
