"""A training job's data as the graph side reads it: the `transformed` artifact, or synthetic
rows of a feature spec, behind one reader for every split.

The training side (strategies.job) decides how each task reads it (sharded, balanced, sliced,
resumed); which files or rows a split holds, how they are parsed and how many there are is here.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from baton.graphs.feature_spec import FeatureSpec


@dataclasses.dataclass(frozen=True)
class TrainingData:
    feature_spec: dict[str, Any]  # FeatureSpec.to_dict(), as the job file holds it
    transformed_dir: str = ""  # empty: synthetic data of `synthetic_examples` rows
    synthetic_examples: int = 0  # the train split's; eval gets a quarter (at least one row)
    cache: bool = False  # whether the reader caches the parsed chunks (a split read again)

    @functools.cached_property
    def spec(self) -> FeatureSpec:
        return FeatureSpec.from_dict(self.feature_spec)

    def dataset(
        self,
        split: str,
        batch: int,
        *,
        shuffle: bool,
        input_context: Any,
        seed: int = 0,
        repeat: bool = False,
        cache: bool | None = None,
    ) -> Any:
        """`(features, label)` batches of `split` (graphs.input_pipeline.make_dataset, or
        graphs.synthetic.synthetic_dataset); `cache=None`: the data's own setting."""
        if self.transformed_dir:
            from baton.graphs.input_pipeline import make_dataset

            return make_dataset(
                self.transformed_dir,
                split,
                self.spec,
                batch,
                shuffle=shuffle,
                repeat=repeat,
                seed=seed,
                input_context=input_context,
                cache=self.cache if cache is None else cache,
            )
        from baton.graphs.synthetic import synthetic_dataset

        n = self.synthetic_examples if split == "train" else max(self.synthetic_examples // 4, 1)
        return synthetic_dataset(
            self.spec, n, batch, seed=seed, shuffle=shuffle, repeat=repeat,
            input_context=input_context,
        )

    def count(self, split: str = "train") -> int:
        """Rows in a split (one pass over the transformed data; synthetic: as configured)."""
        import tensorflow as tf

        if not self.transformed_dir:
            return self.synthetic_examples
        ds = self.dataset(split, 1024, shuffle=False, input_context=None)
        return int(
            ds.reduce(tf.constant(0, tf.int64),
                      lambda n, b: n + tf.shape(b[1], out_type=tf.int64)[0])
        )

    def chunks(self, split: str) -> Any:
        """The transformed split's columnar chunks as they are stored (graphs.row_table)."""
        from baton.graphs.input_pipeline import read_chunks

        return read_chunks(self.transformed_dir, split, self.spec)
