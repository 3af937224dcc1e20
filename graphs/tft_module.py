"""A preprocessing_fn's final graph as the transform SavedModel, and its feature spec.

The module has the interface of graphs.transform's: `transform_features(raw)` over the raw
feature columns and `transform_label(raw_label)`, so training, export, check, edge and serving
take it unchanged. `transform_features` calls the user's function with every analyzer a
constant (graphs.tft_engine.transform_fn's trace) and the lookup tables tracked by the module;
the label column is not a serving input, so the function sees a placeholder for it and the
label output is left out (Baton encodes the label itself: `transform_label`, the class
vocabulary, as for the built-in transform). The same module object is what the Beam apply
step calls on record batches, so what trains is what serves.

Besides the SavedModel the directory holds `assets/<vocab_filename>` (one token per line, as
tf.Transform writes them) and `tft_metadata.json` (the outputs' dtypes, shapes and id ranges).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from baton.errors import BatonError
from baton.graphs import tft_engine, tft_feed, tft_trace
from baton.graphs.tft_output import METADATA_FILE


class OutputError(BatonError, ValueError):
    """An output the models cannot take; the message names the feature and what it is."""


@dataclasses.dataclass
class Built:
    module: Any  # the tf.Module
    outputs: dict[str, dict[str, Any]]  # name -> dtype, shape, min/max of ids
    vocabularies: dict[str, list[bytes]]  # vocab_filename -> tokens
    features: list[Any] = dataclasses.field(default_factory=list)  # the feature spec's
    inputs: frozenset[str] = frozenset()  # the raw features it reads (tft_feed.used_inputs)
    # the function returned the label changed (not passed through): its output is dropped, as
    # Baton encodes the label itself; the stage and the dry run say so (label_note)
    label_transformed: bool = False
    # outputs that pass the label through under another name (TFX's `species_xf`): the label,
    # not features (graphs.label_outputs)
    label_aliases: tuple[str, ...] = ()


def build_module(preprocessing_fn: Callable[[dict[str, Any]], Any], raw: list[tuple[str, str, Any]],
                 label: Mapping[str, Any], resolved: Mapping[int, list[Any]]) -> Built:
    """The tf.Module. `raw`: (name, dtype, shape) of the feature columns; `label`: the
    analysis' label entry ({"name", "dtype", "task", "vocabulary"})."""
    import tensorflow as tf

    from baton.graphs.transform import apply_label, vocabulary_table

    specs = tft_engine.raw_specs(raw)
    label_name = label["name"]
    label_dtype = tf.string if label["dtype"] == "string" else tf.float32

    transformed_label = []
    aliases: list[str] = []

    def features_fn(inputs: dict[str, Any]) -> dict[str, Any]:
        from baton.graphs import label_outputs

        batch = tf.shape(next(iter(inputs.values())))[0]
        stub = tf.cast(tf.fill([batch], "" if label_dtype == tf.string else float("nan")),
                       label_dtype)
        outputs = preprocessing_fn({**inputs, label_name: stub})
        if not isinstance(outputs, Mapping):
            raise OutputError(f"returned {type(outputs).__name__}, not a dict of tensors")
        if label_name in outputs and outputs[label_name] is not stub:
            transformed_label.append(True)
        try:
            features, passed = label_outputs.split(outputs, stub, label_name)
        except ValueError as exc:
            raise OutputError(str(exc)) from None
        aliases[:] = passed
        return features

    trace, concrete = tft_engine.transform_fn(features_fn, specs, resolved)

    class PreprocessingModule(tf.Module):
        def __init__(self) -> None:
            super().__init__(name="baton_preprocessing")
            self.tables = list(trace.tables)
            if label["task"] == "classification":
                self.label_table = vocabulary_table(tf, label["vocabulary"])
            self._concrete = concrete

        @tf.function(input_signature=[specs], autograph=False)
        def transform_features(self, raw_features):
            return self._concrete(raw=raw_features)

        @tf.function(input_signature=[tf.TensorSpec([None], label_dtype, name="label")],
                     autograph=False)
        def transform_label(self, raw_label):
            return apply_label(tf, label["task"], getattr(self, "label_table", None), raw_label)

    built = Built(PreprocessingModule(), outputs_info(trace, concrete),
                  {name: [bytes(t) for t in resolved[k][0]]
                   for name, k in trace.vocab_files.items() if k in resolved},
                  inputs=tft_feed.used_inputs(concrete), label_transformed=bool(transformed_label),
                  label_aliases=tuple(aliases))
    built.features = features(built.outputs)  # checked now: before any data is transformed
    return built


def label_note(built: Built, label: str) -> str | None:
    """The warning for a label the function changed (None when it passed it through or left it
    out): TFX pipelines often encode or scale the label in their preprocessing_fn, and a user
    who does must know that Baton trains on its own encoding of the raw label instead."""
    if built.label_aliases and not built.label_transformed:
        return (f"output(s) {', '.join(map(repr, built.label_aliases))} pass the label {label!r} "
                "through: Baton trains on the label itself (its own encoding), not as a feature")
    if not built.label_transformed:
        return None
    return (f"warning: output {label!r} is the label, changed by the preprocessing_fn; Baton "
            "encodes the raw label itself (classification: its class vocabulary; regression: "
            "the raw value), so this output is not used: pass the label through or leave it out")


