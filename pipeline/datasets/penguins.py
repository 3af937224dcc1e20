"""`baton_penguins`: the embedded Palmer penguins CSV as a TFDS dataset (CC0, 344 rows).

Why a TFDS builder for a 344-row CSV? So the default pipeline exercises the same ingestion
path as any TFDS catalog dataset (builder -> download_and_prepare -> as_dataset), offline.
TFDS features cannot be absent, so a missing measurement (`NA` in the CSV) is NaN and a missing
string is ""; ingest turns both back into absent tf.Example features.
"""

from __future__ import annotations

import csv

import numpy as np
import tensorflow_datasets as tfds

from baton.pipeline.datasets import PENGUINS_CSV

NUMERIC = ("bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g", "year")
CATEGORICAL = ("island", "sex")
LABEL = "species"
COLUMNS = (LABEL, "island", *NUMERIC[:4], "sex", "year")  # CSV order

_CITATION = """@Manual{palmerpenguins,
  title = {palmerpenguins: Palmer Archipelago (Antarctica) penguin data},
  author = {Allison Marie Horst and Alison Presmanes Hill and Kristen B Gorman},
  year = {2020}, note = {R package version 0.1.0, CC0},
}"""


class BatonPenguins(tfds.core.GeneratorBasedBuilder):
    """Palmer penguins: predict `species` from island, sex and body measurements."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "Embedded CSV, NA as NaN / empty string."}

    def _info(self) -> tfds.core.DatasetInfo:
        features = {LABEL: tfds.features.Text()}
        features.update({c: tfds.features.Text() for c in CATEGORICAL})
        features.update({c: tfds.features.Scalar(dtype=np.float32) for c in NUMERIC})
        return tfds.core.DatasetInfo(
            builder=self,
            description="Palmer Archipelago penguins (Gorman, Palmer Station LTER).",
            features=tfds.features.FeaturesDict(features),
            homepage="https://allisonhorst.github.io/palmerpenguins/",
            citation=_CITATION,
        )

    def _split_generators(self, dl_manager: tfds.download.DownloadManager):  # noqa: ARG002
        return {"train": self._generate_examples(PENGUINS_CSV)}

    def _generate_examples(self, path):  # noqa: ANN001, ANN202
        with open(path, newline="", encoding="utf-8") as f:
            for i, row in enumerate(csv.DictReader(f)):
                ex = {c: ("" if row[c] == "NA" else row[c]) for c in (LABEL, *CATEGORICAL)}
                ex.update({c: np.float32("nan" if row[c] == "NA" else row[c]) for c in NUMERIC})
                yield i, ex
