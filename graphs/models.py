"""Model builders: a typed config plus a FeatureSpec in, a Keras 3 functional model out.

Every model takes the transformed features as a dict of `[B]` (or `[B, *shape]`) tensors
(numeric float32, categorical int64 ids) and returns logits `[B, num_classes]` (`[B, 1]` for
regression), which is
the `model` artifact contract that evaluation and export rely on. Builders are plain functions of
frozen dataclasses so a config round-trips through YAML and `train_info.json` unchanged, and so
a strategy can call the same builder inside its `scope()` on every task.

Only standard Keras layers and `keras.ops` are used (no Lambda), so `model.keras` reloads
without custom objects. The mlp and wide_deep take dense numbers and dense ids with a known
range; a string, int64 without a range, or a ragged or sparse output is refused before training
(`unusable`: the output and the fix), as the user's own model takes those. The cnn takes the
image and leaves every other feature out.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from baton.graphs.feature_spec import FeatureSpec

CategoricalMode = Literal["embedding", "one_hot"]


@dataclasses.dataclass(frozen=True)
class MLPConfig:
    """A multi-layer perceptron over scaled numerics and embedded categoricals."""

    hidden_units: tuple[int, ...] = (64, 32)
    activation: str = "relu"
    dropout: float = 0.0
    embedding_dim: int = 8
    categorical: CategoricalMode = "embedding"
    embedding_shards: int = 1  # > 1: large tables become ShardedEmbedding (spread over PS)
    shard_min_bytes: int = 0  # tables smaller than this stay whole

    def __post_init__(self) -> None:
        _check_units("hidden_units", self.hidden_units)
        _check_range("dropout", self.dropout, 0.0, 1.0)
        if self.embedding_dim < 1:
            raise ValueError(
                f"embedding_dim must be >= 1. Received: embedding_dim={self.embedding_dim}"
            )


@dataclasses.dataclass(frozen=True)
class WideDeepConfig:
    """Wide (linear over one-hot categoricals and numerics) plus deep (MLP over embeddings).

    The embedding tables are the large variables a parameter-server strategy shards.
    """

    hidden_units: tuple[int, ...] = (64, 32)
    embedding_dim: int = 8
    dropout: float = 0.0
    embedding_shards: int = 1
    shard_min_bytes: int = 0

    def __post_init__(self) -> None:
        _check_units("hidden_units", self.hidden_units)
        _check_range("dropout", self.dropout, 0.0, 1.0)
        if self.embedding_dim < 1:
            raise ValueError(
                f"embedding_dim must be >= 1. Received: embedding_dim={self.embedding_dim}"
            )


@dataclasses.dataclass(frozen=True)
class CNNConfig:
    """A small CNN over one image `[B, H, W, C]`.

    The image is the feature spec's image tensor feature (ingest of TFDS or synthetic images),
    taken as it arrives; `image_shape` may stay empty (or reshape it to another shape with as
    many values); other features are left out of the model. Feature specs written before
    tensor features hold an image as pixel features (`image_0 ... image_{H*W*C-1}`, row-major
    HWC), which are stacked and reshaped. A spec without an image must give `image_shape`, and
    then every numeric feature, in spec order, is a pixel.
    """

    image_shape: tuple[int, ...] = ()  # (): the feature spec's image shape
    filters: tuple[int, ...] = (16, 32)
    kernel_size: int = 3
    dense_units: int = 64

    def __post_init__(self) -> None:
        if self.image_shape and (len(self.image_shape) != 3 or any(d < 1 for d in self.image_shape)):
            raise ValueError(
                "image_shape must be (height, width, channels). "
                f"Received: image_shape={self.image_shape}"
            )
        _check_units("filters", self.filters)
        if self.kernel_size < 1 or self.dense_units < 1:
            raise ValueError(
                "kernel_size and dense_units must be >= 1. "
                f"Received: kernel_size={self.kernel_size}, dense_units={self.dense_units}"
            )


ModelConfig = MLPConfig | WideDeepConfig | CNNConfig


# ------------------------------------------------------------------ the built-in models, one table
# Each is a model function of the own-model contract, `function(spec: ModelSpec) -> keras.Model`
# (graphs/model_spec.py): `train.config.model: mlp` is looked up here, `model: my.module:fn` is
# imported (graphs/model_fn.py); both are then called the same way. `spec.params` holds the
# builder's config fields (the train stage's hidden_units, ... and `model_params:`).
def mlp(spec: Any) -> Any:
    """`model: mlp`: a multi-layer perceptron; `spec.params` are MLPConfig's fields."""
    return build_mlp(spec.feature_spec, builtin_config("mlp", spec.params))


