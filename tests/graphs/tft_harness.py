"""Runs tf.Transform's own test cases, ported, black-box through Baton's transform stage.

A `Case` is one upstream test case as tensorflow/transform writes it (its `beam/tft_unit.py`
harness): input rows as instance dicts, the input feature spec (`tf.io.FixedLenFeature`,
`VarLenFeature`, `SparseFeature`, `RaggedFeature`), the `preprocessing_fn`, the expected rows in
tf.Transform's encoding of transformed examples (`<name>$ragged_values`, `<name>$row_lengths_1`,
`<name>$sparse_indices_0`, `<name>$sparse_values`, a VarLenFeature as a list), and optionally
the expected transformed feature spec, id ranges (schema int domains) and vocabulary files.

Many cases share one stage run (one Beam pipeline per analyzer phase, one SavedModel), so the
ported suites fit the CI budget:

- each case's input rows become tf.Examples of its own feature spec, base64-encoded in the
  raw column `example`, with the case's id in `case` and the row's number in `row`; rows of
  `input_data` are the train split, rows of `test_data` (AnalyzeDataset on input_data,
  TransformDataset on test_data) the eval split;
- one `preprocessing_fn` runs every case: it takes each case's rows (`tf.boolean_mask` on
  `case`), parses them with `tf.io.parse_example` and the case's spec (what tf.Transform's
  TFXIO gives its function), calls the case's function with its vocabulary files named
  `<case>__<name>` (`tft_trace.scoped`), and spreads each output back over the batch's rows
  (other cases' rows get an empty value), keeping its dense, ragged or sparse kind, its shape
  and its id range;
- after the stage, for every case: the rows the stage wrote (read as training reads them) and
  `TFTransformOutput.transform_raw_features` on the same raw rows must be equal (train/serve),
  and equal to the expected rows as tf.Transform's `assertDataCloseOrEqual` compares them (rows
  in any order, strings exactly, numbers within atol 1e-4); the feature spec must be the
  expected one, id ranges the expected ones, vocabulary files hold the expected lines.

Cases ported from tensorflow/transform (Apache License 2.0, Copyright 2017 Google Inc.): the
inputs, functions and expected values are upstream's, adapted to this harness's Case objects.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ATOL = 1e-4  # tf.Transform's test_case.assertDataCloseOrEqual


@dataclasses.dataclass
class Case:
    name: str
    input_data: list[dict[str, Any]]
    feature_spec: dict[str, Any]
    fn: Callable[[dict[str, Any]], dict[str, Any]]
    expected_data: list[dict[str, Any]] | None = None
    expected_spec: dict[str, Any] | None = None
    expected_domains: dict[str, tuple[int, int]] | None = None  # None: not checked
    expected_vocab: dict[str, list[Any]] | None = None
    test_data: list[dict[str, Any]] | None = None
    id: str = ""
    same_as: Case | None = None  # an identical case (upstream lists tf.double and tf.float64,
    # the same dtype): checked against that case's run instead of running twice


def analyzer_case(name: str, input_data: list[dict[str, Any]], feature_spec: dict[str, Any],
                  analyzer_fn: Callable[[dict[str, Any]], dict[str, Any]],
                  expected_outputs: Mapping[str, Any],
                  test_data: list[dict[str, Any]] | None = None) -> Case:
    """tft_unit.assertAnalyzerOutputs: each analyzer value tiled over the batch and checked on
    three copies of the first row (or on `test_data`), with the expected fixed-length spec."""
    import tensorflow as tf

    expected = {k: np.asarray(v) for k, v in expected_outputs.items()}

    def preprocessing_fn(inputs: dict[str, Any]) -> dict[str, Any]:
        outputs = analyzer_fn(inputs)
        assert sorted(outputs) == sorted(expected), (sorted(outputs), sorted(expected))
        first = next(iter(inputs.values()))
        batch = (first.bounding_shape(axis=0) if isinstance(first, tf.RaggedTensor)
                 else tf.shape(first, out_type=tf.int64)[0])
        result = {}
        for key, t in outputs.items():
            shape = list(expected[key].shape)
            t.set_shape(shape)
            result[key] = tf.tile(tf.expand_dims(t, 0),
                                  tf.cast(tf.stack([batch] + [1] * len(shape)), tf.int32))
        return result

    if input_data and not test_data:
        test_data = [input_data[0]] * 3
    assert test_data
    spec = {k: tf.io.FixedLenFeature(list(v.shape), tf.as_dtype(v.dtype))
            for k, v in expected.items()}
    return Case(name, input_data, feature_spec, preprocessing_fn,
                [dict(expected)] * len(test_data), expected_spec=spec, expected_domains={},
                test_data=test_data)


# ------------------------------------------------------------------ the combined function
def combined(cases: Sequence[Case]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The one preprocessing_fn that runs every case on its own rows."""

    def preprocessing_fn(inputs: dict[str, Any]) -> dict[str, Any]:
        import tensorflow as tf

        from baton.graphs.tft import trace as tft_trace

        out = {"__row": inputs["row"] + 0.0}
        for case in cases:
            if case.same_as is not None:
                continue
            mask = tf.equal(inputs["case"], case.id)
            serialized = tf.io.decode_base64(tf.boolean_mask(inputs["example"], mask))
            parsed = tf.io.parse_example(serialized, case.feature_spec)
            with tft_trace.scoped(f"{case.id}__"):
                result = case.fn(dict(parsed))
            for key, value in result.items():
                out[f"{case.id}__{key}"] = _spread(value, mask)
        return out

    return preprocessing_fn


