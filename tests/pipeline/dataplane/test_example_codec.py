"""The vectorised example encoder and TFRecord framing against the encoder it replaced
(`reference_codec.py`, the previous implementation verbatim) and against TensorFlow itself:
the same bytes per example, the same values through `tf.io.parse_example`, and shard files
byte-identical to what `tf.io.TFRecordWriter` writes."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from baton.pipeline.dataplane.records import crc32c
from baton.pipeline.dataplane.records.example_codec import Strings, encode, encode_batch
from tests.pipeline.dataplane import reference_codec


def _rows(n: int = 3000, seed: int = 0):  # noqa: ANN202
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(n).astype(np.float32)
    a[rng.random(n) < 0.2] = np.nan  # missing
    a[:4] = [0.0, -0.0, np.inf, -np.inf]
    nan = np.isnan(a) & (rng.random(n) < 0.5)  # a NaN of the data, not a missing value
    words = ["", "x", "ünïcode" * 30, "y" * 200, "日本語", " spaced ", "tab\there", "é" * 70]
    s = np.array([words[i] for i in rng.integers(0, len(words), n)], object)
    img = rng.random((n, 3, 4)).astype(np.float32).reshape(n, 12)
    img[rng.random(n) < 0.1] = np.nan  # a missing tensor
    img[5, 3] = np.nan  # a NaN inside a present tensor
    wide = rng.random((n, 700)).astype(np.float32)  # > 2 KB per row: multi-byte varints
    wide[rng.random(n) < 0.3] = np.nan
    b = rng.standard_normal(n).astype(np.float32)
    label = np.array([f"class_{i}" for i in rng.integers(0, 3, n)], object)
    names = ["a", "island", "img", "wide", "b", "label"]
    cols = [a, s, img, wide, b, label]
    numeric = [True, False, True, True, True, False]
    return names, cols, numeric, {"a": nan}


def test_same_bytes_as_the_previous_encoder():
    names, cols, numeric, nan = _rows()
    old = reference_codec.encode_batch(names, cols, numeric, nan)
    assert encode_batch(names, cols, numeric, nan) == old
    as_strings = [Strings.from_objects(c) if not num else c for c, num in zip(cols, numeric, strict=True)]
    assert encode_batch(names, as_strings, numeric, nan) == old  # dictionary-encoded input


def test_parse_example_reads_the_same_values_and_keys():
    names, cols, numeric, nan = _rows(500, seed=1)
    spec = {"a": tf.io.FixedLenFeature([], tf.float32, default_value=-7.0),
            "island": tf.io.FixedLenFeature([], tf.string, default_value=b"<absent>"),
            "img": tf.io.FixedLenFeature([12], tf.float32, default_value=[-7.0] * 12),
            "wide": tf.io.VarLenFeature(tf.float32),
            "b": tf.io.FixedLenFeature([], tf.float32),
            "label": tf.io.FixedLenFeature([], tf.string)}
    new = tf.io.parse_example(encode_batch(names, cols, numeric, nan), spec)
    old = tf.io.parse_example(reference_codec.encode_batch(names, cols, numeric, nan), spec)
    for k in spec:
        if k == "wide":
            new_k, old_k = tf.sparse.to_dense(new[k]).numpy(), tf.sparse.to_dense(old[k]).numpy()
        else:
            new_k, old_k = new[k].numpy(), old[k].numpy()
        np.testing.assert_array_equal(new_k, old_k, err_msg=k)
    a = cols[0]
    got = new["a"].numpy()
    present = ~np.isnan(a) | nan["a"]
    np.testing.assert_array_equal(got[~present], -7.0)  # missing: absent, the default
    assert np.isnan(got[nan["a"]]).all()  # a marked NaN: present, NaN
    np.testing.assert_array_equal(new["island"].numpy()[cols[1] == ""], b"<absent>")
    kept = cols[1] != ""
    assert [v.decode() for v in new["island"].numpy()[kept]] == list(cols[1][kept])
    for rec in encode_batch(names, cols, numeric, nan)[:50]:  # keys: only the columns' names
        assert set(tf.train.Example.FromString(rec).features.feature) <= set(names)


def test_framed_batch_is_what_tfrecordwriter_writes(tmp_path):
    names, cols, numeric, nan = _rows(800, seed=2)
    records = reference_codec.encode_batch(names, cols, numeric, nan)
    with tf.io.TFRecordWriter(str(tmp_path / "ref.tfrecord")) as w:
        for r in records:
            w.write(r)
    framed = encode(names, cols, numeric, nan, framed=True)
    assert b"".join(framed.to_pylist()) == (tmp_path / "ref.tfrecord").read_bytes()
    (tmp_path / "new.tfrecord").write_bytes(b"".join(framed.to_pylist()))
    back = [r.numpy() for r in tf.data.TFRecordDataset(str(tmp_path / "new.tfrecord"))]
    assert back == records


def test_examples_writer_shards_match_tfrecordwriter(tmp_path):
    """Shard rotation inside a batch and across batches, and an empty split's empty shard."""
    from baton.pipeline.dataplane.records.examples_writer import ExamplesWriter
    from baton.pipeline.dataplane.records.schema_file import Column

    cols = [Column("x", "float32"), Column("c", "string"), Column("y", "string")]
    rng = np.random.default_rng(3)
    w = ExamplesWriter(tmp_path, cols, "y", {"train": 1.0, "eval": 1e-9}, 0, 700)
    every: list[bytes] = []
    for _ in range(3):
        x = rng.standard_normal(1000).astype(np.float32)
        c = np.array([["", "a", "bé"][i] for i in rng.integers(0, 3, 1000)], object)
        y = np.array([["p", "q"][i] for i in rng.integers(0, 2, 1000)], object)
        w.write_batch({"x": x, "c": Strings.from_objects(c), "y": y}, split="train")
        every += reference_codec.encode_batch(["x", "c", "y"], [x, c, y], [True, False, False])
    assert w.close() == {"train": 3000, "eval": 0}
    shards = sorted((tmp_path / "train").glob("part-*.tfrecord"))
    assert len(shards) == 5
    for i, shard in enumerate(shards):
        ref = tmp_path / f"ref-{i}.tfrecord"
        with tf.io.TFRecordWriter(str(ref)) as tw:
            for r in every[i * 700:(i + 1) * 700]:
                tw.write(r)
        assert shard.read_bytes() == ref.read_bytes(), shard.name
    assert [p.stat().st_size for p in (tmp_path / "eval").glob("*.tfrecord")] == [0]


