"""The train config's older shape: the flat keys that set a built-in model's parameters before
`model_params` held them all (`hidden_units: [64, 32]` beside `model: mlp`).

A spec that still writes them keeps working: `strategies.settings.TrainSettings` moves them into
`model_params` as it is built (`flat_params`), so the settings carry one shape and each default
stays where the model defines it (graphs.models, the built-ins' config classes). A flat key that
sets nothing on the model named (another built-in's, or any of them on a model function) was
ignored before; it is refused now, naming the key and where it belongs.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from baton.errors import ConfigError
from baton.graphs.models import MODELS

# The train stage's config before `model_params` held a built-in's parameters: the flat keys a
# spec may still write there, and the parameter each sets on each built-in (the cnn's dense layer
# was the first of `hidden_units`). `flat_params` moves them into `model_params`.
FLAT_KEYS: dict[str, dict[str, str]] = {
    "mlp": {"hidden_units": "hidden_units", "embedding_dim": "embedding_dim",
            "dropout": "dropout", "categorical": "categorical"},
    "wide_deep": {"hidden_units": "hidden_units", "embedding_dim": "embedding_dim",
                  "dropout": "dropout"},
    "cnn": {"image_shape": "image_shape", "filters": "filters", "hidden_units": "dense_units"},
}
FLAT_NAMES = ("hidden_units", "embedding_dim", "dropout", "categorical", "image_shape", "filters")


def flat_params(kind: str, flat: dict[str, Any]) -> dict[str, Any]:
    """The `model_params` that the flat keys `flat` of an older train config stand for.

    Raises ConfigError at the first key that sets nothing on model `kind` (a key of another
    built-in, or any of them on a model function, which reads its own `model_params`).
    """
    if kind not in MODELS:
        key = sorted(flat)[0]
        raise ConfigError(key,
            f"{key} is a setting of the built-in models; model {kind!r} is a model function, "
            f"which reads its parameters from model_params (spec.params): move it there. "
            f"Received: {key}={flat[key]!r}")
    keys = FLAT_KEYS[kind]
    wrong = sorted(set(flat) - set(keys))
    if wrong:
        raise ConfigError(wrong[0],
            f"model {kind} has no setting {wrong[0]!r}; its parameters go in model_params "
            f"({', '.join(f.name for f in dataclasses.fields(MODELS[kind].config))}). "
            f"Received: {wrong[0]}={flat[wrong[0]]!r}")
    out = {}
    for key, value in flat.items():
        if keys[key] == "dense_units" and isinstance(value, list | tuple) and value:
            value = value[0]  # the cnn's one dense layer
        out[keys[key]] = value
    return out