def _spread(value: Any, mask: Any) -> Any:
    """A case's output over its rows, spread back over the batch's rows (other rows empty),
    keeping its kind, its static shape and its id range."""
    import tensorflow as tf

    from baton.graphs.tft import trace as tft_trace

    trace = tft_trace.current()
    rows = tf.cast(tf.where(mask)[:, 0], tf.int64)
    total = tf.size(mask, out_type=tf.int64)
    if isinstance(value, tf.SparseTensor):
        indices = tf.concat([tf.gather(rows, value.indices[:, 0])[:, None],
                             value.indices[:, 1:]], axis=1)
        out = tf.SparseTensor(indices, value.values,
                              tf.concat([[total], value.dense_shape[1:]], 0))
        out.set_shape(tf.TensorShape([None]).concatenate(value.shape[1:]))
        return out  # same values tensor: its id range stays
    mine = tf.cumsum(tf.cast(mask, tf.int64)) - 1
    n = tf.shape(value, out_type=tf.int64)[0] if isinstance(value, tf.Tensor) else \
        value.nrows(out_type=tf.int64)
    at = tf.where(mask, mine, n)
    if isinstance(value, tf.RaggedTensor):
        empty = tf.RaggedTensor.from_row_lengths(value.values[:0],
                                                 tf.zeros([1], value.row_splits.dtype))
        out = tf.gather(tf.concat([value, empty], axis=0), at)
        src, dst = value.flat_values, out.flat_values
    else:
        if value.dtype == tf.string:
            blank = tf.fill(tf.concat([[1], tf.shape(value)[1:]], 0), "")
        else:
            blank = tf.zeros(tf.concat([[1], tf.shape(value)[1:]], 0), value.dtype)
        out = tf.gather(tf.concat([value, blank], axis=0), at)
        out.set_shape(tf.TensorShape([None]).concatenate(value.shape[1:]))
        src, dst = value, out
    if src.ref() in trace.domains:
        trace.domains[dst.ref()] = trace.domains[src.ref()]
    return out


# ------------------------------------------------------------------ examples and the stage run
def _example(row: Mapping[str, Any], feature_spec: Mapping[str, Any]) -> bytes:
    """A row (tft instance dict) as the tf.Example its feature spec parses."""
    import tensorflow as tf

    dtypes: dict[str, Any] = {}
    for name, f in feature_spec.items():
        if isinstance(f, tf.io.SparseFeature):
            keys = f.index_key if isinstance(f.index_key, list | tuple) else [f.index_key]
            dtypes.update({k: tf.int64 for k in keys})
            dtypes[f.value_key] = f.dtype
        elif isinstance(f, tf.io.RaggedFeature):
            dtypes[f.value_key or name] = f.dtype
            for p in f.partitions:
                if hasattr(p, "key"):
                    dtypes[p.key] = tf.int64
        else:
            dtypes[name] = f.dtype
    feats = {}
    for key, value in row.items():
        dtype = dtypes[key]
        values = np.asarray(value, dtype=object if dtype == tf.string else None).reshape(-1)
        if dtype == tf.string:
            feats[key] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[
                v if isinstance(v, bytes) else str(v).encode() for v in values.tolist()]))
        elif dtype == tf.int64:
            feats[key] = tf.train.Feature(int64_list=tf.train.Int64List(
                value=[int(v) for v in values.tolist()]))
        else:
            feats[key] = tf.train.Feature(float_list=tf.train.FloatList(
                value=[float(v) for v in values.tolist()]))
    return tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString()