def wide_deep(spec: Any) -> Any:
    """`model: wide_deep`: wide and deep; `spec.params` are WideDeepConfig's fields."""
    return build_wide_deep(spec.feature_spec, builtin_config("wide_deep", spec.params))


def cnn(spec: Any) -> Any:
    """`model: cnn`: a small CNN over the image; `spec.params` are CNNConfig's fields."""
    return build_cnn(spec.feature_spec, builtin_config("cnn", spec.params))


@dataclasses.dataclass(frozen=True)
class BuiltinModel:
    function: Any  # the contract: (ModelSpec) -> keras.Model
    config: type  # its params, as a frozen dataclass
    build: Any  # (FeatureSpec, config) -> keras.Model


MODELS: dict[str, BuiltinModel] = {
    "mlp": BuiltinModel(mlp, MLPConfig, lambda s, c: build_mlp(s, c)),
    "wide_deep": BuiltinModel(wide_deep, WideDeepConfig, lambda s, c: build_wide_deep(s, c)),
    "cnn": BuiltinModel(cnn, CNNConfig, lambda s, c: build_cnn(s, c)),
}
BUILDERS = tuple(MODELS)


def unknown_model(name: str) -> str:
    """The error for a `model:` that is neither a built-in nor a 'module:function'."""
    from baton.configs import did_you_mean

    return (f"model must be one of {', '.join(MODELS)} or a model function 'module:function'"
            f"{did_you_mean(name, MODELS)}. Received: model={name!r}")


def builtin_config(kind: str, params: Any) -> Any:
    """The config dataclass of built-in model `kind` from a params mapping (lists -> tuples).

    Raises ValueError naming the model, the parameter and its known parameters (an unknown
    one), or the parameter and the value received (a wrong type, choice or range).
    """
    cls = MODELS[kind].config
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(params or {}) - fields)
    if unknown:
        from baton.configs import did_you_mean

        mean = did_you_mean(unknown[0], sorted(fields))
        raise ValueError(
            f"model {kind} has no parameter {unknown[0]!r}{mean}; its parameters: "
            f"{', '.join(sorted(fields))}. Received: {dict(params)}"
        )
    from baton.configs import build_config

    # typed as a spec's config is: a wrong type or choice is a ConfigError (a ValueError)
    # naming the parameter and the value received; lists become tuples
    return build_config(cls, dict(params or {}))


def build_model(
    kind: str, spec: FeatureSpec, config: ModelConfig | None = None, seed: int = 0
) -> Any:
    """The built-in model named `kind` ("mlp", "wide_deep", "cnn") for `spec`."""
    import keras

    if kind not in MODELS:
        raise ValueError(f"model must be one of {', '.join(BUILDERS)}. Received: model={kind!r}")
    entry = MODELS[kind]
    keras.utils.set_random_seed(seed)  # same initial weights on every task and every retry
    return entry.build(spec, config if isinstance(config, entry.config) else entry.config())


def model_inputs(spec: FeatureSpec) -> dict[str, Any]:
    """One `keras.Input(shape=())` per transformed feature, named and typed as the spec says."""
    from baton.graphs.model_spec import ModelSpec

    return dict(ModelSpec.from_feature_spec(spec).inputs)


def unusable(spec: FeatureSpec) -> list[str]:
    """Why each feature the built-in mlp and wide_deep cannot take is so, with the fix: they
    take dense float32 numbers and dense ids with a known range (a vocabulary's, buckets',
    hashes'; a default id such as -1 included). A string, int64 values with no known range,
    and ragged or sparse features need the user's own model (which receives them as
    `keras.Input`s of their kind) or another output."""
    out = []
    own = ("or train your own model (train.config.model: 'module:function'), which receives "
           "it as a keras.Input of its kind")
    for f in spec.features:
        if not f.dense:
            out.append(f"output {f.name!r} is {f.encoding} ({f.dtype}, shape {list(f.shape)}): "
                       "densify it (e.g. .to_tensor(default_value=0, shape=[None, L]) on "
                       "vocabulary ids) or reduce it per example, " + own)
        elif f.kind == "string":
            out.append(f"output {f.name!r} is a string: encode it with "
                       "tft.compute_and_apply_vocabulary or tft.hash_strings, or leave it out "
                       "of the outputs, " + own)
        elif f.kind == "integer":
            out.append(f"output {f.name!r} is int64 with no known id range: make ids with "
                       "tft.compute_and_apply_vocabulary, tft.bucketize or tft.hash_strings, "
                       "or cast it to float32 to use it as a number, " + own)
    return out