def check_rows(outputs: Mapping[str, Any], rows: int) -> None:
    """Raise OutputError unless every applied output (numpy arrays) has `rows` rows: an output
    must keep its input's batch dimension, or its rows no longer line up with the label's.
    The stage's apply step and the dry run both check with this, so they say the same."""
    for name, value in outputs.items():
        if value.shape[:1] != (rows,):
            got = value.shape[0] if value.ndim else "no"
            raise OutputError(f"output {name!r} has {got} rows for a batch of {rows}: "
                              "outputs keep the batch dimension")


def outputs_info(trace: tft_trace.Trace, concrete: Any) -> dict[str, dict[str, Any]]:
    """Each output's dtype, per-example shape and id range (int64 outputs of a vocabulary,
    buckets or hashes); OutputError for what the models cannot take."""
    import tensorflow as tf

    outputs = trace.outputs or {}
    info: dict[str, dict[str, Any]] = {}
    for name, t in outputs.items():
        if isinstance(t, tf.RaggedTensor | tf.SparseTensor):
            raise OutputError(f"output {name!r} is a {type(t).__name__}: Baton's models take "
                              "fixed-shape features (densify it, e.g. .to_tensor(shape=...), "
                              "or reduce it per example)")
        shape = t.shape[1:]
        if not shape.is_fully_defined():
            raise OutputError(f"output {name!r} has per-example shape {shape}: it must be "
                              "fixed (a scalar, a vector [D] or an image [H, W, C])")
        if t.shape.rank == 0:
            raise OutputError(f"output {name!r} is a scalar, not a batch [B, ...]")
        entry: dict[str, Any] = {"dtype": t.dtype.name, "shape": [int(d) for d in shape]}
        if t.dtype.is_integer:
            domain = trace.domains.get(t.ref())
            if domain is not None:
                entry["min"], entry["max"] = int(domain[0]), int(domain[1])
        elif t.dtype not in (tf.float32, tf.float64, tf.float16):
            raise OutputError(f"output {name!r} is {t.dtype.name}: outputs are numbers "
                              "(float) or ids (int64); encode strings with a vocabulary or "
                              "a hash")
        info[name] = entry
    if not info:
        raise OutputError("returned no feature (an empty dict, or only the label)")
    return info


def features(outputs: Mapping[str, Mapping[str, Any]]) -> list[Any]:
    """The feature spec's features from the outputs: a float is numeric of its shape; an int64
    with a known id range from 0 is categorical of that size. OutputError otherwise."""
    from baton.graphs.feature_spec import Feature

    out = []
    for name, info in outputs.items():
        if info["dtype"].startswith("float"):
            out.append(Feature(name, "numeric", shape=tuple(info["shape"])))
            continue
        if "max" not in info:
            raise OutputError(f"output {name!r} is {info['dtype']} with no known id range: "
                              "make ids with tft.compute_and_apply_vocabulary, tft.bucketize "
                              "or tft.hash_strings, or cast it to float32")
        if info["min"] < 0:
            raise OutputError(f"output {name!r} holds ids from {info['min']} (an unknown "
                              "token's default_value): pass num_oov_buckets >= 1 or a "
                              "default_value >= 0 so every id is an embedding row")
        if info["shape"]:
            raise OutputError(f"output {name!r}: ids must be one per example, found "
                              f"shape {info['shape']}")
        out.append(Feature(name, "categorical", vocab_size=info["max"] + 1))
    return out


def feature_spec(built: Built, raw: list[tuple[str, str, Any]], label: Mapping[str, Any],
                 images: tuple[Any, ...] = ()) -> Any:
    """The transform's FeatureSpec: the raw serving inputs, the outputs' features, the label."""
    from baton.graphs.feature_spec import FeatureSpec, Label, RawFeature

    return FeatureSpec(
        raw_features=tuple(RawFeature(n, d, tuple(s)) for n, d, s in raw),  # type: ignore[arg-type]
        features=tuple(built.features),
        label=Label(label["name"], label["task"], tuple(label.get("vocabulary", ()))),
        images=images)


def save(built: Built, directory: str | Path) -> Path:
    """The SavedModel, its vocabulary files and tft_metadata.json in `directory`."""
    import tensorflow as tf

    d = Path(directory)
    tf.saved_model.save(built.module, str(d))
    assets = d / "assets"
    assets.mkdir(exist_ok=True)
    for name, tokens in built.vocabularies.items():
        (assets / name).write_bytes(b"".join(t + b"\n" for t in tokens))
    (d / METADATA_FILE).write_text(json.dumps(built.outputs, indent=1) + "\n")
    return d