def write_examples(cases: Sequence[Case], directory: Path) -> Path:
    """The examples artifact of every case's rows: train = input_data, eval = test_data."""
    from baton.pipeline.dataplane.records.examples_writer import ExamplesWriter
    from baton.pipeline.dataplane.records.schema_file import Column, ExamplesSchema

    columns = [Column("case", "string"), Column("example", "string"), Column("row", "float32"),
               Column("label", "float32")]
    writer = ExamplesWriter(directory, columns, "label", {"train": 1.0, "eval": 1.0}, seed=0,
                            rows_per_shard=1 << 30, threads=1)
    counts = {}
    for split in ("train", "eval"):
        rows = [(c, r) for c in cases if c.same_as is None
                for r in (c.input_data if split == "train" else (c.test_data or []))]
        batch = {"case": np.array([c.id for c, _ in rows], object),
                 "example": np.array([base64.urlsafe_b64encode(_example(r, c.feature_spec))
                                      .decode() for c, r in rows], object),
                 "row": np.arange(len(rows), dtype=np.float32),
                 "label": np.zeros(len(rows), np.float32)}
        if rows:
            writer.write_batch(batch, split=split)
        counts[split] = len(rows)
    writer.close()
    ExamplesSchema(tuple(columns), "label", "regression", counts).save(directory)
    return directory


@dataclasses.dataclass
class Results:
    """What the stage wrote and served, per split: raw rows (case ids) and outputs by row."""

    tfo: Any
    spec: Any
    metadata: dict[str, Any]
    cases: dict[str, list[Any]]  # split -> case id of each row
    written: dict[str, dict[str, Any]]  # split -> output -> batch value (tf)
    served: dict[str, dict[str, Any]]


def run(cases: Sequence[Case], root: Path, module_ref: str, spec_dir: Path) -> Results:
    """Run the transform stage once over every case (`module_ref`: "module:function" of the
    combined preprocessing_fn, importable from `spec_dir`) and read back what it wrote."""
    import tensorflow as tf

    import baton.tft as tft
    from baton.graphs.feature_spec import FeatureSpec
    from baton.graphs.input_pipeline import make_dataset
    from baton.pipeline.testing import run_stage

    examples = write_examples(cases, root / "examples")
    out, _ = run_stage("transform", {"preprocessing_fn": module_ref}, {"examples": examples},
                       root, spec_dir=spec_dir, run_id="upstream")
    graph = out["transform_graph"]
    spec = FeatureSpec.load(graph)
    tfo = tft.TFTransformOutput(str(graph))
    metadata = json.loads((graph / "tft_metadata.json").read_text())
    res = Results(tfo, spec, metadata, {}, {}, {})
    for split in ("train", "eval"):
        rows = [(c.id, r) for c in cases if c.same_as is None
                for r in (c.input_data if split == "train" else (c.test_data or []))]
        if not rows:
            continue
        res.cases[split] = [cid for cid, _ in rows]
        ds = make_dataset(out["transformed"], split, spec, batch_size=len(rows) + 1,
                          shuffle=False)
        written = next(iter(ds))[0]
        order = np.argsort(written["__row"].numpy(), kind="stable")
        res.written[split] = {k: _take(v, order) for k, v in written.items()}
        raw_ex = [base64.urlsafe_b64encode(_example(r, next(c for c in cases if c.id == cid)
                                                    .feature_spec)).decode()
                  for cid, r in rows]
        res.served[split] = dict(tfo.transform_raw_features({
            "case": tf.constant([cid for cid, _ in rows]), "example": tf.constant(raw_ex),
            "row": tf.range(len(rows), dtype=tf.float32)}))
    return res