def ignored(kind: str, spec: FeatureSpec, params: Any = None) -> list[str]:
    """Warning lines for the features the built-in model `kind` leaves out: the cnn takes only
    its image, so any other output (a string, ragged tokens, a number) is ignored, named."""
    if kind != "cnn":
        return []
    try:
        used = set(_cnn_features(spec, builtin_config("cnn", params)))
    except ValueError:
        return []  # building the model reports it
    left = [f for f in spec.features if f.name not in used]
    if not left:
        return []
    named = ", ".join(f"{f.name!r} ({f.kind}" + (f", {f.encoding})" if not f.dense else ")")
                      for f in left)
    return [f"warning: the built-in cnn takes only the image; it ignores the outputs {named}: "
            "leave them out of the preprocessing_fn's outputs, or train your own model "
            "(train.config.model: 'module:function') to use them"]


def _check_usable(kind: str, spec: FeatureSpec) -> None:
    problems = unusable(spec)
    if problems:
        raise ValueError(f"the built-in model {kind} takes dense numbers and ids: "
                         + "; ".join(problems))


def _ids(f: Any, inputs: dict[str, Any]) -> Any:
    """A categorical input as ids from 0 (ids from a default such as -1 shifted up, so the
    default has its own embedding row)."""
    import keras

    x = inputs[f.name]
    return x if not f.min_id else keras.ops.subtract(x, f.min_id)


def _id_block(f: Any, ids: Any, config: Any, one_hot: bool, suffix: str) -> Any:
    """One categorical feature as a `[B, n]` block: its embedding (a tensor of ids: every
    id's, concatenated) or its one-hot / multi-hot encoding."""
    from keras import layers

    if one_hot:
        mode = "one_hot" if f.size <= 1 else "multi_hot"
        return layers.CategoryEncoding(f.vocab_size, output_mode=mode,
                                       name=f"{f.name}_{suffix}")(ids)
    emb = _embedding(f.name, f.vocab_size, config)(ids)
    if f.shape:
        emb = layers.Reshape((f.size * config.embedding_dim,), name=f"{f.name}_flat")(emb)
    return emb


def build_mlp(spec: FeatureSpec, config: MLPConfig) -> Any:
    import keras
    from keras import layers

    _check_usable("mlp", spec)
    inputs = model_inputs(spec)
    parts = _numeric_block(spec, inputs)
    for f in spec.categorical:
        parts.append(_id_block(f, _ids(f, inputs), config, config.categorical == "one_hot",
                               "onehot"))
    x = _concat(parts)
    x = _dense_stack(x, config.hidden_units, config.activation, config.dropout)
    outputs = layers.Dense(spec.label.num_classes, name="logits", dtype="float32")(x)
    return keras.Model(inputs, outputs, name="mlp")


def build_wide_deep(spec: FeatureSpec, config: WideDeepConfig) -> Any:
    import keras
    from keras import layers

    _check_usable("wide_deep", spec)
    inputs = model_inputs(spec)
    numeric = _numeric_block(spec, inputs)
    wide_parts = list(numeric)
    deep_parts = list(numeric)
    for f in spec.categorical:
        ids = _ids(f, inputs)
        wide_parts.append(_id_block(f, ids, config, True, "wide"))
        deep_parts.append(_id_block(f, ids, config, False, "deep"))
    n = spec.label.num_classes
    wide = layers.Dense(n, name="wide_logits", dtype="float32")(_concat(wide_parts, "wide_concat"))
    deep = _dense_stack(
        _concat(deep_parts, "deep_concat"), config.hidden_units, "relu", config.dropout
    )
    deep = layers.Dense(n, name="deep_logits", dtype="float32")(deep)
    outputs = layers.Add(name="logits", dtype="float32")([wide, deep])
    return keras.Model(inputs, outputs, name="wide_deep")


def build_cnn(spec: FeatureSpec, config: CNNConfig) -> Any:
    import keras
    from keras import layers

    inputs = model_inputs(spec)
    x = _cnn_image(spec, config, inputs)
    for i, filters in enumerate(config.filters):
        x = layers.Conv2D(
            filters, config.kernel_size, padding="same", activation="relu", name=f"conv_{i}"
        )(x)
        if min(x.shape[1], x.shape[2]) >= 2:
            x = layers.MaxPooling2D(2, name=f"pool_{i}")(x)
    x = layers.Flatten(name="flatten")(x)
    x = layers.Dense(config.dense_units, activation="relu", name="dense")(x)
    outputs = layers.Dense(spec.label.num_classes, name="logits", dtype="float32")(x)
    return keras.Model(inputs, outputs, name="cnn")


def _cnn_features(spec: FeatureSpec, config: CNNConfig) -> list[str]:
    """The features the cnn's image is made of: the image tensor's name, or its pixels'."""
    return _cnn_image(spec, config, None)


