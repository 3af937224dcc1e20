"""The transform's per-batch fast paths (issue 34's text benchmark): string columns fed to the
graph as Arrow's packed buffers, non-finite outputs counted on the arrays the apply step
writes, a vocabulary's per-batch counts taken without a Python call per token. Each must give
exactly what the plain path gives."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest


def _dictionary(values: list, value_type: pa.DataType, offset: int = 0) -> pa.DictionaryArray:
    """A dictionary column whose dictionary is a slice starting at `offset` (Arrow's offsets
    then do not start at 0), with values the rows never use."""
    words = [b"pad"] * offset + sorted(set(values)) + [b"unused"]
    if pa.types.is_string(value_type) or pa.types.is_large_string(value_type):
        words = [w.decode() for w in words]
    dictionary = pa.array(words, value_type).slice(offset)
    index = {w: i for i, w in enumerate(dictionary.to_pylist())}
    key = [v.decode() if isinstance(words[0], str) else v for v in values]
    return pa.DictionaryArray.from_arrays(pa.array([index[k] for k in key], pa.int32()),
                                          dictionary)


@pytest.mark.parametrize("value_type", [pa.binary(), pa.string(), pa.large_binary(),
                                        pa.large_string()])
def test_packed_strings_decode_to_the_rows_values(value_type):
    from baton.pipeline.dataplane.records.reader import packed_strings

    rng = np.random.default_rng(0)
    words = [b"", b"a", "\u00e9t\u00e9".encode(), b"two words", b"x" * 300, b"\n"]
    batches = [[words[i] for i in rng.integers(0, len(words), n)] for n in (50, 1, 0, 80)]
    arrays = [_dictionary(b, value_type, offset=k) for k, b in enumerate(batches)]
    packed = packed_strings(arrays)
    assert packed is not None and packed.codes.dtype == np.int32
    assert packed.decoded().tolist() == [v for b in batches for v in b]
    assert packed.offsets[-1] == len(packed.data)


def test_packed_strings_leave_nulls_and_other_types_to_the_plain_path():
    from baton.pipeline.dataplane.records.reader import packed_strings

    with_null = pa.DictionaryArray.from_arrays(pa.array([0, None], pa.int32()),
                                               pa.array([b"a"]))
    null_value = pa.DictionaryArray.from_arrays(pa.array([0, 1], pa.int32()),
                                                pa.array([b"a", None]))
    numbers = pa.DictionaryArray.from_arrays(pa.array([0], pa.int32()), pa.array([1.5]))
    for array in (with_null, null_value, numbers):
        assert packed_strings([array]) is None


def test_the_feeder_gives_a_graph_the_same_strings_packed_or_not():
    import tensorflow as tf

    from baton.graphs.tft.feed import Codes, Feeder
    from baton.pipeline.dataplane.records.reader import packed_strings

    specs = {"s": tf.TensorSpec([None], tf.string, name="s"),
             "x": tf.TensorSpec([None], tf.float32, name="x")}
    feeder = Feeder(lambda raw: {"s": tf.strings.join([raw["s"], "|"]), "x": raw["x"] * 2},
                    specs, frozenset(specs))
    rows = [b"b", b"", b"a b", b"b", "\u00fc".encode()]
    x = np.arange(len(rows), dtype=np.float32)
    expected = [r + b"|" for r in rows]
    packed = packed_strings([_dictionary(rows[:2], pa.binary(), 2),
                             _dictionary(rows[2:], pa.binary())])
    for strings in (np.array(rows, object), Codes.of(np.array(rows, object)), packed,
                    np.array([r.decode() for r in rows], object)):
        out = feeder({"s": strings, "x": x})
        assert out["s"].numpy().tolist() == expected
        np.testing.assert_array_equal(out["x"].numpy(), x * 2)
    empty = feeder({"s": np.zeros(0, object), "x": np.zeros(0, np.float32)})
    assert empty["s"].shape == (0,)


def _bad_rows_reference(value) -> int:
    """Rows holding a non-finite value, row by row in Python (the definition)."""
    from baton.pipeline.dataplane.records.transformed_io import Ragged

    if not isinstance(value, Ragged):
        return sum(not np.isfinite(np.asarray(r, np.float64)).all() for r in value)
    bad = 0
    for i in range(len(value)):
        row = value.rows(i, i + 1)
        bad += not np.isfinite(np.asarray(row.values, np.float64)).all()
    return bad


def test_nonfinite_rows_count_each_row_once_whatever_the_encoding():
    from baton.pipeline.dataplane.records.transformed_io import Ragged, nonfinite_rows

    nan, inf = np.nan, np.inf
    columns = {
        "dense": np.array([1, nan, 2, -inf, nan], np.float32),
        "matrix": np.array([[1, 2], [nan, nan], [3, inf], [0, 0], [5, 6]], np.float32),
        "ragged": Ragged(np.array([1, nan, 2, 3, inf, nan], np.float32),
                         [np.array([2, 0, 1, 3, 0])]),
        "nested": Ragged(np.array([[1, nan], [2, 3], [4, 5], [inf, 1]], np.float32),
                         [np.array([1, 2, 0, 0, 1]), np.array([2, 0, 1, 1])]),
        "sparse": Ragged(np.array([nan, 1.0, 2.0], np.float32), [np.array([1, 0, 0, 2, 0])],
                         np.array([[0], [1], [3]])),
        "ids": np.array([1, 2, 3, 4, 5], np.int64),
        "ragged_ids": Ragged(np.array([1, 2], np.int64), [np.array([1, 1, 0, 0, 0])]),
    }
    counts = nonfinite_rows(columns)
    assert counts == {"dense": 3, "matrix": 2, "ragged": 2, "nested": 2, "sparse": 1}
    assert counts == {k: _bad_rows_reference(v) for k, v in columns.items() if k in counts}
    assert nonfinite_rows({"empty": np.zeros((0, 3), np.float32)}) == {"empty": 0}


@pytest.mark.parametrize("filter_newlines", [True, False])
def test_a_vocabulary_batch_count_keeps_what_the_token_by_token_rule_keeps(filter_newlines):
    from baton.graphs.tft import vocab_order as tft_vocab_order

    params = {"ordering": "frequency", "filter_newlines": filter_newlines}
    tokens = [b"a", b"", b"b\n", b"c\r", b"d", b"e f"]
    counts = [3, 1, 2, 5, 1, 4]
    keep = tft_vocab_order._keeper(params)
    want = {t: c for t, c in zip(tokens, counts, strict=True) if keep(t)}
    got = tft_vocab_order.accumulate(params, [np.array(tokens, object), np.array(counts)])
    assert got == want
    assert list(got) == list(want)  # the same order: the merge and the file do not depend on it
    clean = tft_vocab_order.accumulate(params, [np.array([b"a", b"d"], object),
                                                np.array([1, 2])])
    assert clean == {b"a": 1, b"d": 2}
    repeated = tft_vocab_order.accumulate(params, [np.array([b"a", b"a", "d"], object),
                                                   np.array([1, 2, 3])])
    assert repeated == {b"a": 3, b"d": 3}
