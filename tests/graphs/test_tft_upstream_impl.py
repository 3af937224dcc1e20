"""tensorflow/transform's beam/impl_test.py, its analyzer and mapper cases, through the stage.

Ported from tensorflow/transform (tensorflow_transform/beam/impl_test.py, Apache License 2.0,
Copyright 2017 Google Inc.): inputs, preprocessing functions and expected values are
upstream's; `self.assertEqual` checks inside the functions became `assert`. Every case runs in
one transform stage run (tests/graphs/tft_harness.py) and is checked as tft_unit checks it.
Cases left out, with the reason, are in `LEFT_OUT`.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

import baton.tft as tft
from tests.graphs import tft_harness as h
from tests.graphs.tft_harness import Case, analyzer_case

F, V, S, R = tf.io.FixedLenFeature, tf.io.VarLenFeature, tf.io.SparseFeature, tf.io.RaggedFeature
RL, UL = tf.io.RaggedFeature.RowLengths, tf.io.RaggedFeature.UniformRowLength
CASES: list[Case] = []

PER_KEY = "tft.{}_per_key is not exported by baton.tft (docs/preprocessing.md lists the names)"
LEFT_OUT = {
    "testApplySavedModelSingleInput": "tft.pretrained_models.apply_saved_model is not exported",
    "testApplySavedModelWithHashTable": "tft.pretrained_models.apply_saved_model is not exported",
    "testApplySavedModelMultiInputs": "tft.pretrained_models.apply_saved_model is not exported",
    "testApplyFunctionWithCheckpoint": "tft.pretrained_models.apply_function_with_checkpoint "
                                       "is not exported",
    "testRawFeedDictInput": "the function returns 6 rows for 2 input rows; Baton keeps one "
                            "transformed row per raw row, so each row keeps its label",
    "testTransformWithExcludedOutputs": "tests TransformDataset(exclude_outputs=...) on eval "
                                        "data lacking a column, a Beam API Baton does not "
                                        "have; its scale_to_0_1 is testScaleUnitInterval's",
    "testPyFuncs": "tft.apply_pyfunc is not exported",
    "testAssertsNoReturnPyFunc": "tft.apply_pyfunc is not exported",
    "testScaleUnitIntervalPerKey": PER_KEY.format("scale_to_0_1"),
    "testScaleMinMaxPerKey": PER_KEY.format("scale_by_min_max"),
    "testScalePerKeySparse": PER_KEY.format("scale_*"),
    "testScaleMinMaxSparsePerKey": PER_KEY.format("scale_to_0_1"),
    "testScalePerKeyRagged": PER_KEY.format("scale_*"),
    "testScaleToZScoreSparsePerDenseKey": PER_KEY.format("scale_to_z_score"),
    "testScaleToZScorePerKey": PER_KEY.format("scale_to_z_score"),
    "testScaleToZScorePerKeyElementwise": PER_KEY.format("scale_to_z_score"),
    "testScaleToZScoreSparsePerKey": PER_KEY.format("scale_to_z_score"),
    "testMeanAndVarPerKey": "tensorflow_transform.analyzers._mean_and_var_per_key is private",
    "testMeanAndVarPerKeyElementwise": "analyzers._mean_and_var_per_key is private",
    "testMinAndMaxPerKey": "analyzers._min_and_max_per_key is private",
    "testPerKeyWithOOVKeys": PER_KEY.format("scale_*"),
    "testCountPerKey": "tft.count_per_key is not exported",
    "testHistograms": "tft.histogram is not exported",
    "testProbCategoricalInt": "tft.estimated_probability_density is not exported",
    "testProbCategorical": "tft.estimated_probability_density is not exported",
    "testProbTenBoundaries": "tft.estimated_probability_density is not exported",
    "testProbUnknownBoundaries": "tft.estimated_probability_density is not exported",
    "testStringToTFIDF": "tft.tfidf is not exported",
    "testTFIDFNoData": "tft.tfidf is not exported",
    "testStringToTFIDFEmptyDoc": "tft.tfidf is not exported",
    "testIntToTFIDF": "tft.tfidf is not exported",
    "testIntToTFIDFWithoutSmoothing": "tft.tfidf is not exported",
    "testTFIDFWithOOV": "tft.tfidf is not exported",
    "testTFIDFWithNegatives": "tft.tfidf is not exported",
    "testStringToDFIDFExperimental": "tft.experimental.document_frequency is not exported",
    "testDFIDFExperimentalNoData": "tft.experimental.document_frequency is not exported",
    "testStringToDFIDFExperimentalEmptyDoc": "tft.experimental.document_frequency is not "
                                             "exported",
    "testDFIDFExperimentalWithOOV": "tft.experimental.document_frequency is not exported",
    "testIntToDFIDFExpeirmental": "tft.experimental.document_frequency is not exported",
    "testDFIDFExperimentalWithNegatives": "tft.experimental.document_frequency is not exported",
    "testCovarianceTwoDimensions": "tft.covariance is not exported",
    "testCovarianceOneDimension": "tft.covariance is not exported",
    "testCovarianceOneDimensionWithEmptyInputs": "tft.covariance is not exported",
    "testPCAThreeToTwoDimensions": "tft.pca is not exported",
    "testPCAThreeToTwoDimensionsWithEmptyInputs": "tft.pca is not exported",
    "testPTransformAnalyzer": "tft.experimental.ptransform_analyzer is not exported",
    "testPTransformAnalyzerMultiDimOutput": "tft.experimental.ptransform_analyzer is not "
                                            "exported",
    "testSavedModelWithAnnotations": "schema annotations (tft annotations_pb2) are not "
                                     "exported",
    "testSavedModelWithGlobalAnnotations": "schema annotations are not exported",
    "testPipelineAPICounters": "Beam metrics counters of tf.Transform's own pipeline",
    "testNumBytesCounter": "Beam metrics counters of tf.Transform's own pipeline",
    "testHandleBatchError": "malformed instance dicts fed to Beam; Baton's raw columns are "
                            "typed by ingest",
    "testPassthroughKeys": "TFXIO passthrough keys, a tft_beam.Context option Baton does not "
                           "have",
    "testPipelineWithoutAutomaterialization": "tests Beam PCollection plumbing of "
                                              "tft_beam.AnalyzeDataset",
    "testEmptySchema": "empty input metadata: Baton's ingest always writes columns",
    "testLoadKerasModelInPreprocessingFn": "tft.make_and_track_object is not exported",
    "test_non_deterministic_preprocessing_fn_without_name": "baton.tft numbers analyzers by "
                                                            "call order (docs/preprocessing.md)",
    "test_non_deterministic_preprocessing_fn_with_name": "baton.tft numbers analyzers by call "
                                                         "order, not by name",
}


def _add(*cases: Case) -> None:
    CASES.extend(cases)


def _canon(dtype: tf.DType) -> tf.DType:  # tft_unit.canonical_numeric_dtype
    return tf.float32 if dtype.is_floating else tf.int64


def _mean_dtype(dtype: tf.DType) -> tf.DType:
    return tf.float64 if dtype == tf.float64 else tf.float32


# ------------------------------------------------------------------ testMultipleLevelsOfAnalyzers
def _multiple_levels(inputs):
    scaled_to_0 = inputs["x"] - tft.min(inputs["x"])
    return {"x_scaled": scaled_to_0 / tft.max(scaled_to_0)}


for _deep in ("NoDeepCopy", "WithDeepCopy"):
    _add(Case(f"testMultipleLevelsOfAnalyzers[{_deep}]", [{"x": 4}, {"x": 1}, {"x": 5}, {"x": 2}],
              {"x": F([], tf.float32)}, _multiple_levels,
              [{"x_scaled": 0.75}, {"x_scaled": 0.0}, {"x_scaled": 1.0}, {"x_scaled": 0.25}],
              {"x_scaled": F([], tf.float32)}))

# ------------------------------------------------------------------ testMapWithCond
_add(Case("testMapWithCond", [{"a": 4, "b": 3}, {"a": 1, "b": 2}, {"a": 5, "b": 6},
                              {"a": 2, "b": 3}],
          {"a": F([], tf.float32), "b": F([], tf.float32)},
          lambda inputs: {"a": tf.cond(pred=tf.constant(True), true_fn=lambda: inputs["a"],
                                       false_fn=lambda: inputs["b"])},
          [{"a": 4}, {"a": 1}, {"a": 5}, {"a": 2}], {"a": F([], tf.float32)}))

# ------------------------------------------------------------------ testWithMoreThanDesiredBatchSize
_N = 101
_add(Case("testWithMoreThanDesiredBatchSize",
          [{"a": 2, "b": i, "c": f"{i:010d}"} for i in range(_N)],  # upstream: "%.10i" % i
          {"a": F([], tf.float32), "b": F([], tf.float32), "c": F([], tf.string)},
          lambda inputs: {"ab": tf.multiply(inputs["a"], inputs["b"]),
                          "i": tft.compute_and_apply_vocabulary(inputs["c"])},
          [{"ab": 2 * i, "i": (_N - 1) - i} for i in range(_N)],
          {"ab": F([], tf.float32), "i": F([], tf.int64)}, {"i": (-1, _N - 1)}))


# ------------------------------------------------------------------ testWithUnicode, testNpArrayInput
def _join(inputs):
    return {"a b": tf.compat.v1.strings.join([inputs["a"], inputs["b"]], separator=" ")}


_add(Case("testWithUnicode", [{"a": "Hello", "b": "world"}, {"a": "Hello", "b": "κόσμε"}],
          {"a": F([], tf.string), "b": F([], tf.string)}, _join,
          [{"a b": b"Hello world"}, {"a b": "Hello κόσμε".encode()}], {"a b": F([], tf.string)}),
     Case("testNpArrayInput",
          [{"a": np.array("Hello", dtype=object), "b": np.array("world", dtype=object)},
           {"a": np.array("Hello", dtype=object), "b": np.array("κόσμε", dtype=object)}],
          {"a": F([], tf.string), "b": F([], tf.string)}, _join,
          [{"a b": np.array(b"Hello world", dtype=object)},
           {"a b": np.array("Hello κόσμε".encode(), dtype=object)}],
          {"a b": F([], tf.string)}))


# ------------------------------------------------------------------ testScaleUnitInterval, testScaleMinMax
def _stacked(scale):
    def fn(inputs):
        result = scale(tf.stack([inputs["x"], inputs["y"]], axis=1))
        x, y = tf.unstack(result, axis=1)
        return {"x_scaled": x, "y_scaled": y}

    return fn


_XY = {"x": F([], tf.float32), "y": F([], tf.float32)}
_XY_OUT = {"x_scaled": F([], tf.float32), "y_scaled": F([], tf.float32)}
for _ew in (True, False):
    _add(Case(f"testScaleUnitInterval[{_ew}]",
              [{"x": 4, "y": 5}, {"x": 1, "y": 2}, {"x": 5, "y": 6}, {"x": 2, "y": 3}], _XY,
              _stacked(lambda x, e=_ew: tft.scale_to_0_1(x, elementwise=e)),
              [{"x_scaled": 0.75, "y_scaled": 0.75}, {"x_scaled": 0.0, "y_scaled": 0.0},
               {"x_scaled": 1.0, "y_scaled": 1.0}, {"x_scaled": 0.25, "y_scaled": 0.25}]
              if _ew else
              [{"x_scaled": 0.6, "y_scaled": 0.8}, {"x_scaled": 0.0, "y_scaled": 0.2},
               {"x_scaled": 0.8, "y_scaled": 1.0}, {"x_scaled": 0.2, "y_scaled": 0.4}],
              _XY_OUT))
    _add(Case(f"testScaleMinMax[{_ew}]",
              [{"x": 4, "y": 8}, {"x": 1, "y": 5}, {"x": 5, "y": 9}, {"x": 2, "y": 6}], _XY,
              _stacked(lambda x, e=_ew: tft.scale_by_min_max(x, output_min=-1, output_max=1,
                                                             elementwise=e)),
              [{"x_scaled": 0.5, "y_scaled": 0.5}, {"x_scaled": -1.0, "y_scaled": -1.0},
               {"x_scaled": 1.0, "y_scaled": 1.0}, {"x_scaled": -0.5, "y_scaled": -0.5}]
              if _ew else
              [{"x_scaled": -0.25, "y_scaled": 0.75}, {"x_scaled": -1.0, "y_scaled": 0.0},
               {"x_scaled": 0.0, "y_scaled": 1.0}, {"x_scaled": -0.75, "y_scaled": 0.25}],
              _XY_OUT))

_add(Case("testScaleMinMaxConstant", [{"x": 4}] * 4, {"x": F([], tf.float32)},
          lambda inputs: {"x_scaled": tft.scale_by_min_max(inputs["x"], 0, 10)},
          [{"x_scaled": 9.8201379}] * 4, {"x_scaled": F([], tf.float32)}),
     Case("testScaleMinMaxConstantElementwise",
          [{"x": 4, "y": 1}, {"x": 4, "y": 1}, {"x": 4, "y": 2}, {"x": 4, "y": 2}], _XY,
          _stacked(lambda x: tft.scale_by_min_max(x, output_min=0, output_max=10,
                                                  elementwise=True)),
          [{"x_scaled": 9.8201379, "y_scaled": 0}, {"x_scaled": 9.8201379, "y_scaled": 0},
           {"x_scaled": 9.8201379, "y_scaled": 10}, {"x_scaled": 9.8201379, "y_scaled": 10}],
          _XY_OUT))

_M = 3  # x is repeated `multiple` times to test elementwise mapping
_add(Case("testScaleMinMaxWithEmptyInputs", [], {"x": F([1], tf.float32)},
          lambda inputs: {"x_scaled": tft.scale_by_min_max(inputs["x"]),
                          "x_scaled_elementwise": tft.scale_by_min_max(
                              tf.tile(inputs["x"], [1, _M]), elementwise=True)},
          [{"x_scaled": [v], "x_scaled_elementwise": [v] * _M}
           for v in [1.0, 0.7310585, 0.9999938]],
          {"x_scaled": F([1], tf.float32), "x_scaled_elementwise": F([_M], tf.float32)},
          test_data=[{"x": [100]}, {"x": [1]}, {"x": [12]}]),
     Case("testScaleToZScoreWithEmptyInputs", [], {"x": F([1], tf.float32)},
          lambda inputs: {"x_scaled": tft.scale_to_z_score(inputs["x"]),
                          "x_scaled_elementwise": tft.scale_to_z_score(
                              tf.tile(inputs["x"], [1, _M]), elementwise=True)},
          [{"x_scaled": [v], "x_scaled_elementwise": [v] * _M} for v in [100.0, 1.0, 12.0]],
          {"x_scaled": F([1], tf.float32), "x_scaled_elementwise": F([_M], tf.float32)},
          test_data=[{"x": [100]}, {"x": [1]}, {"x": [12]}]))

# ------------------------------------------------------------------ testScaleToZScore
_Z = [("int16", np.array([[1], [1], [2], [2]], np.int16), [[-1.0], [-1.0], [1.0], [1.0]],
       np.float32, False),
      ("int32", np.array([[1], [1], [2], [2]], np.int32), [[-1.0], [-1.0], [1.0], [1.0]],
       np.float32, False),
      ("int64", np.array([[1], [1], [2], [2]], np.int64), [[-1.0], [-1.0], [1.0], [1.0]],
       np.float32, False),
      ("float32", np.array([[1], [1], [2], [2]], np.float32), [[-1.0], [-1.0], [1.0], [1.0]],
       np.float32, False),
      ("float64", np.array([[1], [1], [2], [2]], np.float64), [[-1.0], [-1.0], [1.0], [1.0]],
       np.float64, False),
      ("vector", np.array([[1, 2], [3, 4]], np.float32),
       (np.array([[-3, -1], [1, 3]]) / np.sqrt(5.0)).tolist(), np.float32, False),
      ("vector_elementwise", np.array([[1, 2], [3, 4]], np.float32),
       [[-1.0, -1.0], [1.0, 1.0]], np.float32, True),
      ("zero_variance", np.array([[3], [3], [3], [3]], np.float32), [[0], [0], [0], [0]],
       np.float32, False),
      ("zero_variance_elementwise", np.array([[3, 4], [3, 4]], np.float32), [[0, 0], [0, 0]],
       np.float32, True),
      ("with_nans", np.array([[1], [np.nan], [np.nan], [2]], np.float32),
       [[-1.0], [np.nan], [np.nan], [1.0]], np.float32, False),
      ("with_nans_elementwise", np.array([[1, np.nan], [np.nan, 2]], np.float32),
       [[0, np.nan], [np.nan, 0]], np.float32, True)]


def _z_score(in_dtype, out_dtype, elementwise):
    def fn(inputs):
        x_scaled = tft.scale_to_z_score(tf.cast(inputs["x"], tf.as_dtype(in_dtype)),
                                        elementwise=elementwise)
        assert x_scaled.dtype == tf.as_dtype(out_dtype), x_scaled.dtype
        return {"x_scaled": tf.cast(x_scaled, tf.float32)}

    return fn


for _name, _x, _y, _out, _ew in _Z:
    _add(Case(f"testScaleToZScore[{_name}]", [{"x": v} for v in _x],
              {"x": F(list(_x.shape[1:]), _canon(tf.as_dtype(_x.dtype)))},
              _z_score(_x.dtype, _out, _ew), [{"x_scaled": v} for v in _y],
              {"x_scaled": F([len(_y[0])], tf.float32)}))


# ------------------------------------------------------------------ testScaleToZScoreSparse
def _z_sparse(dtype, elementwise):
    def fn(inputs):
        z = tf.sparse.to_dense(tft.scale_to_z_score(tf.cast(inputs["x"], dtype),
                                                    elementwise=elementwise),
                               default_value=np.nan)
        z.set_shape([None, 4])
        assert z.dtype == _mean_dtype(dtype), z.dtype
        return {"x_scaled": tf.cast(z, tf.float32)}

    return fn


_NAN4 = [float("nan")] * 2
for _dt in (tf.int16, tf.int32, tf.int64, tf.float32, tf.float64):
    for _ew in (True, False):
        _rows = [{"idx": [0, 1], "val": [-4, 10]}, {"idx": [0, 1], "val": [2, 4]}]
        _want = ([{"x_scaled": [-1.0, 1.0, *_NAN4]}, {"x_scaled": [1.0, -1.0, *_NAN4]}] if _ew
                 else [{"x_scaled": [-1.4, 1.4, *_NAN4]}, {"x_scaled": [-0.2, 0.2, *_NAN4]}])
        if _dt.is_floating:
            _rows.append({"idx": [0, 1], "val": [np.nan, np.nan]})
            _want.append({"x_scaled": [float("nan")] * 4})
        _add(Case(f"testScaleToZScoreSparse[{_dt.name}-{_ew}]", _rows,
                  {"x": S("idx", "val", _canon(_dt), 4)}, _z_sparse(_dt, _ew), _want,
                  {"x_scaled": F([4], tf.float32)}))

# ------------------------------------------------------------------ testMeanAndVar
# (upstream calls the private analyzers._mean_and_var; tft.mean and tft.var are its outputs)
CASES.append(analyzer_case(
    "testMeanAndVar", [{"x": [x if x < 101 else np.nan]} for x in range(1, 111)],
    {"x": F([1], tf.float32)}, lambda inputs: {"mean": tft.mean(inputs["x"]),
                                               "var": tft.var(inputs["x"])},
    {"mean": np.float32(50.5), "var": np.float32(833.25)}))

# ------------------------------------------------------------------ testNumericAnalyzersWithScalarInputs
_SCALAR_DTYPES = [
    ("Int64In", tf.int64, dict(min=tf.int64, max=tf.int64, sum=tf.int64, size=tf.int64,
                               mean=tf.float32, var=tf.float32)),
    ("Int32In", tf.int32, dict(min=tf.int32, max=tf.int32, sum=tf.int64, size=tf.int64,
                               mean=tf.float32, var=tf.float32)),
    ("Int16In", tf.int16, dict(min=tf.int16, max=tf.int16, sum=tf.int64, size=tf.int64,
                               mean=tf.float32, var=tf.float32)),
    ("Float64In", tf.float64, dict(min=tf.float64, max=tf.float64, sum=tf.float64,
                                   size=tf.int64, mean=tf.float64, var=tf.float64)),
    ("Float32In", tf.float32, dict(min=tf.float32, max=tf.float32, sum=tf.float32,
                                   size=tf.int64, mean=tf.float32, var=tf.float32)),
    ("Float16In", tf.float16, dict(min=tf.float16, max=tf.float16, sum=tf.float32,
                                   size=tf.int64, mean=tf.float16, var=tf.float16)),
]


def _scalar_analyzers(in_dtype, out):
    def fn(inputs):
        a = tf.cast(inputs["a"], in_dtype)

        def check(t, dtype):
            assert t.dtype == dtype, (t.dtype, dtype)
            return tf.cast(t, _canon(dtype))

        return {"min": check(tft.min(a), out["min"]), "max": check(tft.max(a), out["max"]),
                "sum": check(tft.sum(a), out["sum"]), "size": check(tft.size(a), out["size"]),
                "mean": check(tft.mean(a), out["mean"]), "var": check(tft.var(a), out["var"])}

    return fn


for _name, _dt, _out in _SCALAR_DTYPES:
    CASES.append(analyzer_case(
        f"testNumericAnalyzersWithScalarInputs[{_name}]", [{"a": 4}, {"a": 1}],
        {"a": F([], _canon(_dt))}, _scalar_analyzers(_dt, _out),
        {k: np.array(v, _canon(_out[k]).as_numpy_dtype)
         for k, v in dict(min=1, max=4, sum=5, size=2, mean=2.5, var=2.25).items()}))

# ------------------------------------------------------------------ testNumericAnalyzersWithCompositeInputs
_SPARSE_ROWS = [{"idx0": [0, 1], "idx1": [0, 1], "val": [0, 1]},
                {"idx0": [1, 2], "idx1": [1, 3], "val": [2, 3]}]
_nan = np.nan
_COMPOSITE = [
    ("sparse", _SPARSE_ROWS, lambda dt: S(["idx0", "idx1"], "val", dt, (3, 4)),
     dict(min=0.0, max=3.0, sum=6.0, size=4, mean=1.5, var=1.25), True),
    ("sparse_elementwise", _SPARSE_ROWS, lambda dt: S(["idx0", "idx1"], "val", dt, (3, 4)),
     dict(min=[[0.0, _nan, _nan, _nan], [_nan, 1.0, _nan, _nan], [_nan, _nan, _nan, 3.0]],
          max=[[0.0, _nan, _nan, _nan], [_nan, 2.0, _nan, _nan], [_nan, _nan, _nan, 3.0]],
          sum=[[0.0, 0.0, 0.0, 0.0], [0.0, 3.0, 0.0, 0.0], [0.0, 0.0, 0.0, 3.0]],
          size=[[1, 0, 0, 0], [0, 2, 0, 0], [0, 0, 0, 1]],
          mean=[[0.0, _nan, _nan, _nan], [_nan, 1.5, _nan, _nan], [_nan, _nan, _nan, 3.0]],
          var=[[0.0, _nan, _nan, _nan], [_nan, 0.25, _nan, _nan], [_nan, _nan, _nan, 0.0]]),
     False),
    ("ragged", [{"val": [0.0, 2.0, 3.0], "row_lengths": [0, 3]},
                {"val": [3.0, 3.0, 1.0], "row_lengths": [3]}],
     lambda dt: R(dt, value_key="val", partitions=[RL("row_lengths")]),
     dict(min=0.0, max=3.0, sum=12.0, size=6, mean=2.0, var=1.333333), True),
]


def _composite_analyzers(reduce_instance_dims):
    def fn(inputs):
        a = inputs["a"]
        return {"min": tft.min(a, reduce_instance_dims), "max": tft.max(a, reduce_instance_dims),
                "sum": tft.sum(a, reduce_instance_dims),
                "size": tft.size(a, reduce_instance_dims),
                "mean": tft.mean(a, reduce_instance_dims),
                "var": tft.var(a, reduce_instance_dims)}

    return fn


for _name, _rows, _make, _exp, _reduce in _COMPOSITE:
    for _dname, _dt in (("int16", tf.int16), ("int32", tf.int32), ("int64", tf.int64),
                        ("float32", tf.float32), ("tf.float64", tf.float64),
                        ("tf.uint8", tf.uint8), ("tf.uint16", tf.uint16)):
        _out = _canon(_dt)
        _data = [dict(r, val=np.array(r["val"], _dt.as_numpy_dtype)) for r in _rows]
        _e = {k: [list(r) for r in v] if isinstance(v, list) else v for k, v in _exp.items()}
        if not _reduce:  # upstream: NaN placeholders replaced by the dtype's missing values
            lo, hi = ((float("nan"), float("nan")) if _dt.is_floating else
                      (np.iinfo(_out.as_numpy_dtype).max, np.iinfo(_out.as_numpy_dtype).min))
            for _op, _miss in (("min", lo), ("max", hi)):
                for _r in _e[_op]:
                    for _i in range(len(_r)):
                        if np.isnan(_r[_i]):
                            _r[_i] = _miss
        _vals = {op: np.array(_e[op], _out.as_numpy_dtype) for op in ("min", "max", "sum")}
        _vals.update(size=np.array(_e["size"], np.int64), mean=np.array(_e["mean"], np.float32),
                     var=np.array(_e["var"], np.float32))
        CASES.append(analyzer_case(
            f"testNumericAnalyzersWithCompositeInputs[{_name}-{_dname}]", _data,
            {"a": _make(_out)}, _composite_analyzers(_reduce), _vals))

# ------------------------------------------------------------------ testNumericMappersWithCompositeInputs
_SPARSE_INT = [{"idx0": [0, 1], "idx1": [0, 1], "val": np.array([0, 1], dtype=np.int64)},
               {"idx0": [1, 2], "idx1": [1, 3], "val": np.array([2, 3], dtype=np.int64)}]


def _sig(x):
    return 1 / (1 + np.exp(-x))


def _sparse_out(i0, i1, v01, vz, vmm):
    out = {}
    for n, v in (("scale_to_0_1", v01), ("scale_to_z_score", vz), ("scale_by_min_max", vmm)):
        out.update({f"{n}$sparse_indices_0": np.array(i0), f"{n}$sparse_indices_1": np.array(i1),
                    f"{n}$sparse_values": np.array(v, dtype=np.float32)})
    return out


_MAPPERS = [
    ("sparse", _SPARSE_INT, S(["idx0", "idx1"], "val", tf.int64, (3, 4)), False,
     [_sparse_out([0, 1], [0, 1], [0.0, 1.0 / 3.0],
                  [-1.5 / np.sqrt(1.25), -0.5 / np.sqrt(1.25)], [0.0, 1.0 / 3.0]),
      _sparse_out([1, 2], [1, 3], [2.0 / 3.0, 1.0],
                  [0.5 / np.sqrt(1.25), 1.5 / np.sqrt(1.25)], [2.0 / 3.0, 1.0])]),
    ("sparse_elementwise", _SPARSE_INT, S(["idx0", "idx1"], "val", tf.int64, (3, 4)), True,
     [_sparse_out([0, 1], [0, 1], [0.5, 0.0], [0, -1], [0.5, 0.0]),
      _sparse_out([1, 2], [1, 3], [1.0, _sig(3)], [1, 0], [1.0, _sig(3)])]),
    ("ragged", [{"val": [0.0, 2.0, 3.0], "row_lengths": [0, 3]},
                {"val": [3.0, 3.0, 1.0], "row_lengths": [3]}],
     R(tf.float32, value_key="val", partitions=[RL("row_lengths")]), False,
     [{"scale_by_min_max$ragged_values": [0.0, 0.6666667, 1.0],
       "scale_to_z_score$row_lengths_1": [0, 3], "scale_to_0_1$row_lengths_1": [0, 3],
       "scale_to_0_1$ragged_values": [0.0, 0.6666667, 1.0],
       "scale_to_z_score$ragged_values": [-1.7320509, 0.0, 0.86602545],
       "scale_by_min_max$row_lengths_1": [0, 3]},
      {"scale_to_0_1$row_lengths_1": [3], "scale_by_min_max$row_lengths_1": [3],
       "scale_to_z_score$ragged_values": [0.86602545, 0.86602545, -0.86602545],
       "scale_to_z_score$row_lengths_1": [3],
       "scale_to_0_1$ragged_values": [1.0, 1.0, 0.33333334],
       "scale_by_min_max$ragged_values": [1.0, 1.0, 0.33333334]}]),
    ("ragged_uniform", [{"val": [0.0, 2.0, 3.0, 11.0, 2.0, 7.0]}, {"val": [3.0, 1.0, 2.0]}],
     R(tf.float32, value_key="val", partitions=[UL(3)]), False,
     [{"scale_by_min_max$ragged_values": [0.0, 0.18181819, 0.27272728, 1.0, 0.18181819,
                                          0.6363636],
       "scale_to_z_score$ragged_values": [-1.0645443, -0.4464218, -0.13736054, 2.3351295,
                                          -0.4464218, 1.0988845],
       "scale_to_0_1$ragged_values": [0.0, 0.18181819, 0.27272728, 1.0, 0.18181819,
                                      0.6363636]},
      {"scale_to_0_1$ragged_values": [0.27272728, 0.09090909, 0.18181819],
       "scale_by_min_max$ragged_values": [0.27272728, 0.09090909, 0.18181819],
       "scale_to_z_score$ragged_values": [-0.13736054, -0.7554831, -0.4464218]}]),
    ("2d_ragged_uniform", [{"val": [0.0, 2.0, 3.0, 1.0, 2.0, 7.0], "row_lengths": [0, 2, 0, 1]},
                           {"val": [3.0, 3.0, 1.0, 2.0], "row_lengths": [2]}],
     R(tf.float32, value_key="val", partitions=[RL("row_lengths"), UL(2)],
       row_splits_dtype=tf.int64), False,
     [{"scale_by_min_max$ragged_values": [0.0, 0.285714, 0.428571, 0.142857, 0.285714, 1.0],
       "scale_by_min_max$row_lengths_1": [0, 2, 0, 1],
       "scale_to_z_score$row_lengths_1": [0, 2, 0, 1],
       "scale_to_z_score$ragged_values": [-1.3333334, -0.22222228, 0.33333328, -0.77777785,
                                          -0.22222228, 2.5555556],
       "scale_to_0_1$row_lengths_1": [0, 2, 0, 1],
       "scale_to_0_1$ragged_values": [0.0, 0.2857143, 0.42857143, 0.14285715, 0.2857143,
                                      1.0]},
      {"scale_to_0_1$ragged_values": [0.42857143, 0.42857143, 0.14285715, 0.2857143],
       "scale_to_0_1$row_lengths_1": [2],
       "scale_by_min_max$ragged_values": [0.42857143, 0.42857143, 0.14285715, 0.2857143],
       "scale_by_min_max$row_lengths_1": [2],
       "scale_to_z_score$ragged_values": [0.33333328, 0.33333328, -0.77777785, -0.22222228],
       "scale_to_z_score$row_lengths_1": [2]}]),
]


def _mappers(elementwise):
    def fn(inputs):
        a = inputs["a"]
        return {"scale_to_0_1": tft.scale_to_0_1(a, elementwise=elementwise),
                "scale_to_z_score": tft.scale_to_z_score(a, elementwise=elementwise),
                "scale_by_min_max": tft.scale_by_min_max(a, elementwise=elementwise)}

    return fn


for _name, _rows, _spec, _ew, _want in _MAPPERS:
    _add(Case(f"testNumericMappersWithCompositeInputs[{_name}]", _rows, {"a": _spec},
              _mappers(_ew), _want))


# ------------------------------------------------------------------ axis and ND analyzers
def _all_analyzers(reduce):
    def fn(inputs):
        a = inputs["a"]
        return {"min": tft.min(a, reduce_instance_dims=reduce),
                "max": tft.max(a, reduce_instance_dims=reduce),
                "sum": tft.sum(a, reduce_instance_dims=reduce),
                "size": tft.size(a, reduce_instance_dims=reduce),
                "mean": tft.mean(a, reduce_instance_dims=reduce),
                "var": tft.var(a, reduce_instance_dims=reduce)}

    return fn


CASES.append(analyzer_case(
    "testNumericAnalyzersWithInputsAndAxis", [{"a": [8, 9, 3, 4]}, {"a": [1, 2, 10, 11]}],
    {"a": F([4], tf.int64)}, _all_analyzers(False),
    {"min": np.array([1, 2, 3, 4], np.int64), "max": np.array([8, 9, 10, 11], np.int64),
     "sum": np.array([9, 11, 13, 15], np.int64), "size": np.array([2, 2, 2, 2], np.int64),
     "mean": np.array([4.5, 5.5, 6.5, 7.5], np.float32),
     "var": np.array([12.25, 12.25, 12.25, 12.25], np.float32)}))
CASES.append(analyzer_case(
    "testNumericAnalyzersWithNDInputsAndAxis",
    [{"a": [[8, 9], [3, 4]]}, {"a": [[1, 2], [10, 11]]}], {"a": F([2, 2], tf.int64)},
    _all_analyzers(False),
    {"min": np.array([[1, 2], [3, 4]], np.int64), "max": np.array([[8, 9], [10, 11]], np.int64),
     "sum": np.array([[9, 11], [13, 15]], np.int64),
     "size": np.array([[2, 2], [2, 2]], np.int64),
     "mean": np.array([[4.5, 5.5], [6.5, 7.5]], np.float32),
     "var": np.array([[12.25, 12.25], [12.25, 12.25]], np.float32)}))
CASES.append(analyzer_case(
    "testNumericAnalyzersWithShape1NDInputsAndAxis", [{"a": [[8, 9]]}, {"a": [[1, 2]]}],
    {"a": F([1, 2], tf.int64)}, _all_analyzers(False),
    {"min": np.array([[1, 2]], np.int64), "max": np.array([[8, 9]], np.int64),
     "sum": np.array([[9, 11]], np.int64), "size": np.array([[2, 2]], np.int64),
     "mean": np.array([[4.5, 5.5]], np.float32), "var": np.array([[12.25, 12.25]], np.float32)}))
CASES.append(analyzer_case(
    "testNumericAnalyzersWithNDInputs", [{"a": [[4, 5], [6, 7]]}, {"a": [[1, 2], [3, 4]]}],
    {"a": F([2, 2], tf.int64)}, _all_analyzers(True),
    {"min": np.array(1, np.int64), "max": np.array(7, np.int64), "sum": np.array(32, np.int64),
     "size": np.array(8, np.int64), "mean": np.array(4.0, np.float32),
     "var": np.array(3.5, np.float32)}))

for _dt in (tf.int64, tf.float32):
    for _sname, _shape in (("scalar", []), ("ND", [2, 3])):
        for _ename, _reduce in (("elementwise", False), ("not_elementwise", True)):
            _canon_dt = _canon(_dt)
            _oshape = [] if _reduce else _shape
            _np = _canon_dt.as_numpy_dtype
            CASES.append(analyzer_case(
                f"testNumericAnalyzersWithEmptyInputs[{_dt.name}-{_sname}-{_ename}]", [],
                {"a": F(_shape, _canon_dt)}, _all_analyzers(_reduce),
                {"min": np.full(_oshape, np.inf if _dt.is_floating else _canon_dt.max, _np),
                 "max": np.full(_oshape, -np.inf if _dt.is_floating else _canon_dt.min, _np),
                 "sum": np.full(_oshape, 0, _np), "size": np.full(_oshape, 0, np.int64),
                 "mean": np.full(_oshape, 0, np.float32), "var": np.full(_oshape, 0, np.float32)},
                test_data=[{"a": np.zeros(_shape, _dt.as_numpy_dtype)},
                           {"a": np.ones(_shape, _dt.as_numpy_dtype)}]))

CASES.append(analyzer_case(
    "testNumericMeanWithSparseTensorReduceFalseOverflow",
    [{"idx": [0, 1], "val": [1, 1]}, {"idx": [1, 3], "val": [2147483647, 3]}],
    {"sparse": S("idx", "val", tf.int64, 4)},
    lambda inputs: {"mean": tft.mean(tf.cast(inputs["sparse"], tf.int32), False)},
    {"mean": np.array([1.0, 1073741824.0, float("nan"), 3.0], np.float32)}))

# ------------------------------------------------------------------ TFXIO: 3-D sparse, ragged (as tf.Examples)
_add(Case("test3dSparseWithTFXIO",
          [{"x_idx0": [i0], "x_idx1": [i1], "x_val": [x]}
           for i0, i1, x in zip([0, 0, 1], [0, 0, 1], [0.0, 1.0, 2.0], strict=True)],
          {"x": S(["x_idx0", "x_idx1"], "x_val", tf.float32, [5, 5])}, lambda inputs: inputs,
          [{"x$sparse_values": x, "x$sparse_indices_0": i0, "x$sparse_indices_1": i1}
           for i0, i1, x in zip([0, 0, 1], [0, 0, 1], [0.0, 1.0, 2.0], strict=True)],
          {"x": S(["x$sparse_indices_0", "x$sparse_indices_1"], "x$sparse_values", tf.float32,
                  [5, 5], already_sorted=True)}),
     Case("testRaggedWithTFXIO",
          [{"x_val": [1, 2, 3], "x_len": [1, 0, 2], "y_val": [1, 2], "y_len": [1]},
           {"x_val": [], "x_len": [0], "y_val": [3, 4, 5, 6], "y_len": [1, 0, 1]}],
          {"x": R(tf.int64, value_key="x_val", partitions=[RL("x_len")],
                  row_splits_dtype=tf.int64),
           "y": R(tf.float32, value_key="y_val", partitions=[RL("y_len"), UL(2)],
                  row_splits_dtype=tf.int64)},
          lambda inputs: {"x_ones": tf.ones_like(inputs["x"]),
                          "y_ones": tf.ones_like(inputs["y"])},
          [{"x_ones$ragged_values": [1, 1, 1], "x_ones$row_lengths_1": [1, 0, 2],
            "y_ones$ragged_values": [1, 1], "y_ones$row_lengths_1": [1]},
           {"x_ones$ragged_values": [], "x_ones$row_lengths_1": [0],
            "y_ones$ragged_values": [1, 1, 1, 1], "y_ones$row_lengths_1": [1, 0, 1]}],
          {"x_ones": R(tf.int64, value_key="x_ones$ragged_values",
                       partitions=[RL("x_ones$row_lengths_1")]),
           "y_ones": R(tf.float32, value_key="y_ones$ragged_values",
                       partitions=[RL("y_ones$row_lengths_1"), UL(2)])}))


# ------------------------------------------------------------------ testModifyInputs
def _modify(inputs):
    inputs["x_center"] = inputs["x"] - tft.mean(inputs["x"])
    return inputs


_add(Case("testModifyInputs", [{"x": v} for v in (1, 2, 3, 4, 5)], {"x": F([], tf.float32)},
          _modify, [{"x": v, "x_center": v - 3} for v in (1, 2, 3, 4, 5)]))

h.assign_ids(CASES)
preprocessing_fn = h.combined(CASES)


# ------------------------------------------------------------------ the tests
@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("upstream_impl")
    (root / "impl_fn.py").write_text(
        "from tests.graphs.test_tft_upstream_impl import preprocessing_fn  # noqa: F401\n")
    return h.once(__name__, lambda: h.run(CASES, root, "impl_fn:preprocessing_fn", root))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_upstream_case(results, case):
    h.check(case, results)


ERRORS = {  # upstream cases that expect an error, run on Baton's engine (no data needed)
    "testScaleMinMaxError": (lambda inputs: {"x_scaled": tft.scale_by_min_max(inputs["x"], 2, 1)},
                             ValueError, "output_min must be less than output_max"),
    "test_preprocessing_fn_returns_wrong_type": (
        lambda inputs: inputs["x"], ValueError,
        r"A `preprocessing_fn` must return a Dict\[str, Union\[tf.Tensor, tf.SparseTensor, "
        r"tf.RaggedTensor\]\]. Got: .*Tensor"),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_upstream_error_case(name):
    from baton.graphs.tft import engine as tft_engine
    from baton.graphs.tft import module as tft_module

    fn, error, message = ERRORS[name]
    raw = [("x", "float32", ())]
    specs = tft_engine.raw_specs(raw)
    label = {"name": "label", "dtype": "float32", "task": "regression"}
    with pytest.raises(error, match=message):
        resolved = tft_engine.analyze(fn, specs, lambda: [{"x": np.ones(2, np.float32)}])
        tft_module.build_module(fn, raw, label, resolved)


def test_every_upstream_test_is_ported_or_listed():
    """Each test method of impl_test.py is a case here or in LEFT_OUT with its reason."""
    ported = {c.name.split("[")[0] for c in CASES} | set(ERRORS)
    upstream = set(UPSTREAM_TESTS)
    missing = upstream - ported - set(LEFT_OUT)
    assert not missing, f"neither ported nor listed: {sorted(missing)}"
    assert not set(LEFT_OUT) & ported


UPSTREAM_TESTS = (  # the test methods of tensorflow_transform/beam/impl_test.py (1.21)
    "testApplySavedModelSingleInput", "testApplySavedModelWithHashTable",
    "testApplySavedModelMultiInputs", "testApplyFunctionWithCheckpoint",
    "testMultipleLevelsOfAnalyzers", "testRawFeedDictInput", "testTransformWithExcludedOutputs",
    "testMapWithCond", "testPyFuncs", "testAssertsNoReturnPyFunc",
    "testWithMoreThanDesiredBatchSize", "testWithUnicode", "testNpArrayInput",
    "testScaleUnitInterval", "testScaleUnitIntervalPerKey", "testScaleMinMax",
    "testScaleMinMaxPerKey", "testScalePerKeySparse", "testScaleMinMaxSparsePerKey",
    "testScalePerKeyRagged", "testScaleMinMaxConstant", "testScaleMinMaxConstantElementwise",
    "testScaleMinMaxError", "testScaleMinMaxWithEmptyInputs", "testScaleToZScore",
    "testScaleToZScoreSparse", "testScaleToZScoreSparsePerDenseKey", "testScaleToZScorePerKey",
    "testScaleToZScorePerKeyElementwise", "testScaleToZScoreSparsePerKey",
    "testScaleToZScoreWithEmptyInputs", "testMeanAndVar", "testMeanAndVarPerKey",
    "testMeanAndVarPerKeyElementwise", "testMinAndMaxPerKey", "testPerKeyWithOOVKeys",
    "testCountPerKey", "testHistograms", "testProbCategoricalInt", "testProbCategorical",
    "testProbTenBoundaries", "testProbUnknownBoundaries",
    "testNumericAnalyzersWithScalarInputs", "testNumericAnalyzersWithCompositeInputs",
    "testNumericMappersWithCompositeInputs", "testNumericAnalyzersWithInputsAndAxis",
    "testNumericAnalyzersWithNDInputsAndAxis", "testNumericAnalyzersWithShape1NDInputsAndAxis",
    "testNumericAnalyzersWithNDInputs", "testNumericAnalyzersWithEmptyInputs",
    "testNumericMeanWithSparseTensorReduceFalseOverflow", "testStringToTFIDF",
    "testTFIDFNoData", "testStringToTFIDFEmptyDoc", "testIntToTFIDF",
    "testIntToTFIDFWithoutSmoothing", "testTFIDFWithOOV", "testTFIDFWithNegatives",
    "testStringToDFIDFExperimental", "testDFIDFExperimentalNoData",
    "testStringToDFIDFExperimentalEmptyDoc", "testDFIDFExperimentalWithOOV",
    "testIntToDFIDFExpeirmental", "testDFIDFExperimentalWithNegatives",
    "testCovarianceTwoDimensions", "testCovarianceOneDimension",
    "testCovarianceOneDimensionWithEmptyInputs", "testPCAThreeToTwoDimensions",
    "testPCAThreeToTwoDimensionsWithEmptyInputs", "testPTransformAnalyzer",
    "testPTransformAnalyzerMultiDimOutput", "testSavedModelWithAnnotations",
    "testSavedModelWithGlobalAnnotations", "testPipelineAPICounters", "testNumBytesCounter",
    "testHandleBatchError", "testPassthroughKeys", "test3dSparseWithTFXIO",
    "testRaggedWithTFXIO", "testPipelineWithoutAutomaterialization", "testModifyInputs",
    "testEmptySchema", "testLoadKerasModelInPreprocessingFn",
    "test_non_deterministic_preprocessing_fn_without_name",
    "test_non_deterministic_preprocessing_fn_with_name",
    "test_preprocessing_fn_returns_wrong_type",
)
_ = math
