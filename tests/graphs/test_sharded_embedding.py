"""Row-sharded embeddings: same lookups as one table, and export merges them into one."""

from __future__ import annotations

import numpy as np

from baton.graphs import models
from baton.graphs.sharded_embedding import ShardedEmbedding, merge_into, shard_rows
from baton.graphs.synthetic import synthetic_arrays, synthetic_spec


def test_div_partitioning_of_rows() -> None:
    assert shard_rows(10, 3) == [4, 3, 3]
    assert sum(shard_rows(1001, 4)) == 1001


def test_lookup_equals_a_lookup_in_the_concatenated_table() -> None:
    layer = ShardedEmbedding(10, 4, 3)
    ids = np.array([0, 3, 4, 9, 7], np.int64)
    out = np.asarray(layer(ids))
    table = np.concatenate([s.numpy() for s in layer.shards])
    np.testing.assert_array_equal(out, table[ids])


def test_large_tables_only_are_sharded_and_export_merges_them() -> None:
    spec = synthetic_spec(2, (1000, 3))
    cfg = models.MLPConfig(embedding_dim=4, embedding_shards=2, shard_min_bytes=1024)
    trained = models.build_model("mlp", spec, cfg, seed=1)
    assert isinstance(trained.get_layer("c0_embedding"), ShardedEmbedding)
    assert not isinstance(trained.get_layer("c1_embedding"), ShardedEmbedding)
    clean = models.build_model("mlp", spec, models.MLPConfig(embedding_dim=4), seed=2)
    merge_into(trained, clean)
    feats, _ = synthetic_arrays(spec, 16)
    np.testing.assert_allclose(np.asarray(clean(feats)), np.asarray(trained(feats)), rtol=1e-6)
