"""Units of the data plane: example codec, quantile sketch, Beam runner options, example specs."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from baton.pipeline.dataplane.beam import runner as beam_runner
from baton.pipeline.dataplane.records.example_codec import encode_batch
from baton.pipeline.dataplane.statistics import accumulators

ROOT = Path(__file__).resolve().parents[3]


def test_codec_writes_what_protobuf_parses():
    names = ["a", "island", "b"]
    a = np.array([1.5, np.nan, -3.25, 1e30], np.float32)
    s = np.array(["x", "", "ünïcode" * 30, "y"], object)  # long value: multi-byte varints
    b = np.array([np.nan, 2, 3, np.inf], np.float32)
    for i, rec in enumerate(encode_batch(names, [a, s, b], [True, False, True])):
        feats = tf.train.Example.FromString(rec).features.feature
        assert ("a" in feats) == (not np.isnan(a[i]))
        if "a" in feats:
            assert feats["a"].float_list.value == [a[i]]
        assert ("island" in feats) == (s[i] != "")
        if "island" in feats:
            assert feats["island"].bytes_list.value == [s[i].encode()]
        if "b" in feats:
            assert feats["b"].float_list.value == [b[i]]


def test_quantile_sketch_is_accurate_after_many_merges():
    rng = np.random.default_rng(0)
    acc = accumulators.NumericAcc()
    data = []
    for _ in range(60):
        part = accumulators.NumericAcc()
        x = rng.lognormal(size=5000).astype(np.float32)
        part.add(x)
        acc.merge(part)
        data.append(x)
    allx = np.concatenate(data)
    qs = np.array([0.1, 0.5, 0.9])
    got = acc.sketch.quantiles(qs)
    ranks = np.searchsorted(np.sort(allx), got) / len(allx)
    np.testing.assert_allclose(ranks, qs, atol=0.01)
    assert acc.count == len(allx)
    assert acc.mean == pytest.approx(allx.astype(np.float64).mean(), rel=1e-9)
    assert acc.var == pytest.approx(allx.astype(np.float64).var(), rel=1e-6)


@pytest.mark.parametrize("batch", [997, 34_000, 131_072, 400_000])
def test_quantile_sketch_holds_few_distinct_values_exactly_whatever_the_batches(batch):
    # 20 integers, 400k rows: the boundaries are the data's own quantiles (as tf.Transform's
    # weighted sketch gives them), not a point on either side of a tie at a target rank
    from baton.graphs.quantile_sketch import QuantileSketch

    rng = np.random.default_rng(3)
    x = rng.integers(0, 20, 400_000).astype(np.float32)
    x[:20_000] = 4.0  # a value whose cumulative share lands on the 25% target
    acc = QuantileSketch()
    for start in range(0, len(x), batch):
        part = QuantileSketch()
        part.add(x[start:start + batch])
        acc.merge(part)
    qs = np.arange(1, 4) / 4
    ordered = np.sort(x)
    exact = ordered[np.searchsorted(np.arange(1, len(x) + 1), qs * len(x), side="right")]
    np.testing.assert_array_equal(acc.rank_quantiles(qs), exact)
    assert acc.weights.sum() == len(x)
    assert len(np.unique(acc.values)) == 20


def test_runner_defaults_to_fnapirunner_and_passes_others_through():
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    runner, _ = beam_runner.make_runner([])
    assert isinstance(runner, FnApiRunner)
    runner, opts = beam_runner.make_runner(["--direct_num_workers=2",
                                            "--direct_running_mode=multi_processing"])
    assert isinstance(runner, FnApiRunner)
    assert opts.get_all_options()["direct_num_workers"] == 2
    assert beam_runner.make_runner(["--runner=FlinkRunner"])[0] == "FlinkRunner"
    assert beam_runner.runner_name(["--runner", "SparkRunner"]) == "SparkRunner"


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "examples").glob("*.yaml")))
def test_example_specs_plan_cleanly(name):
    from baton.pipeline.plan import plan
    from baton.pipeline.spec import load_spec

    p = plan(load_spec(ROOT / "examples" / name))
    assert "ingest" in p.order


def test_codec_writes_a_marked_nan_as_a_value():
    a = np.array([1.0, np.nan, np.nan], np.float32)
    recs = encode_batch(["a"], [a], [True], nan={"a": np.array([False, False, True])})
    feats = [tf.train.Example.FromString(r).features.feature for r in recs]
    assert feats[0]["a"].float_list.value == [1.0]
    assert "a" not in feats[1]  # missing: absent
    assert np.isnan(feats[2]["a"].float_list.value[0])  # a NaN of the data: present, NaN


def test_arrow_copy_keeps_missing_and_nan_apart(tmp_path):
    """The columnar copy honours keep_nan like the TFRecords: missing -> ABSENT, NaN -> NaN."""
    from baton.pipeline.dataplane.records.examples_writer import ExamplesWriter
    from baton.pipeline.dataplane.records.reader import ABSENT, read_batches
    from baton.pipeline.dataplane.records.schema_file import Column, shard_files

    cols = [Column("x", "float32"), Column("y", "string")]
    w = ExamplesWriter(tmp_path, cols, "y", {"train": 1}, 0, 100)
    x = np.array([1.0, np.nan, np.nan, 4.0], np.float32)
    w.write_batch({"x": x, "y": np.array(["a", "b", "c", "d"], object)},
                  nan={"x": np.array([False, False, True, False])})
    w.close()
    [shard] = shard_files(tmp_path, "train")
    for columnar in (True, False):
        if not columnar:
            shutil.rmtree(tmp_path / "columnar")
        kept = np.concatenate([b.column("x").to_numpy(zero_copy_only=False)
                               for b in read_batches(shard, cols, keep_nan=True)])
        assert kept[0] == 1.0 and kept[1] == ABSENT and np.isnan(kept[2]), columnar
        plain = np.concatenate([b.column("x").to_numpy(zero_copy_only=False)
                                for b in read_batches(shard, cols)])
        assert plain[0] == 1.0 and np.isnan(plain[1:3]).all() and plain[3] == 4.0, columnar
    acc = accumulators.NumericAcc()
    acc.add(np.array([np.nan, 2.0], np.float32), keep_nan=True)  # no ABSENT in this batch
    assert (acc.nan, acc.missing, acc.count) == (1, 0, 1)


@pytest.mark.parametrize("line", [b'A,x,"5', b'A,"x,5', b'A,x",",5', b'"a""b'])
@pytest.mark.parametrize("where", range(-3, 4))
def test_unterminated_quote_around_a_chunk_boundary(tmp_path, line, where):
    """iter_raw reads 64 kB chunks (block_rows=1024): the open quote may sit at a chunk's end,
    at the start of the next one, or anywhere near; only that line is lost."""
    from baton.pipeline.dataplane.sources.csv_source import Quarantine, iter_raw

    rows = [b"B,%011d,x" % i for i in range(8192)]  # 15 bytes + line break
    at = (1 << 16) // 16 + where  # the first chunk ends after row 4095
    rows[at] = line
    path = tmp_path / "a.csv"
    path.write_bytes(b"s,t,u\n" + b"\n".join(rows) + b"\n")
    q = Quarantine(tmp_path / "q")
    got = [r for b in iter_raw(path, ["s", "t", "u"], q, block_rows=1024)
           for r in b.to_pylist()]
    q.close()
    assert q.by_reason == {"unterminated_quote": 1}
    assert q.examples == [f"a.csv line {at + 2}: a quoted field is not closed on its line "
                          f"(unterminated quote)"]
    assert len(got) == 8191 and got[-1] == {"s": b"B", "t": b"%011d" % 8191, "u": b"x"}


def test_line_is_closed_follows_the_csv_parser():
    from baton.pipeline.dataplane.sources.csv_source import line_is_closed

    closed = [b"", b"a,b", b'"a,b",c', b'"a ""q"" b",c', b'12" screen,x', b'"a"b,c', b'""',
              b'"a""",b', b'x,""']
    still_open = [b'"', b'a,"b', b'"a""b', b'x",",y', b'"a"",b', b'a,"""']
    assert [line_is_closed(s) for s in closed] == [True] * len(closed)
    assert [line_is_closed(s) for s in still_open] == [False] * len(still_open)


