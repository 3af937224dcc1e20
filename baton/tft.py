"""`import baton.tft as tft`: tf.Transform's analyzers and mappers for a `preprocessing_fn`.

The names, arguments, defaults and output values are tf.Transform 1.21's (graphs.tft.api);
the analysis runs in phases on Baton's engine (graphs.tft.engine); `TFTransformOutput` reads a
transform graph back (graphs.tft.output). A name tf.Transform has and
Baton does not is an AttributeError naming the supported ones.
"""

from __future__ import annotations

from typing import Any

from baton.graphs.tft.api import (
    SUPPORTED,
    apply_buckets,
    apply_vocabulary,
    bucketize,
    compute_and_apply_vocabulary,
    hash_strings,
    max,
    mean,
    min,
    quantiles,
    scale_by_min_max,
    scale_to_0_1,
    scale_to_z_score,
    size,
    sum,
    var,
    vocabulary,
)
from baton.graphs.tft.output import TFTransformOutput

__all__ = [  # = SUPPORTED (tests/graphs/test_tft.py checks)
    "TFTransformOutput", "apply_buckets", "apply_vocabulary", "bucketize", "compute_and_apply_vocabulary",
    "hash_strings", "max", "mean", "min", "quantiles", "scale_by_min_max", "scale_to_0_1",
    "scale_to_z_score", "size", "sum", "var", "vocabulary",
]


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(f"tft.{name} is not supported by baton.tft; supported: "
                         f"{', '.join(SUPPORTED)}")
