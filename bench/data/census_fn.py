"""The census-like preprocessing_fn of tests/graphs/tft_parity_fn.py as Baton runs it
(`transform.config.preprocessing_fn: census_fn:preprocessing_fn`, spec_dir bench/data); the
peer runs the same function with tensorflow-transform (bench/data/tft_peer.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "graphs"))

import tft_parity_fn  # noqa: E402


def preprocessing_fn(inputs):  # noqa: ANN001, ANN201
    import tensorflow as tf

    import baton.tft as tft

    return tft_parity_fn.make(tft, tf)(inputs)