def _take(value: Any, order: np.ndarray) -> Any:
    import tensorflow as tf

    if isinstance(value, tf.SparseTensor):
        rows = tf.gather(tf.cast(tf.argsort(order), tf.int64), value.indices[:, 0])  # old -> new row
        out = tf.SparseTensor(tf.concat([rows[:, None], value.indices[:, 1:]], 1),
                              value.values, value.dense_shape)
        return tf.sparse.reorder(out)
    return tf.gather(value, order)


# ------------------------------------------------------------------ checking one case
def check(case: Case, res: Results) -> None:
    """Everything tft_unit.assertAnalyzeAndTransformResults checks, for one case."""
    prefix = f"{(case.same_as or case).id}__"
    split = "eval" if case.test_data else "train"
    fs = {k[len(prefix):]: v for k, v in res.tfo.transformed_feature_spec().items()
          if k.startswith(prefix)}
    if case.expected_data is not None:
        rows = [i for i, c in enumerate(res.cases.get(split, [])) if c == (case.same_as or case).id]
        names = [k for k in res.written.get(split, {}) if k.startswith(prefix)]
        for k in names:  # train/serve: the rows written are the rows served
            _same(res.written[split][k], res.served[split][k], rows, k)
        columns = {k[len(prefix):]: _numpy(res.written[split][k]) for k in names}
        actual = [_render(columns, fs, i) for i in rows]
        assert_data_close_or_equal(case.expected_data, actual)
    if case.expected_spec is not None:
        want = {k: _normal(k, v) for k, v in case.expected_spec.items()}
        got = {k: _normal(k, v, prefix) for k, v in fs.items()}
        assert got == want, f"feature spec:\n{got}\nexpected:\n{want}"
    if case.expected_domains is not None:
        got_d = {k[len(prefix):]: (v["min"], v["max"]) for k, v in res.metadata.items()
                 if k.startswith(prefix) and "max" in v}
        assert got_d == dict(case.expected_domains), f"domains {got_d} != {case.expected_domains}"
    for name, contents in (case.expected_vocab or {}).items():
        from baton.graphs.tft.trace import sanitized_vocab_filename

        path = res.tfo.vocabulary_file_by_name(prefix + sanitized_vocab_filename(name))
        assert path is not None, f"no vocabulary file {name!r}"
        assert_vocabulary(path, contents)


def _same(written: Any, served: Any, rows: list[int], name: str) -> None:
    import tensorflow as tf

    def rows_of(v: Any) -> list[Any]:
        if isinstance(v, tf.SparseTensor):
            dense = tf.sparse.to_dense(v, default_value=b"" if v.dtype == tf.string else 0)
            mask = tf.sparse.to_dense(tf.SparseTensor(v.indices, tf.ones_like(
                v.values, tf.int64), v.dense_shape))
            v, m = dense.numpy(), mask.numpy()
            return [(v[i][m[i] > 0]).tolist() for i in rows]
        if isinstance(v, tf.RaggedTensor):
            return ragged_rows(v, rows)
        a = v.numpy()
        return [_plain(a[i]) for i in rows]

    a, b = rows_of(written), rows_of(served)
    assert _close(a, b), f"{name}: written rows differ from served rows:\n{a}\n{b}"


def _render(outputs: Mapping[str, Any], fs: Mapping[str, Any], i: int) -> dict[str, Any]:
    """Row i of the outputs as tf.Transform's written examples read back (tft_unit's
    `_format_example_as_numpy_dict`)."""
    import tensorflow as tf

    row: dict[str, Any] = {}
    for name, v in outputs.items():
        f = fs[name]
        if isinstance(v, tf.RaggedTensor):
            flat, lengths = _ragged_row(v, i)
            row[f"{name}$ragged_values"] = flat
            keys = [f"{name}${p.key.split('$')[-1]}" for p in f.partitions if hasattr(p, "key")]
            for key, lens in zip(keys, lengths, strict=False):
                row[key] = lens
        elif isinstance(v, tf.SparseTensor):
            sel = v.indices[:, 0] == i
            idx = tf.boolean_mask(v.indices, sel).numpy()
            vals = tf.boolean_mask(v.values, sel).numpy().tolist()
            if isinstance(f, tf.io.VarLenFeature):
                row[name] = vals
            else:
                for d in range(idx.shape[1] - 1):
                    row[f"{name}$sparse_indices_{d}"] = idx[:, d + 1].tolist()
                row[f"{name}$sparse_values"] = vals
        else:
            row[name] = _plain(v[i])
    return row


