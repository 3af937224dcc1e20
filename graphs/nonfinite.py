"""Non-finite values (NaN, ±inf) in transformed features, model outputs and losses: counted,
and traced back to the first place they appear.

A missing number is NaN in Baton's raw contract; a `preprocessing_fn` that passes it through
(TFX's penguin function does, on data with missing values) hands NaN to the model, whose loss is
then NaN for the whole batch and whose served probabilities are NaN for those rows. The transform
stage counts the non-finite values of each output (`count_split`), and the training loop, when
a loss is not finite, says where it comes from (`first_cause`): a feature, the weights, the
model's output on finite features, or the loss on finite outputs, in that order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def count_split(dataset: Any, float_features: Iterable[str]) -> tuple[dict[str, int], int]:
    """({feature: rows holding a non-finite value}, rows) over a finite dataset of
    `(features, labels)` batches (graphs.input_pipeline.read_chunks), in one TensorFlow pass."""
    import tensorflow as tf

    names = sorted(float_features)

    def bad_rows(x: Any) -> Any:
        return tf.reduce_sum(tf.cast(bad_row_mask(tf, x), tf.int64))

    def add(acc: Any, batch: Any) -> Any:
        features, labels = batch
        counts = tf.stack([bad_rows(features[n]) for n in names]) if names else tf.zeros(
            [0], tf.int64)
        return acc[0] + counts, acc[1] + tf.shape(labels, out_type=tf.int64)[0]

    counts, rows = dataset.reduce((tf.zeros([len(names)], tf.int64), tf.constant(0, tf.int64)),
                                  add)
    return dict(zip(names, (int(c) for c in counts.numpy()), strict=True)), int(rows)


def bad_row_mask(tf: Any, x: Any) -> Any:
    """`[B]` bool: the rows of `x` holding a non-finite value, for a dense `[B, ...]` tensor,
    a RaggedTensor or a SparseTensor (the encodings a transformed float feature has)."""
    if isinstance(x, tf.SparseTensor):
        bad = ~tf.math.is_finite(x.values)
        rows = tf.boolean_mask(x.indices[:, 0], bad)
        return tf.math.unsorted_segment_max(tf.ones_like(rows, tf.int32), rows,
                                            tf.cast(x.dense_shape[0], tf.int32)) > 0
    if isinstance(x, tf.RaggedTensor):
        flat = x.merge_dims(1, -1) if x.shape.rank > 2 else x  # [B, (values)]
        rows = tf.boolean_mask(flat.value_rowids(), ~tf.math.is_finite(flat.values))
        return tf.math.unsorted_segment_max(tf.ones_like(rows, tf.int32), rows,
                                            tf.cast(x.nrows(), tf.int32)) > 0
    flat = tf.reshape(x, [tf.shape(x)[0], -1])
    return tf.reduce_any(~tf.math.is_finite(flat), axis=1)


def count_transformed(transformed_dir: Any, spec: Any, splits: Iterable[str]
                      ) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """Per split, {feature: rows with a non-finite value} and the rows, over the transform's
    written chunks (graphs.input_pipeline.read_chunks): one pass, in TensorFlow."""
    import dataclasses

    from baton.graphs.input_pipeline import read_chunks

    floats = tuple(f for f in spec.features if f.kind == "numeric")
    numeric = [f.name for f in floats]
    counts: dict[str, dict[str, int]] = {}
    rows: dict[str, int] = {}
    if not floats:  # nothing to count: no pass over the data
        return counts, rows
    # only the float columns are parsed: token ids, strings and ids are not read
    floats_only = dataclasses.replace(spec, features=floats, images=())
    for split in splits:
        try:
            ds = read_chunks(transformed_dir, split, floats_only)
        except FileNotFoundError:
            continue
        counts[split], rows[split] = count_split(ds, numeric)
    return counts, rows


def transform_note(transformed_dir: Any, spec: Any, splits: Iterable[str]) -> tuple[str | None, int]:
    """(the transform stage's warning about non-finite outputs or None, rows affected)."""
    return counts_note(*count_transformed(transformed_dir, spec, splits))


def counts_note(counts: Mapping[str, Mapping[str, int]], rows: Mapping[str, int]
                ) -> tuple[str | None, int]:
    """`transform_note` from counts already made ({split: {feature: rows with a non-finite
    value}}, {split: rows}): the apply step counts the arrays it writes as it writes them
    (dataplane.records.transformed_io.nonfinite_rows), so the stage need not read them back."""
    total = sum(n for per in counts.values() for n in per.values())
    if not total:
        return None, 0
    return (f"warning: non-finite outputs (NaN or infinite), per feature: "
            f"{describe_counts(counts, rows)}; a model trained on them fails (the train stage "
            "names the first): impute missing values in the preprocessing_fn "
            "(tft.mean, a default) or drop those rows", total)


def describe_counts(counts: Mapping[str, Mapping[str, int]], rows: Mapping[str, int]) -> str:
    """`'x_xf': 2 of 278 train rows, 1 of 66 eval rows; ...` for the features with any."""
    parts = []
    features = sorted({f for per in counts.values() for f, n in per.items() if n})
    for f in features:
        where = ", ".join(f"{counts[s][f]} of {rows[s]} {s} rows" for s in counts
                          if counts[s].get(f))
        parts.append(f"{f!r}: {where}")
    return "; ".join(parts)


def first_cause(batches: Iterable[Any], model: Any, loss_fn: Any, split: str,
                max_batches: int = 10_000) -> str | None:
    """Where non-finite values first appear in `batches` of `(features, labels)` (a finite,
    re-iterable dataset, read eagerly and in order): a feature anywhere in the split, else a
    weight, else the model's output on a row, else the loss on a row. None when all are finite.
    `loss_fn`: `(labels, outputs) -> per-example loss`."""
    import itertools

    import numpy as np

    row = 0
    for i, (features, labels) in enumerate(itertools.islice(batches, max_batches)):
        n = int(labels.shape[0])
        for name in sorted(features):
            found = _bad_rows(features[name], n)
            if found is None:
                continue
            bad, first_values = found
            if bad.any():
                first = int(np.argmax(bad))
                return (f"feature {name!r} is {_what(first_values(first))} in "
                        f"{int(bad.sum())} of the {n} {split} rows of batch {i + 1} (first at "
                        f"{split} row {row + first}): the transform hands it on (a missing "
                        "value is NaN): impute it in the preprocessing_fn or drop those rows")
        row += n
    weights = _nonfinite_weight(model)
    if weights is not None:
        return weights
    row = 0
    for features, labels in itertools.islice(batches, max_batches):
        n = int(labels.shape[0])
        out = np.asarray(model(features, training=False))
        bad = ~np.isfinite(out.reshape(n, -1)).all(axis=1)
        if bad.any():
            first = int(np.argmax(bad))
            return (f"the model's output is {_what(out.reshape(n, -1)[first])} for {split} row "
                    f"{row + first}, whose features are finite: an operation of the model "
                    "overflows (a log or a division of its own?)")
        per = np.asarray(loss_fn(labels, out)).reshape(-1)
        bad = ~np.isfinite(per)
        if bad.any():
            first = int(np.argmax(bad))
            return (f"the loss is {_what(per[first:first + 1])} for {split} row {row + first} "
                    f"(label {np.asarray(labels)[first]!r}, model output "
                    f"{np.round(out[first], 4).tolist()}), whose output is finite: the loss "
                    "takes a log of 0 or divides by 0 (a loss built for logits on "
                    "probabilities, or the reverse?)")
        row += n
    return None


def _bad_rows(value: Any, n: int) -> Any:
    """(`[n]` bool mask of the rows holding a non-finite value, row -> that row's values) for a
    float feature, dense, ragged or sparse; None for any other dtype."""
    import numpy as np
    import tensorflow as tf

    if isinstance(value, tf.RaggedTensor | tf.SparseTensor):
        if not value.dtype.is_floating:
            return None
        if isinstance(value, tf.SparseTensor):
            idx, vals = value.indices.numpy()[:, 0], value.values.numpy()
            return bad_row_mask(tf, value).numpy(), lambda i: vals[idx == i]
        rows = value.merge_dims(1, -1) if value.shape.rank > 2 else value  # [B, (values)]
        return bad_row_mask(tf, value).numpy(), lambda i: rows[i].numpy()
    x = np.asarray(value)
    if x.dtype.kind != "f":
        return None
    flat = x.reshape(n, -1)
    return ~np.isfinite(flat).all(axis=1), lambda i: flat[i]


def weights_finite(model: Any) -> bool:
    """Every float weight of `model` finite: one reduction per variable, on the variable's own
    device (a parameter server's), so only a bool travels."""
    import tensorflow as tf

    for w in model.weights:
        v = getattr(w, "value", w)
        if not v.dtype.is_floating:
            continue
        with tf.device(getattr(v, "device", None) or None):
            ok = tf.reduce_all(tf.math.is_finite(v))
        if not bool(ok):
            return False
    return True


def _nonfinite_weight(model: Any) -> str | None:
    import numpy as np

    for w in model.weights:
        v = np.asarray(w.numpy() if hasattr(w, "numpy") else w)
        if v.dtype.kind == "f" and not np.isfinite(v).all():
            return (f"the weight {getattr(w, 'path', getattr(w, 'name', '?'))!r} holds "
                    f"{_what(v.reshape(-1))} while the features are finite: training diverged "
                    "(lower the learning rate, or clip the gradients: clipnorm in the optimizer)")
    return None


def _what(values: Any) -> str:
    import numpy as np

    v = np.asarray(values, dtype="float64").reshape(-1)
    if np.isnan(v).any():
        return "NaN"
    return "+inf" if (v == np.inf).any() else "-inf"
