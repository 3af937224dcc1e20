"""TFDS builders shipped with Baton, so pipelines work offline.

`penguins` wraps the embedded Palmer penguins CSV (CC0); `synthetic` generates deterministic
data of any size for scale tests. Importing a builder module registers it with TFDS under its
snake_case name (`baton_penguins`, `baton_synthetic`), so `tfds.builder(name, data_dir=...)`
finds it like any catalog dataset. The modules import tensorflow_datasets at their top: import
them only where a dataset is actually built.
"""

from __future__ import annotations

from pathlib import Path

PENGUINS_CSV = Path(__file__).resolve().parent.parent / "data" / "penguins.csv"