def test_a_columnar_chunk_is_the_features_message_of_its_columns():
    from baton.pipeline.dataplane.records.transformed_io import encode_chunk

    rng = np.random.default_rng(0)
    for n in (0, 1, 300):
        cols = {"a": rng.normal(size=n).astype(np.float32),
                "img": rng.normal(size=(n, 3, 2)).astype(np.float32), "x" * 200: np.zeros(n),
                "big": rng.integers(-2**40, 2**40, n).astype(np.int64)}
        cols = {k: v[n // 3:] for k, v in cols.items()}  # views into larger arrays
        feats = tf.train.Example.FromString(encode_chunk(cols)).features.feature
        assert sorted(feats) == sorted(cols)
        for k, v in cols.items():
            assert feats[k].bytes_list.value == [np.ascontiguousarray(v).tobytes()]


@pytest.mark.parametrize(("lo", "hi", "width"), [
    (0, 9, 1), (-1, 127, 1), (-128, 0, 1), (0, 128, 2), (-32768, 32767, 2), (-1, 40_000, 4),
    (-2**31, 2**31 - 1, 4), (0, 2**31, None), (-2**63, 2**63 - 1, None)])
def test_int64_arrays_are_stored_in_the_narrowest_width_and_read_back_as_int64(lo, hi, width):
    """Token ids, row lengths and labels: int8/16/32 on disk with a `$width` feature, int64
    again through transformed_io.column and the training reader (graphs.input_pipeline)."""
    from baton.pipeline.dataplane.records.transformed_io import WIDTH, column, encode_chunk

    v = np.array([lo, hi, lo, hi], np.int64)
    feats = tf.train.Example.FromString(encode_chunk({"ids": v})).features.feature
    if width is None:
        assert "ids" + WIDTH not in feats and len(feats["ids"].bytes_list.value[0]) == 32
    else:
        assert list(feats["ids" + WIDTH].int64_list.value) == [width]
        assert len(feats["ids"].bytes_list.value[0]) == 4 * width
    got = column(feats, "ids", "int64")
    assert got.dtype == np.int64 and got.tolist() == v.tolist()


def test_frozen_heap_leaves_old_objects_out_of_collections_until_the_end():
    import gc

    from baton.pipeline.dataplane.frozen_heap import frozen_heap

    before = gc.get_freeze_count()
    with frozen_heap():
        assert gc.get_freeze_count() > before
    assert gc.get_freeze_count() == 0


def test_the_beam_merges_keep_a_default_only_when_their_input_may_be_empty():
    """Without the default value a CombineGlobally of nothing is nothing, and the apply step's
    side input would fail: it is dropped only where an element per (train) shard is certain."""
    import apache_beam as beam
    from apache_beam.testing.util import assert_that, equal_to

    from baton.pipeline.dataplane.beam.merge import SumCounts
    from baton.pipeline.dataplane.beam.tft import MergePhase, _merged

    train, evaluation = ("train", "ref", 0), ("eval", "ref", 1)
    assert not _merged(MergePhase({}), [evaluation, train]).has_defaults
    assert _merged(MergePhase({}), [evaluation]).has_defaults
    assert not _merged(SumCounts(), [evaluation], every_shard=True).has_defaults
    assert _merged(SumCounts(), [], every_shard=True).has_defaults
    with beam.Pipeline() as p:  # the default still there: one value from an empty input
        out = p | beam.Create([]) | _merged(SumCounts(), [], every_shard=True)
        assert_that(out, equal_to([{}]))
