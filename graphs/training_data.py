"""A training job's data as the graph side reads it: the `transformed` artifact, or synthetic
rows of a feature spec, behind one reader for every split, and the tf.data streams each task
trains and evaluates on.

The training side hands the job's batching settings over once (strategies.job.TrainJob.data:
batch sizes, seed, eval steps, whether per-replica batches are balanced or the group elastic);
everything tf.data does with them is here: which files or rows a split holds, how they are
parsed and counted, the endless seeded train stream as each strategy and balance mode reads it
(`dataset_fns`), the in-memory row table of `balance: auto` (`row_table`) and the one pass in
file order the non-finite guard searches (`finite_split`).
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
    # how the training side reads it (TrainJob.data hands over the job's settings)
    batch_size: int = 1  # global: over all replicas
    eval_batch_size: int = 1
    eval_steps: int = 0  # 0: the whole eval split
    seed: int = 0
    balanced: bool = False  # `balance: auto`: per-replica batches follow measured speed
    elastic: bool = False  # the group may shrink or grow mid-run (strategies.elastic)
    num_rows: int = 0  # the train split's rows, counted once before any task starts

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

    def row_table(self) -> Any:
        """Under `balance: auto`, the train split held in memory (graphs.row_table), or None.

        Used when the split fits the table's share of the memory available; every task then
        draws the same global batches of row indices and gathers only its own rows. A split that
        does not fit is streamed whole on every task instead (see `dataset_fns`).
        """
        from baton.graphs import row_table as rt

        rows = self.num_rows if self.transformed_dir else self.synthetic_examples
        if not self.balanced or not rt.fits(rows, self.spec):
            return None
        if self.transformed_dir:
            return rt.RowTable(lambda: self.chunks("train"))
        return rt.RowTable(lambda: self.dataset("train", 4096, shuffle=False, input_context=None,
                                                cache=False))

    def dataset_fns(self, table: Any = None) -> tuple[Any, Any]:
        """(train_dataset(skip, input_context), eval_dataset()) for the training loop.

        Training reads one endless, seeded stream; with op determinism on (which also makes
        tf.data deterministic) a resumed task that skips `skip` batches sees exactly what it
        would have seen. Unbalanced, each task reads its own shard of it, except in an elastic
        job (`elastic`: the slices of the global batches, `sliced_ds`). Balanced, no task shards
        it: every task reads the whole stream in global batches (each local replica gets its own
        copy of each batch) and the step takes each replica's rows out of it
        (graphs.steps.make_train_chunk(balance=True)). With a `table` (`row_table`) the stream
        is of row indices and the step gathers its rows from the table; otherwise the stream
        carries the rows and the step slices them.
        """
        import tensorflow as tf

        batch_size, seed = self.batch_size, self.seed

        def balanced_ds(skip: int, ctx: Any) -> Any:
            if table is not None:
                ds = table.index_stream(batch_size, seed, skip)
            else:
                ds = self.dataset("train", batch_size, shuffle=True, input_context=None,
                                  seed=seed, repeat=True)
                ds = ds.skip(skip) if skip else ds
            local = ctx.num_replicas_in_sync // ctx.num_input_pipelines if ctx is not None else 1
            if local > 1:  # replicas of one task take consecutive elements: give each the batch
                ds = ds.flat_map(
                    lambda *element: tf.data.Dataset.from_tensors(element if len(element) > 1
                                                                  else element[0]).repeat(local))
            if ctx is not None:
                options = tf.data.Options()
                options.experimental_distribute.auto_shard_policy = (
                    tf.data.experimental.AutoShardPolicy.OFF)
                ds = ds.with_options(options)
            return ds

        def train_ds(skip: int, ctx: Any) -> Any:
            batch = ctx.get_per_replica_batch_size(batch_size) if ctx is not None else batch_size
            ds = self.dataset("train", batch, shuffle=True, input_context=ctx, seed=seed,
                              repeat=True)
            return ds.skip(skip) if skip else ds

        def sliced_ds(skip: int, ctx: Any) -> Any:
            """The global batches of one stream (as `balanced_ds` reads it), each cut into equal
            per-replica slices of which this task keeps its replicas' (in their order: a task's
            local replicas take consecutive elements)."""
            ds = self.dataset("train", batch_size, shuffle=True, input_context=None, seed=seed,
                              repeat=True)
            ds = ds.skip(skip) if skip else ds
            if ctx is None:
                return ds
            per = ctx.get_per_replica_batch_size(batch_size)
            local = ctx.num_replicas_in_sync // ctx.num_input_pipelines
            first = ctx.input_pipeline_id * local

            def cut(features: Any, labels: Any, r: int) -> Any:
                from baton.graphs.feature_spec import slice_rows

                lo, hi = r * per, (r + 1) * per
                return {k: slice_rows(v, lo, hi) for k, v in features.items()}, labels[lo:hi]

            def mine(features: Any, labels: Any) -> Any:
                out = tf.data.Dataset.from_tensors(cut(features, labels, first))
                for r in range(first + 1, first + local):
                    out = out.concatenate(tf.data.Dataset.from_tensors(cut(features, labels, r)))
                return out

            ds = ds.map(lambda f, y: cut(f, y, first)) if local == 1 else ds.flat_map(mine)
            options = tf.data.Options()
            options.experimental_distribute.auto_shard_policy = (
                tf.data.experimental.AutoShardPolicy.OFF)
            return ds.with_options(options)

        def eval_ds() -> Any:
            ds = self.dataset("eval", self.eval_batch_size, shuffle=False, input_context=None)
            return ds.take(self.eval_steps) if self.eval_steps else ds

        if self.balanced:
            return balanced_ds, eval_ds
        return (sliced_ds if self.elastic else train_ds), eval_ds

    def finite_split(self, split: str) -> Any:
        """One pass over a split in file order, in training batches: where the non-finite guard
        looks for the first non-finite feature (graphs.nonfinite_guard)."""
        return self.dataset(split, self.batch_size, shuffle=False, input_context=None,
                            cache=False)
