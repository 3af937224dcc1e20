"""Reading the eval split and running transform + model on it, shared by the release stages.

Evaluate, export (warmup rows), check and edge all need the same three things: raw eval rows
as columns (to slice by raw categorical values and to build serving requests), the labels, and
the model's outputs on the transformed rows. Reading raw examples (not the `transformed`
artifact) is deliberate: it runs the transform graph exactly as the served model will.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from baton.errors import StageError
from baton.graphs.feature_spec import FeatureSpec
from baton.strategies.job import MODEL_FILE, TRAIN_INFO_FILE


@dataclasses.dataclass
class Split:
    """Rows of one split: raw columns (numpy), labels, and the serialized tf.Examples."""

    columns: dict[str, Any]  # name -> np.ndarray[N] (float32 with NaN, int64, or object bytes),
    # or [N, *shape] for a tensor feature (an image [N, H, W, C]; NaN where missing)
    labels: Any  # np.ndarray[N]: int64 class ids, or float32 for regression
    serialized: list[bytes]

    def __len__(self) -> int:
        return len(self.serialized)

    def raw_strings(self, name: str) -> list[str]:
        """A categorical column as str values, "" for missing."""
        col = self.columns[name]
        return [v.decode() if isinstance(v, bytes) else str(v) for v in col]

    def take(self, n: int) -> Split:
        return Split({k: v[:n] for k, v in self.columns.items()}, self.labels[:n],
                     self.serialized[:n])


def split_files(examples: Path, split: str) -> list[Path]:
    """The TFRecord shards of `split`, or StageError naming the directory that was looked at."""
    d = examples / split
    files = sorted(p for p in d.glob("*") if p.is_file() and not p.name.startswith((".", "_")))
    files = [p for p in files if p.suffix not in (".json", ".txt")]
    if not files:
        raise StageError(f"examples: no TFRecord files for split {split!r} in {d}")
    return files


def read_split(examples: Path, spec: FeatureSpec, split: str = "eval",
               limit: int | None = None) -> Split:
    """Parse one split of an `examples` artifact (rows without a label are dropped)."""
    import numpy as np
    import tensorflow as tf

    files = split_files(examples, split)
    with files[0].open("rb") as f:
        gz = f.read(2) == b"\x1f\x8b"  # ingest may write GZIP-compressed shards
    ds = tf.data.TFRecordDataset([str(p) for p in files], compression_type="GZIP" if gz else "")
    serialized = [r.numpy() for r in (ds.take(limit) if limit else ds)]
    if not serialized:
        raise StageError(f"examples: split {split!r} in {examples} has no rows")
    label = spec.label
    label_kind = _label_kind(serialized, label.name)
    parse = {}
    for raw in spec.raw_features:
        if raw.name == label.name:
            continue
        dtype = {"float32": tf.float32, "int64": tf.int64, "string": tf.string}[raw.dtype]
        default = {"float32": float("nan"), "int64": 0, "string": ""}[raw.dtype]
        shape = tuple(raw.shape)
        parse[raw.name] = tf.io.FixedLenFeature(
            list(shape), dtype,
            default_value=np.full(shape, default, raw.dtype) if shape else default)
    ltype = {"float_list": tf.float32, "int64_list": tf.int64}.get(label_kind, tf.string)
    parse[label.name] = tf.io.VarLenFeature(ltype)
    parsed = tf.io.parse_example(tf.constant(serialized), parse)
    sparse = parsed.pop(label.name)
    present = np.zeros(len(serialized), dtype=bool)
    present[sparse.indices.numpy()[:, 0]] = True
    dense = tf.sparse.to_dense(sparse, default_value=_missing(ltype)).numpy()
    raw_label = dense[:, 0] if dense.shape[1] else np.full(len(serialized), _missing(ltype))
    columns = {k: v.numpy() for k, v in parsed.items()}
    if label.task == "regression":
        labels = raw_label.astype("float32")
    else:
        vocab = {v: i for i, v in enumerate(label.vocabulary)}
        text = [v.decode() if isinstance(v, bytes) else _num_text(v) for v in raw_label]
        unknown = sorted({t for t, p in zip(text, present, strict=True) if p and t not in vocab})
        if unknown:
            raise StageError(
                f"examples: label {label.name!r} has values outside the label vocabulary "
                f"{list(label.vocabulary)}. Received: {unknown[:5]}"
            )
        labels = np.array([vocab.get(t, -1) for t in text], dtype="int64")
    idx = np.nonzero(present)[0]
    return Split({k: v[idx] for k, v in columns.items()}, labels[idx],
                 [serialized[i] for i in idx])


def _missing(dtype: Any) -> Any:
    import tensorflow as tf

    return "" if dtype == tf.string else 0


def _num_text(v: Any) -> str:
    return str(int(v)) if float(v).is_integer() else str(v)


def _label_kind(serialized: list[bytes], name: str) -> str:
    import tensorflow as tf

    for s in serialized[:50]:
        feat = tf.train.Example.FromString(s).features.feature
        if name in feat:
            return feat[name].WhichOneof("kind")
    raise StageError(f"examples: no row has the label column {name!r}")


def load_transform(transform_dir: Path) -> Any:
    import tensorflow as tf

    try:
        return tf.saved_model.load(str(transform_dir))
    except Exception as exc:  # noqa: BLE001 - any load failure is a bad artifact
        raise StageError(f"transform_graph: cannot load SavedModel at {transform_dir}: {exc}") from None


def load_model(model_dir: Path) -> Any:
    """`model.keras`, with the user's modules its custom layers come from imported first.

    train_info.json names them (`user_modules`) and where they were imported from
    (`code_dir`, the spec's directory; on a pod the ConfigMap mounted beside the spec).
    """
    import json

    import keras

    path = model_dir / MODEL_FILE
    if not path.is_file():
        raise StageError(f"model: expected model.keras in {model_dir}; found "
                         f"{sorted(p.name for p in model_dir.iterdir())}")
    custom: dict[str, Any] = {}
    try:
        info = json.loads((model_dir / TRAIN_INFO_FILE).read_text())
    except (OSError, ValueError):
        info = {}
    if info.get("user_modules"):
        from baton.graphs.user_refs import RefError, custom_objects

        try:
            custom = custom_objects(list(info["user_modules"]), info.get("code_dir") or None)
        except RefError as exc:
            raise StageError(f"model: {model_dir} needs the modules that trained it: {exc}") from None
    return keras.saving.load_model(path, compile=False, custom_objects=custom or None)


def transform_split(transform: Any, split: Split, spec: FeatureSpec) -> dict[str, Any]:
    """Transformed features (numpy) of the split, restricted to the model's features."""
    import tensorflow as tf

    raw = {f.name: tf.constant(split.columns[f.name]) for f in spec.raw_features
           if f.name != spec.label.name}
    out = transform.transform_features(raw)
    missing = [f.name for f in spec.features if f.name not in out]
    if missing:
        raise StageError(f"transform_graph: transform_features did not produce features "
                         f"{missing} named in feature_spec.json; it produced {sorted(out)}")
    # a ragged or sparse feature stays a tf value: the model takes it as such
    return {f.name: out[f.name].numpy() if f.dense else out[f.name] for f in spec.features}


def predict(model: Any, features: dict[str, Any], batch_size: int = 256) -> Any:
    """Model outputs (logits [N, C] or [N, 1]) in batches, as float32 numpy."""
    import numpy as np

    from baton.graphs.feature_spec import slice_rows
    from baton.graphs.tft.module import nrows

    n = nrows(next(iter(features.values()))) or 0
    parts = []
    for start in range(0, n, batch_size):
        batch = {k: slice_rows(v, start, min(start + batch_size, n)) for k, v in features.items()}
        if not all(isinstance(v, np.ndarray) for v in batch.values()):  # Keras takes one kind
            import tensorflow as tf

            batch = {k: tf.constant(v) if isinstance(v, np.ndarray) else v
                     for k, v in batch.items()}
        parts.append(np.asarray(model(batch, training=False), dtype="float32"))
    return np.concatenate(parts, axis=0)


def train_info(model_dir: Path) -> dict[str, Any]:
    """The model's train_info.json ({} when absent or unreadable)."""
    import json

    try:
        return dict(json.loads((model_dir / TRAIN_INFO_FILE).read_text()))
    except (OSError, ValueError):
        return {}


def model_metrics(model_dir: Path, spec: FeatureSpec) -> list[Any]:
    """The Keras metrics the model was trained with (the spec's `metrics:` and its compile()'s,
    graphs.metric_records), rebuilt as they were built for it; its modules imported first."""
    from baton.graphs.metric_records import rebuild
    from baton.graphs.user_refs import RefError, custom_objects

    info = train_info(model_dir)
    if not info.get("metrics"):
        return []
    try:
        custom = (custom_objects(list(info["user_modules"]), info.get("code_dir") or None)
                  if info.get("user_modules") else {})
    except RefError:
        custom = {}
    return rebuild(info["metrics"], spec.label.task, spec.label.num_classes, custom)


def output_kind(model_dir: Path) -> str:
    """What the trained classifier outputs, as training decided (train_info.json `outputs`,
    graphs.model_outputs): "probabilities" (a softmax at its end) or "logits" (also for models
    trained before it was recorded, which were all trained as logits)."""
    return str((train_info(model_dir).get("outputs") or {}).get("kind", "logits"))


def probabilities(outputs: Any, kind: str) -> Any:
    """Class probabilities from a classifier's outputs (a softmax of logits; probabilities as
    they are)."""
    from baton.graphs.model_outputs import to_probabilities

    return to_probabilities(outputs, kind)
