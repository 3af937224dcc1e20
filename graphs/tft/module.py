"""A preprocessing_fn's final graph as the transform SavedModel, and its feature spec.

The module has the interface of graphs.transform's: `transform_features(raw)` over the raw
feature columns and `transform_label(raw_label)`, so training, export, check, edge and serving
take it unchanged. `transform_features` calls the user's function with every analyzer a
constant (graphs.tft.engine.transform_fn's trace) and the lookup tables tracked by the module;
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
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from baton.errors import BatonError
from baton.graphs.tft import engine as tft_engine
from baton.graphs.tft import feed as tft_feed
from baton.graphs.tft import trace as tft_trace
from baton.graphs.tft.output import METADATA_FILE


class OutputError(BatonError, ValueError):
    """An output the models cannot take; the message names the feature and what it is."""


@dataclasses.dataclass
class Built:
    module: Any  # the tf.Module
    outputs: dict[str, dict[str, Any]]  # name -> dtype, shape, encoding, min/max of ids
    vocabularies: dict[str, list[bytes]]  # vocab_filename -> tokens
    features: list[Any] = dataclasses.field(default_factory=list)  # the feature spec's
    inputs: frozenset[str] = frozenset()  # the raw features it reads (tft_feed.used_inputs)
    # the function returned the label changed (not passed through): its output is dropped, as
    # Baton encodes the label itself; the stage and the dry run say so (label_note)
    label_transformed: bool = False
    files: dict[str, str] = dataclasses.field(default_factory=dict)  # asset name -> its file
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
            raise OutputError("A `preprocessing_fn` must return a Dict[str, Union[tf.Tensor, "
                              "tf.SparseTensor, tf.RaggedTensor]]. Got: "
                              f"{type(outputs).__name__}")
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
            self.resources = list(trace.resources)  # tables the function built itself
            self.created_variables = list(trace.variables)
            self.vocabulary_assets = list(trace.assets)
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

    metas = {trace.vocab_meta[k]["vocab_filename"]: trace.vocab_meta[k]
             for k in trace.vocab_meta}
    built = Built(PreprocessingModule(), outputs_info(trace, concrete, label_name),
                  {name: [bytes(t) for t in resolved[k][0]]
                   for name, k in trace.vocab_files.items() if k in resolved},
                  inputs=tft_feed.used_inputs(concrete), label_transformed=bool(transformed_label),
                  files={Path(m["path"]).name: m["path"] for m in metas.values()},
                  label_aliases=tuple(aliases))
    _evaluate_bounds(built.outputs, features_fn, specs, resolved)
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
    """Raise OutputError unless every applied output (numpy arrays, or ragged/sparse values)
    has `rows` rows: an output must keep its input's batch dimension, or its rows no longer
    line up with the label's. The stage's apply step and the dry run both check with this."""
    for name, value in outputs.items():
        got = nrows(value)
        if got != rows:
            raise OutputError(f"output {name!r} has {'no' if got is None else got} rows for a "
                              f"batch of {rows}: outputs keep the batch dimension")


def nrows(value: Any) -> int | None:
    """Rows of an applied output: a numpy array's first dimension, a ragged tensor's rows, a
    sparse tensor's dense_shape[0]; None for a scalar."""
    import tensorflow as tf

    if isinstance(value, tf.RaggedTensor):
        return int(value.nrows())
    if isinstance(value, tf.SparseTensor):
        return int(value.dense_shape[0])
    shape: Any = getattr(value, "shape", ())
    return int(shape[0]) if len(shape) else None


DTYPES = ("float32", "int64", "string")  # what tf.Transform's feature specs hold


def outputs_info(trace: tft_trace.Trace, concrete: Any, label: str | None = None
                 ) -> dict[str, dict[str, Any]]:
    """Each output as tf.Transform's schema inference sees it: dtype (float32, int64 or string),
    encoding (dense, ragged or sparse), per-example shape, and the id range of int64 outputs
    made by a vocabulary, buckets or hashes. OutputError for what tf.Transform refuses too."""
    import tensorflow as tf

    outputs = trace.outputs or {}
    info: dict[str, dict[str, Any]] = {}
    for name, t in outputs.items():
        if not isinstance(t, tf.Tensor | tf.RaggedTensor | tf.SparseTensor):
            raise OutputError(f"Expected a Tensor, SparseTensor, or RaggedTensor got {t!r} of "
                              f"type {type(t).__name__} for feature {name!r}")
        if t.dtype.name not in DTYPES:
            raise OutputError(f"Feature {name!r} had invalid dtype {t.dtype.name} for feature "
                              "spec: outputs are float32, int64 or string (cast it, e.g. "
                              "tf.cast(x, tf.float32))")
        entry: dict[str, Any] = {"dtype": t.dtype.name}
        if isinstance(t, tf.SparseTensor):
            if t.shape.rank is not None and t.shape.rank < 2:
                raise OutputError(f"Feature {name!r} is a SparseTensor of rank {t.shape.rank}: "
                                  "outputs have a batch dimension and at least one more")
            entry["encoding"] = "sparse"
            entry["shape"] = [None if d is None else int(d) for d in (t.shape[1:] if
                              t.shape.rank is not None else [None])]
        elif isinstance(t, tf.RaggedTensor):
            entry["encoding"] = "ragged"
            entry["shape"] = [None if d is None else int(d) for d in t.shape[1:]]
        else:
            if t.shape.rank in (None, 0):
                raise OutputError(f"Feature {name!r} ({t.name}) had invalid shape {t.shape} for "
                                  "FixedLenFeature: must have rank at least 1 (an analyzer's "
                                  "value is one per dataset: broadcast it to the batch, e.g. "
                                  "tf.zeros_like(x) + tft.mean(x))")
            if not t.shape[1:].is_fully_defined():
                raise OutputError(f"Feature {name!r} ({t.name}) had invalid shape {t.shape} for "
                                  "FixedLenFeature: apart from the batch dimension, all "
                                  "dimensions must have known size (set_shape or reshape it, "
                                  "or return a RaggedTensor)")
            entry["shape"] = [int(d) for d in t.shape[1:]]  # (dense: no "encoding" key)
        if t.dtype == tf.int64:
            values = t.flat_values if isinstance(t, tf.RaggedTensor) else (
                t.values if isinstance(t, tf.SparseTensor) else t)
            domain = trace.domains.get(values.ref())
            if domain is not None:
                entry["min"], entry["max"] = _bound(domain[0]), _bound(domain[1])
        info[name] = entry
    if not info:
        raise OutputError("returned no feature (an empty dict, or only the label)")
    _check_stored_keys(info, label)
    return info


