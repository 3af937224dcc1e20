"""What an analyzer phase costs: it reads only the raw columns its analyzers need (the lookups
of vocabularies resolved earlier do not run), and nothing is traced after the last phase."""

from __future__ import annotations

import numpy as np

import baton.tft as tft
from baton.graphs.tft import engine as tft_engine
from baton.graphs.tft import feed as tft_feed
from baton.graphs.tft import trace as tft_trace


def _fn(i):
    ids = tft.compute_and_apply_vocabulary(i["s"], num_oov_buckets=1)
    centred = i["x"] - tft.mean(i["y"])
    return {"ids": ids, "z": tft.scale_to_z_score(centred)}


DATA = {"s": np.array([b"a", b"b", b"a", b""], object),
        "x": np.array([1, 2, 3, 6], np.float32), "y": np.array([2, 4, 6, 8], np.float32)}


def test_a_phase_reads_only_what_its_analyzers_need_and_no_trace_follows_the_last(monkeypatch):
    traces = []
    real = tft_trace.trace_function

    def counting(*args, **kwargs):
        traces.append(kwargs.get("analysis"))
        return real(*args, **kwargs)

    monkeypatch.setattr(tft_trace, "trace_function", counting)
    specs = tft_engine.raw_specs([("s", "string", ()), ("x", "float32", ()),
                                  ("y", "float32", ())])
    phases = tft_engine.Phases(_fn, specs)
    first = phases.next()
    assert first is not None and first.inputs == {"s", "y"} and not first.last
    phases.finish(first, first.accumulate({"s": DATA["s"], "y": DATA["y"]}))
    second = phases.next()
    # the vocabulary's lookup table exists now, but phase 2 only needs x: the lookup (and s)
    # are pruned from its graph
    assert second is not None and second.inputs == {"x"} and second.last
    assert list(second.concrete.graph.control_outputs) == []
    phases.finish(second, second.accumulate({"x": DATA["x"]}))  # no s, no y in the batch
    assert phases.next() is None
    assert traces == [True, True]  # no third trace to learn that there is no third phase
    mean_y = 5.0
    centred = DATA["x"] - mean_y
    (moments,) = [v for k, v in phases.resolved.items() if k in second.analyzers]
    np.testing.assert_allclose(moments, [centred.mean(), centred.var()], rtol=1e-6)


def test_the_final_graph_reads_every_column_its_outputs_or_lookups_use():
    specs = tft_engine.raw_specs([("s", "string", ()), ("x", "float32", ()),
                                  ("y", "float32", ()), ("unused", "float32", ())])
    resolved = tft_engine.analyze(_fn, specs, lambda: [{**DATA, "unused": DATA["x"]}])
    _, concrete = tft_engine.transform_fn(_fn, specs, resolved)
    assert tft_feed.used_inputs(concrete) == {"s", "x"}  # y only fed an analyzer


def test_a_table_filled_in_the_functions_graph_is_filled_before_its_lookups(tmp_path):
    """A table the preprocessing_fn builds itself (tf.Transform's lookup_fn pattern) is filled
    by an op of the phase's graph, which runs without automatic control dependencies: the
    lookup must still wait for it. A file large enough that filling it takes longer than
    reaching the lookup made the phase fail with "Table not initialized" (first seen as a
    flaky upstream vocabulary case under load)."""
    import tensorflow as tf

    path = tmp_path / "big_vocab.txt"  # its own path: TensorFlow shares a table by file name
    path.write_text("".join(f"tok{i}\n" for i in range(300_000)))

    def fn(i):
        table = tf.lookup.StaticHashTable(tf.lookup.TextFileInitializer(
            str(path), tf.string, tf.lookup.TextFileIndex.WHOLE_LINE, tf.int64,
            tf.lookup.TextFileIndex.LINE_NUMBER), default_value=-1)
        ids = tf.cast(table.lookup(i["s"]), tf.float32)
        return {"m": tf.zeros_like(ids) + tft.mean(ids) + tft.mean(i["x"] - tft.mean(i["y"]))}

    data = {"s": np.array([b"tok5", b"tok7", b"nope", b"tok2"], object), **{
        k: DATA[k] for k in ("x", "y")}}
    specs = tft_engine.raw_specs([("s", "string", ()), ("x", "float32", ()),
                                  ("y", "float32", ())])
    resolved = tft_engine.analyze(fn, specs, lambda: [data])
    assert resolved[0][0] == np.float32(13 / 4)  # (5 + 7 - 1 + 2) / 4


def test_a_key_value_table_filled_in_the_functions_graph_is_filled_before_its_lookups():
    """A StaticHashTable over a KeyValueTensorInitializer (a small mapping written in the
    preprocessing_fn) is filled in a function by LookupTableImportV2, not InitializeTableV2:
    its lookup must wait for it too, in the phase that reads it (the first, and a later one
    that looks up a vocabulary's ids), or the phase fails with "Table not initialized"."""
    import tensorflow as tf

    def fn(i):
        weights = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
            tf.constant(["a", "b"]), tf.constant([5.0, 6.0])), -1.0)
        first = weights.lookup(i["s"])
        ids = tft.compute_and_apply_vocabulary(i["s"])  # known from the second phase on
        by_id = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
            tf.constant([0, 1], tf.int64), tf.constant([10.0, 20.0])), 0.0)
        return {"m": tf.zeros_like(first) + tft.mean(first),
                "n": tf.zeros_like(first) + tft.mean(by_id.lookup(ids))}

    data = {"s": np.array([b"a", b"b", b"c", b"a"], object)}
    specs = tft_engine.raw_specs([("s", "string", ())])
    resolved = tft_engine.analyze(fn, specs, lambda: [data])
    means = sorted(float(v[0]) for v in resolved.values() if np.ndim(v[0]) == 0)
    # (5 + 6 - 1 + 5) / 4; ids a:0 (twice), b and c: 1 and 2, so (10 + 10 + 20 + 0) / 4
    assert means == [15 / 4, 10.0]
