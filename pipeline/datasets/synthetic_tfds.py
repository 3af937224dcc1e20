"""`baton_synthetic`: the synthetic generator as a TFDS builder (configurable size and seed).

    builder = BatonSynthetic(config=SyntheticConfig(name="r1000", rows=1000), data_dir=...)

Ingest's `source: synthetic` uses `pipeline.datasets.synthetic.generate` directly (same rows,
much faster at scale); this builder is for code that wants the data through TFDS.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow_datasets as tfds

from baton.pipeline.datasets import synthetic


@dataclasses.dataclass
class SyntheticConfig(tfds.core.BuilderConfig):
    rows: int = 1000
    seed: int = 0
    numeric: int = 4
    categorical: int = 1
    vocab_size: int = 20
    classes: int = 2


class BatonSynthetic(tfds.core.GeneratorBasedBuilder):
    """Deterministic synthetic rows; one `train` split."""

    VERSION = tfds.core.Version("1.0.0")
    BUILDER_CONFIGS = [SyntheticConfig(name="small", rows=1000)]

    def _info(self) -> tfds.core.DatasetInfo:
        c = self.builder_config
        feats = {n: (tfds.features.Scalar(np.float32) if t == "float32" else tfds.features.Text())
                 for n, t in synthetic.columns(c.numeric, c.categorical)}
        feats["label"] = (tfds.features.Text() if c.classes
                          else tfds.features.Scalar(np.float32))
        return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(feats),
                                     description="Baton synthetic tabular data.")

    def _split_generators(self, dl_manager):  # noqa: ANN001, ANN202, ARG002
        return {"train": self._generate_examples()}

    def _generate_examples(self):  # noqa: ANN202
        c = self.builder_config
        i = 0
        for chunk in synthetic.generate(c.rows, c.seed, c.numeric, c.categorical,
                                        c.vocab_size, c.classes):
            n = len(chunk["label"])
            for r in range(n):
                yield i, {k: v[r] for k, v in chunk.items()}
                i += 1