@pytest.mark.parametrize("width", [1, 4, 5, 64, 129, 1000])
def test_crc32c_blocks_match_the_reference(width):
    rng = np.random.default_rng(width)
    block = rng.integers(0, 256, (7, width), dtype=np.uint8)
    raw = crc32c.raw_rows(block)
    init = crc32c.shift(np.full(7, crc32c.INIT, np.uint32), width)
    for i in range(7):
        assert int(raw[i] ^ init[i]) ^ crc32c.INIT == crc32c.crc32c(block[i].tobytes())
    lens = rng.integers(0, 40, 50)
    offsets = np.concatenate([[0], np.cumsum(lens)])
    data = rng.integers(0, 256, int(offsets[-1]), dtype=np.uint8)
    std = (crc32c.shift(np.full(50, crc32c.INIT, np.uint32), lens)
           ^ crc32c.raw_varlen(data, offsets) ^ np.uint32(crc32c.INIT))
    for i in range(50):
        assert int(std[i]) == crc32c.crc32c(data[offsets[i]:offsets[i + 1]].tobytes())
    assert crc32c.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value


def test_csv_strings_keep_the_arrow_copy_as_before(tmp_path):
    """Dictionary-encoded strings give the Arrow copy the rows' values the object path gave,
    with only the values some row uses in the batch's dictionary (their order is not read)."""
    import pyarrow as pa

    from baton.pipeline.dataplane.records.examples_writer import to_record_batch
    from baton.pipeline.dataplane.records.schema_file import Column

    vals = np.array(["b", "", "é", "a", "b", "日"], object)
    s = Strings.from_objects(vals)[np.array([0, 1, 2, 4, 5])]  # "a" no longer used
    col = [Column("s", "string")]
    new = to_record_batch(col, [s])
    old = to_record_batch(col, [vals[[0, 1, 2, 4, 5]]])
    assert new.schema.equals(old.schema)
    assert new.column(0).cast(pa.binary()).to_pylist() == old.column(0).cast(pa.binary()).to_pylist()
    assert sorted(new.column(0).dictionary.to_pylist()) == sorted(old.column(0).dictionary.to_pylist())
    assert b"a" not in new.column(0).dictionary.to_pylist()
    every = Strings.from_arrow(pa.array([b"x", b"y", b"x"]))
    assert every.compact() is every  # every value used: nothing to do