def _splits(v: Any) -> tuple[list[np.ndarray], np.ndarray]:
    """A ragged tensor's row splits (numpy, every level) and flat values, cached on it: eager
    indexing of a ragged tensor costs milliseconds a row."""
    cached = getattr(v, "_harness_numpy", None)
    if cached is None:
        cached = ([s.numpy() for s in v.nested_row_splits], v.flat_values.numpy())
        with contextlib.suppress(AttributeError):
            v._harness_numpy = cached
    return cached


def _ragged_row(v: Any, i: int) -> tuple[list[Any], list[list[int]]]:
    """Row i of a ragged tensor: its flat values (uniform inner dimensions flattened) and the
    row lengths of its inner ragged levels (tf.Transform's `$row_lengths_<k>`)."""
    splits, flat = _splits(v)
    lo, hi = i, i + 1
    lengths = []
    for level, sp in enumerate(splits):
        if level:
            lengths.append(np.diff(sp[lo:hi + 1]).tolist())
        lo, hi = int(sp[lo]), int(sp[hi])
    return _plain(flat[lo:hi].reshape(-1)), lengths


def ragged_rows(v: Any, rows: Sequence[int]) -> list[Any]:
    """Rows of a ragged tensor as nested Python lists (what `to_list` gives, without its eager
    slicing per row)."""
    splits, flat = _splits(v)

    def nest(level: int, lo: int, hi: int) -> list[Any]:
        if level == len(splits):
            return _plain(flat[lo:hi])
        sp = splits[level]
        return [nest(level + 1, int(sp[j]), int(sp[j + 1])) for j in range(lo, hi)]

    return [nest(1, int(splits[0][i]), int(splits[0][i + 1])) for i in rows]


def _numpy(v: Any) -> Any:
    """A dense column as numpy once (rows are read from it many times); others as they are."""
    import tensorflow as tf

    return v if isinstance(v, tf.RaggedTensor | tf.SparseTensor) else v.numpy()


def _normal(name: str, f: Any, prefix: str = "") -> Any:
    """A tf.io feature spec entry with the case's prefix taken out of its keys."""
    import tensorflow as tf

    def strip(k: Any) -> Any:
        return k[len(prefix):] if prefix and isinstance(k, str) and k.startswith(prefix) else k

    if isinstance(f, tf.io.FixedLenFeature):
        return ("fixed", tuple(f.shape), f.dtype.name)
    if isinstance(f, tf.io.VarLenFeature):
        return ("varlen", f.dtype.name)
    if isinstance(f, tf.io.SparseFeature):
        keys = f.index_key if isinstance(f.index_key, list | tuple) else [f.index_key]
        return ("sparse", tuple(strip(k) for k in keys), strip(f.value_key), f.dtype.name,
                tuple(None if d is None else int(d) for d in tf.TensorShape(f.size)))
    parts = tuple(("len", strip(p.key)) if hasattr(p, "key") else ("uniform", p.length)
                  for p in f.partitions)
    return ("ragged", f.dtype.name, strip(f.value_key), parts)


# ------------------------------------------------------------------ tf.Transform's comparisons
def assert_data_close_or_equal(expected: list[dict[str, Any]], actual: list[dict[str, Any]]) -> None:
    """test_case.assertDataCloseOrEqual: the same rows in any order, each with the same keys,
    strings equal, numbers within atol 1e-4 (NaN equal to NaN)."""
    assert len(expected) == len(actual), f"{len(expected)} rows expected, {len(actual)} got:\n" \
                                         f"{actual}"
    # the rows sorted by their rounded values usually pair up; otherwise search every pairing
    ordered_e, ordered_a = sorted(expected, key=_key), sorted(actual, key=_key)
    if all(_row_close(e, a) for e, a in zip(ordered_e, ordered_a, strict=True)):
        return
    left = list(range(len(actual)))
    for e in expected:
        hit = next((j for j in left if _row_close(e, actual[j])), None)
        assert hit is not None, f"no row matches {e}\nactual rows:\n{actual}"
        left.remove(hit)