_STORED_SUFFIX = re.compile(r"\$(width|(indices|row_lengths_\d+)(\$width)?)")


def _check_stored_keys(info: dict[str, Any], label: str | None = None) -> None:
    """The transformed artifact stores an output's parts under its name plus `$indices` or
    `$row_lengths_<k>`, and an int64 array's width under the array's key plus `$width`
    (`x$width`, `x$row_lengths_0$width`; the label's `<label>$width`), as
    pipeline.dataplane.records.transformed_io writes them: an output named like another
    output's or the label's part would overwrite it. Every split of the name is tried, so
    `x$indices$width` is refused next to `x` and next to `x$indices`."""
    for name in info:
        for i in (i for i, c in enumerate(name) if c == "$"):
            base, m = name[:i], _STORED_SUFFIX.fullmatch(name, i)
            if m is None:
                continue
            if base in info:
                raise OutputError(f"output {name!r} has the key the transformed artifact stores "
                                  f"output {base!r}'s {m.group(0)!r} under: rename it")
            if base == label and m.group(0) == "$width":
                raise OutputError(f"output {name!r} has the key the transformed artifact stores "
                                  f"the label {base!r}'s '$width' under: rename it")


def _bound(b: Any) -> Any:
    """An id bound: an int, or a tensor evaluated later (`_evaluate_bounds`)."""
    if isinstance(b, int | np.integer):
        return int(b)
    import tensorflow as tf

    static = tf.get_static_value(b)
    return int(static) if static is not None else b


def _evaluate_bounds(outputs: dict[str, dict[str, Any]], features_fn: Any,
                     specs: Mapping[str, Any], resolved: Mapping[int, list[Any]]) -> None:
    """Id bounds only known in the graph (the size of a table a `lookup_fn` built) are
    evaluated as tf.Transform evaluates its schema overrides: the function traced once more,
    returning them, and run on an empty batch."""
    import tensorflow as tf

    pending = {n: i for n, i in outputs.items()
               if not isinstance(i.get("min", 0), int) or not isinstance(i.get("max", 0), int)}
    if not pending:
        return
    trace, concrete = None, None

    def bounds_fn(raw: dict[str, Any]) -> dict[str, Any]:
        out = features_fn(raw)
        got = {}
        for name in pending:
            t = out[name]
            v = t.flat_values if isinstance(t, tf.RaggedTensor) else (
                t.values if isinstance(t, tf.SparseTensor) else t)
            lo, hi = tft_trace.current().domains[v.ref()]
            got[name] = tf.stack([tf.cast(lo, tf.int64), tf.cast(hi, tf.int64)])
        return got

    trace, concrete = tft_trace.trace_function(bounds_fn, specs, resolved, analysis=False)
    empty = {n: tf.zeros([0, *s.shape[1:]], s.dtype) for n, s in specs.items()}
    try:
        values = concrete(raw=empty)
    except (tf.errors.OpError, ValueError):
        values = {}
    for name in pending:
        if name in values:
            lo, hi = (int(v) for v in values[name].numpy())
            outputs[name]["min"], outputs[name]["max"] = lo, hi
        else:
            outputs[name].pop("min", None)
            outputs[name].pop("max", None)


def features(outputs: Mapping[str, Mapping[str, Any]]) -> list[Any]:
    """The feature spec's features from the outputs: float32 numeric, int64 with a known id
    range categorical (ids from its min), other int64 integer, string string; each of its
    encoding and per-example shape."""
    from baton.graphs.feature_spec import Feature

    out = []
    for name, info in outputs.items():
        shape = tuple(info["shape"])
        encoding = info.get("encoding", "dense")
        if info["dtype"].startswith("float"):
            out.append(Feature(name, "numeric", shape=shape, encoding=encoding))
        elif info["dtype"] == "string":
            out.append(Feature(name, "string", shape=shape, encoding=encoding))
        elif "max" in info and info["max"] >= info["min"]:
            out.append(Feature(name, "categorical", vocab_size=info["max"] - info["min"] + 1,
                               shape=shape, encoding=encoding, min_id=info["min"]))
        else:
            out.append(Feature(name, "integer", shape=shape, encoding=encoding))
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
    """The SavedModel (which copies the vocabulary files it tracks into `assets/`), every
    vocabulary file in `assets/` (also those no lookup reads), and tft_metadata.json."""
    import shutil

    import tensorflow as tf

    d = Path(directory)
    tf.saved_model.save(built.module, str(d))
    assets = d / "assets"
    assets.mkdir(exist_ok=True)
    for name, source in built.files.items():
        if not (assets / name).is_file():
            shutil.copyfile(source, assets / name)
    (d / METADATA_FILE).write_text(json.dumps(built.outputs, indent=1) + "\n")
    return d