TOKENS = ["1", "-0", "+1.5", "1e3", ".5", "5.", "inf", "-Infinity", "nan", "nAn", "NaN", "NA",
          "null", "3.4e39", "1e-50", "16777217", " 1.5", "1.5 ", '"2.5"', '"NA"', '""', "1_0",
          "0x10", "abc", " NA "]


@pytest.mark.parametrize("token", TOKENS)
def test_csv_values_converted_by_the_parser_equal_the_raw_path(tmp_path, token):
    """iter_raw(types=...) lets pyarrow convert while parsing; whatever it accepts must decode
    exactly as the raw-bytes path does (the rest falls back to that path)."""
    from baton.pipeline.dataplane.sources.csv_source import Quarantine, iter_raw
    from baton.pipeline.dataplane.sources.csv_values import decode_batch

    path = tmp_path / "t.csv"
    path.write_text(f"a,s\n{token},{token}\n0.5,é\n")
    na = {v.encode() for v in ["", "NA", "NaN", "null"]}
    types = {"a": "float32", "s": "string"}
    q = Quarantine(tmp_path / "q")
    typed = [decode_batch(b, path, types, na, q) for b in iter_raw(path, ["a", "s"], q,
                                                                   types=types, na=na)]
    raw = [decode_batch(b, path, types, na, q) for b in iter_raw(path, ["a", "s"], q)]
    assert len(typed) == len(raw) == 1
    (tc, tn), (rc, rn) = typed[0], raw[0]
    np.testing.assert_array_equal(tc["a"], rc["a"])
    assert tn.keys() == rn.keys() and all((tn[k] == rn[k]).all() for k in tn)
    assert list(tc["s"].to_numpy()) == list(rc["s"].to_numpy())


def test_a_column_of_nearly_distinct_rows_is_not_dictionary_encoded_and_writes_the_same():
    """Free text skips the dictionary (each row its own value, repeats included); categories
    keep it; the tf.Examples, the Arrow copy's rows and the statistics are the same either
    way."""
    import pyarrow as pa

    from baton.pipeline.dataplane.records import example_codec
    from baton.pipeline.dataplane.records.examples_writer import to_record_batch
    from baton.pipeline.dataplane.records.schema_file import Column
    from baton.pipeline.dataplane.statistics.accumulators import StringAcc

    n = example_codec.DISTINCT_SAMPLE + 500
    text = [f"row {i}".encode() for i in range(n - 400)] + [b"again", b""] * 200  # repeats late
    cats = [b"a", b"b", b"c"] * (n // 3)
    free, few = Strings.from_arrow(pa.array(text)), Strings.from_arrow(pa.array(cats))
    assert free.codes.tolist() == list(range(n)) and len(free.values) == n
    assert len(few.values) == 3
    hashed = Strings.from_arrow(pa.array(text).dictionary_encode())  # the dictionary path
    assert len(hashed.values) < len(free.values)
    assert [few.values[int(c)].as_py() for c in few.codes] == cats
    assert encode(["t"], [free], [False]).equals(encode(["t"], [hashed], [False]))
    col = [Column("t", "string")]
    a, b = to_record_batch(col, [free]), to_record_batch(col, [hashed])
    assert a.column(0).cast(pa.binary()).to_pylist() == text == \
        b.column(0).cast(pa.binary()).to_pylist()
    accs = []
    for batch in (a, b):
        acc = StringAcc()
        d = batch.column(0)
        acc.add_dictionary(d.dictionary.to_pylist(), d.indices.to_numpy())
        accs.append((acc.missing, acc.counts))
    assert accs[0] == accs[1] and accs[0][1][b"again"] == 200 and accs[0][0] == 200