def _key(row: Mapping[str, Any]) -> str:
    def rounded(v: Any) -> Any:
        v = _plain(v)
        if isinstance(v, list):
            return [rounded(x) for x in v]
        if isinstance(v, float):
            return "nan" if math.isnan(v) else round(v, 3)
        return v.encode() if isinstance(v, str) else v

    return repr(sorted((k, rounded(v)) for k, v in row.items()))


def _row_close(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    if sorted(a) != sorted(b):
        return False
    return all(_close(a[k], b[k]) for k in a)


def _close(a: Any, b: Any) -> bool:
    """Equal strings, numbers within atol (NaN equal to NaN), lists of any nesting."""
    a, b = _plain(a), _plain(b)
    if isinstance(a, list) or isinstance(b, list):
        if not isinstance(a, list):
            a = [a]
        if not isinstance(b, list):
            b = [b]
        if len(a) != len(b):
            return False
        return all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, bytes | str) or isinstance(b, bytes | str):
        return _bytes(a) == _bytes(b)
    try:
        x, y = float(a), float(b)
    except (TypeError, ValueError):
        return False
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    return x == y or abs(x - y) <= ATOL + 1e-6 * abs(y)


def _bytes(v: Any) -> Any:
    return v.encode() if isinstance(v, str) else v


def _plain(v: Any) -> Any:
    """numpy values as Python lists and scalars."""
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, tuple):
        return list(v)
    return v


def assert_vocabulary(path: str, contents: Sequence[Any]) -> None:
    """test_case.AssertVocabularyContents: the lines (a TFRecord GZIP file's records), or
    with (token, value) pairs the `value token` lines, values to 6 decimals."""
    import tensorflow as tf

    if path.endswith(".tfrecord.gz"):
        lines = [r.numpy() for r in tf.data.TFRecordDataset(path, compression_type="GZIP")]
    else:
        lines = Path(path).read_bytes().splitlines()
    if contents and isinstance(contents[0], tuple):
        pairs = []
        for line in lines:
            value, word = line.split(b" ", 1)
            vals = [float(v) for v in value.split(b",")]
            pairs.append((word, vals[0] if len(vals) == 1 else vals))
        want_words = [w if isinstance(w, bytes) else str(w).encode() for w, _ in contents]
        assert [w for w, _ in pairs] == want_words, f"{pairs} != {contents}"
        np.testing.assert_almost_equal([v for _, v in pairs], [v for _, v in contents],
                                       decimal=6)
    else:
        want = [w if isinstance(w, bytes) else str(w).encode() for w in contents]
        assert lines == want, f"{lines} != {want}"


def assign_ids(cases: Sequence[Case]) -> list[Case]:
    """Short ids (`c0001`...) for the output names; names must be unique."""
    names = [c.name for c in cases]
    dup = {n for n in names if names.count(n) > 1}
    assert not dup, f"duplicate case names: {sorted(dup)}"
    width = max(4, int(math.log10(max(len(cases), 1))) + 1)
    for i, c in enumerate(cases):
        c.id = f"c{i:0{width}d}"
    return list(cases)


def groups(cases: Sequence[Case], max_rows: int = 40_000) -> list[list[Case]]:
    """Cases cut into runs of at most `max_rows` rows: every output is spread over every row
    of its run, so one run over many large cases would write cases x rows values."""
    out: list[list[Case]] = [[]]
    rows = 0
    for c in cases:
        n = 0 if c.same_as is not None else len(c.input_data) + len(c.test_data or [])
        if out[-1] and rows + n > max_rows:
            out.append([])
            rows = 0
        out[-1].append(c)
        rows += n
    return out


_RUNS: dict[str, Any] = {}


def once(key: str, make: Callable[[], Any]) -> Any:
    """`make()` once per key and process; a failure is raised again, not run again (a module
    fixture that fails would otherwise rerun a whole stage for each of its cases)."""
    if key not in _RUNS:
        try:
            _RUNS[key] = ("ok", make())
        except Exception as exc:  # noqa: BLE001 - re-raised below, for every case
            _RUNS[key] = ("error", exc)
    status, value = _RUNS[key]
    if status == "error":
        raise value
    return value