def _cnn_image(spec: FeatureSpec, config: CNNConfig, inputs: dict[str, Any] | None) -> Any:
    """The CNN's `[B, H, W, C]` image: the spec's image tensor feature as it is, or (pixel
    features: feature specs from before tensor features, or `image_shape` over plain numeric
    features) the pixel features stacked and reshaped, row-major HWC. With no `inputs`, the
    names of the features it takes."""
    import math

    image = spec.images[0] if spec.images else None
    tensor = spec.tensor(image.name) if image is not None else None
    if image is None and len(spec.tensors) == 1 and len(spec.tensors[0].shape) == 3:
        tensor = spec.tensors[0]  # one 3-d tensor feature: the image
    shape = tuple(config.image_shape) or (tuple(int(d or 0) for d in tensor.shape)
                                          if tensor is not None else
                                          image.shape if image is not None else ())
    if not shape:
        raise ValueError(
            "the cnn needs image_shape (height, width, channels): the feature spec records no "
            "image (only ingest of image data does). Received: image_shape=()"
        )
    need = math.prod(shape)
    if tensor is not None:
        if need != tensor.size:
            raise ValueError(
                f"the cnn's image_shape={shape} has {need} pixel values, but the feature spec's "
                f"image {tensor.name!r} has shape {tensor.shape} ({tensor.size} values); set "
                f"image_shape to {list(tensor.shape)} or leave it unset. "
                f"Received: image_shape={shape}"
            )
        if inputs is None:
            return [tensor.name]
        from keras import layers

        x = inputs[tensor.name]  # [B, H, W, C] as it arrives
        return x if shape == tensor.shape else layers.Reshape(shape, name="image_reshape")(x)
    if image is not None:
        if need != len(image.pixels):
            raise ValueError(
                f"the cnn's image_shape={shape} has {need} pixel values, but the feature spec's "
                f"image {image.name!r} has shape {image.shape} ({len(image.pixels)} values); set "
                f"image_shape to {list(image.shape)} or leave it unset. "
                f"Received: image_shape={shape}"
            )
        pixels = image.pixels
    else:
        pixels = [f.name for f in spec.numeric]
        if len(pixels) != need:
            raise ValueError(
                f"the cnn needs {need} numeric pixel features for image_shape={shape}. "
                f"Received: {len(pixels)} numeric features"
            )
    if inputs is None:
        return list(pixels)
    import keras
    from keras import layers

    # One stack op, not a Reshape layer per pixel: building (and loading) a model with
    # thousands of layers takes seconds per thousand.
    x = keras.ops.stack([inputs[p] for p in pixels], axis=-1)
    return layers.Reshape(shape, name="image")(x)


def count_params(model: Any) -> int:
    return int(sum(int(_prod(v.shape)) for v in model.trainable_weights))


# ------------------------------------------------------------------ helpers
def _numeric_block(spec: FeatureSpec, inputs: dict[str, Any]) -> list[Any]:
    """Numeric `[B]` inputs as `[B, 1]` columns, tensor features `[B, *shape]` flattened to
    `[B, prod(shape)]` (Reshape, not Lambda, so the model serialises)."""
    from keras import layers

    return [layers.Reshape((f.size,), name=f"{f.name}_col")(inputs[f.name]) for f in spec.numeric]


def _embedding(name: str, vocab: int, config: Any) -> Any:
    """A plain Embedding, or a ShardedEmbedding when the config asks for shards and it is big."""
    from keras import layers

    dim = config.embedding_dim
    shards = min(config.embedding_shards, vocab)
    if shards > 1 and vocab * dim * 4 >= config.shard_min_bytes:
        from baton.graphs.sharded_embedding import ShardedEmbedding

        return ShardedEmbedding(vocab, dim, shards, name=f"{name}_embedding")
    return layers.Embedding(vocab, dim, name=f"{name}_embedding")


def _concat(parts: list[Any], name: str = "concat") -> Any:
    from keras import layers

    if not parts:
        raise ValueError("the feature spec has no features a model can use. Received: features=()")
    return parts[0] if len(parts) == 1 else layers.Concatenate(name=name)(parts)


def _dense_stack(x: Any, units: tuple[int, ...], activation: str, dropout: float) -> Any:
    from keras import layers

    for i, u in enumerate(units):
        x = layers.Dense(u, activation=activation, name=f"dense_{i}")(x)
        if dropout:
            x = layers.Dropout(dropout, name=f"dropout_{i}")(x)
    return x


def _prod(shape: Any) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _check_units(name: str, units: tuple[int, ...]) -> None:
    if not units or any((not isinstance(u, int)) or u < 1 for u in units):
        raise ValueError(
            f"{name} must be a non-empty list of positive integers. Received: {name}={units!r}"
        )


def _check_range(name: str, value: float, lo: float, hi: float) -> None:
    if not lo <= value < hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}). Received: {name}={value}")
