"""TF Serving's util/json_tensor_test.cc, ported: every case, upstream's JSON, expected
protos and error substrings kept.

Upstream's functions are mirrored by small adapters over the code that serves REST here
(json_parse.loads, rest_json, examples, json_write, tensor_proto): the request JSON goes
through exactly what `baton serve` runs on a :predict/:classify/:regress body, and the
feeds it builds are written as the PredictRequest TensorProtos upstream compares; outputs
(tensors made by TensorFlow from upstream's TensorProto texts) are written as the
response JSON upstream compares. The same rules over HTTP, against models, are in
test_json_tensor_server.py.
"""

from __future__ import annotations

import json
import math
import sys

import pytest
from google.protobuf import text_format
from tensorflow.core.framework import tensor_pb2
from tensorflow.core.protobuf import meta_graph_pb2
from tensorflow_serving.apis import (
    classification_pb2,
    predict_pb2,
    regression_pb2,
)

from baton.serving import examples
from baton.serving.conventions import PREDICT_METHOD_NAME
from baton.serving.http import error_body
from baton.serving.json_write import classify_json, predict_json, regress_json
from baton.serving.rest_json import feeds_from_json, loads, request_signature_name
from baton.serving.servable import Signature, spec_of
from baton.serving.status import Code, ServingError
from baton.serving.tensor_proto import from_ndarray

ROW, COLUMNAR = "kRow", "kColumnar"


# -- adapters: upstream's API over Baton's REST code ----------------------------------------

def fill_predict_request_from_json(text: str, infomap: dict[str, str]):
    """FillPredictRequestFromJson: (PredictRequest, format); raises ServingError."""
    body = loads(text.encode())
    name = request_signature_name(body)
    inputs = {k: spec_of(k, text_format.Parse(v, meta_graph_pb2.TensorInfo()))
              for k, v in infomap.items()}
    sig = Signature(name=name, method_name=PREDICT_METHOD_NAME, inputs=inputs, outputs={},
                    fn=None)
    feeds, row = feeds_from_json(body, sig)
    req = predict_pb2.PredictRequest()
    if name:
        req.model_spec.signature_name = name
    for k, arr in feeds.items():
        from_ndarray(arr, req.inputs[k])
        req.inputs[k].tensor_shape.SetInParent()  # upstream always sets it, scalars too
        req.inputs[k].dtype = text_format.Parse(infomap[k], meta_graph_pb2.TensorInfo()).dtype
    return req, ROW if row else COLUMNAR


def make_json_from_tensors(tensormap: dict[str, str], fmt: str) -> str:
    """MakeJsonFromTensors over TensorFlow's own TensorProto -> ndarray conversion."""
    import tensorflow as tf

    outputs = {k: tf.make_ndarray(text_format.Parse(v, tensor_pb2.TensorProto()))
               for k, v in tensormap.items()}
    return predict_json(outputs, fmt == ROW).decode()


def fill_classify_regress_request_from_json(text: str, request):
    """FillClassificationRequestFromJson / FillRegressionRequestFromJson."""
    from tensorflow.core.example import example_pb2

    body = loads(text.encode())
    name = request_signature_name(body)
    if name:
        request.model_spec.signature_name = name
    context, exs = examples.example_list_from_json(body)
    if context is not None:
        target = request.input.example_list_with_context
        target.context.ParseFromString(context)
    else:
        target = request.input.example_list
    for e in exs:
        target.examples.append(example_pb2.Example.FromString(e))
    return request


def equals_proto(message, expected_text: str) -> None:
    expected = type(message)()
    text_format.Parse(expected_text, expected)
    assert message.SerializeToString(deterministic=True) == expected.SerializeToString(
        deterministic=True), f"got:\n{message}\nexpected:\n{expected}"


def error_of(fn) -> ServingError:
    with pytest.raises(ServingError) as e:
        fn()
    return e.value


def compare_json(got: str, expected: str) -> None:
    """CompareJson: the same documents (numbers by value)."""
    assert json.loads(got) == json.loads(expected)


def compare_json_all_values_as_strings(got: str, expected: str) -> None:
    """CompareJsonAllValuesAsStrings: numbers compared as written."""
    raw = {"parse_float": str, "parse_int": str, "parse_constant": str}
    assert json.loads(got, **raw) == json.loads(expected, **raw)


INT32 = {"default": "dtype: DT_INT32"}


# -- JSON -> PredictRequest ------------------------------------------------------------------

def test_SingleUnnamedTensor():
    req, fmt = fill_predict_request_from_json('{"instances": [[1,2],[3,4],[5,6]]}', INT32)
    assert len(req.inputs) == 1 and fmt == ROW
    equals_proto(req.inputs["default"], """
        dtype: DT_INT32
        tensor_shape { dim { size: 3 } dim { size: 2 } }
        int_val: 1 int_val: 2 int_val: 3 int_val: 4 int_val: 5 int_val: 6""")


def test_DeeplyNestedWellFormed():
    json_req = '{"instances":[1], "nested":' + "[" * 500000 + "]" * 500000 + "}"
    req, _ = fill_predict_request_from_json(json_req, INT32)
    assert len(req.inputs) == 1


def test_DeeplyNestedMalformed():
    json_req = '{"signature_name":' + "[" * 500000 + "]" * 500000 + "}"
    e = error_of(lambda: fill_predict_request_from_json(json_req, INT32))
    assert e.code == Code.INVALID_ARGUMENT and "key must be a string value" in e.message


@pytest.mark.parametrize("text, dtype, expected", [
    ('{"instances": [1, 2.0, 3, 4, 5.003, 0.007, 0.0]}', "DT_FLOAT",
     "float_val: 1 float_val: 2.0 float_val: 3 float_val: 4 float_val: 5.003 "
     "float_val: 0.007 float_val: 0.0"),
    ('{"instances": [1.0, 2, 3, 4, 0.662, 0, 0.0]}', "DT_DOUBLE",
     "double_val: 1.0 double_val: 2 double_val: 3 double_val: 4 double_val: 0.662 "
     "double_val: 0 double_val: 0.0"),
], ids=["MixedInputForFloatTensor", "MixedInputForDoubleTensor"])
def test_MixedInput(text, dtype, expected):
    req, fmt = fill_predict_request_from_json(text, {"default": f"dtype: {dtype}"})
    assert fmt == ROW
    equals_proto(req.inputs["default"],
                 f"dtype: {dtype} tensor_shape {{ dim {{ size: 7 }} }} {expected}")


def test_FloatTensorWithPrecisionLoss():
    for text in ('{"instances": [1435774380]}', '{"instances": [1435774380.0]}'):
        req, fmt = fill_predict_request_from_json(text, {"default": "dtype: DT_FLOAT"})
        assert fmt == ROW
        equals_proto(req.inputs["default"], """
            dtype: DT_FLOAT tensor_shape { dim { size: 1 } } float_val: 1435774380""")


@pytest.mark.parametrize("value, expected", [
    (sys.float_info.max, "inf"), (-sys.float_info.max, "-inf"),  # ExceedsMaxReturnsInf
    (sys.float_info.min, "0"), (-sys.float_info.min, "-0"),  # ExceedsMinReturnsZero
])
def test_FloatTensorThatExceedsMaxReturnsInf_and_MinReturnsZero(value, expected):
    req, _ = fill_predict_request_from_json(f'{{ "instances": [{value!r}] }}',
                                            {"default": "dtype: DT_FLOAT"})
    equals_proto(req.inputs["default"], f"""
        dtype: DT_FLOAT tensor_shape {{ dim {{ size: 1 }} }} float_val: {expected}""")


def test_SingleUnnamedTensorWithSignature():
    req, fmt = fill_predict_request_from_json(
        '{"signature_name": "predict_images", "instances": [[1,2]]}', INT32)
    assert req.model_spec.signature_name == "predict_images" and fmt == ROW
    equals_proto(req.inputs["default"], """
        dtype: DT_INT32 tensor_shape { dim { size: 1 } dim { size: 2 } }
        int_val: 1 int_val: 2""")


def test_TensorFromNonNullTerminatedBuffer():
    jsonstr = '{"instances": [[1,2],[3,4],[5,6]]}X'
    req, _ = fill_predict_request_from_json(jsonstr[:-1], INT32)
    equals_proto(req.inputs["default"], """
        dtype: DT_INT32 tensor_shape { dim { size: 3 } dim { size: 2 } }
        int_val: 1 int_val: 2 int_val: 3 int_val: 4 int_val: 5 int_val: 6""")


STRING = {"default": "dtype: DT_STRING"}


def test_SingleUnnamedTensorBase64Scalars():
    req, fmt = fill_predict_request_from_json(
        '{"instances": [ { "b64" : "aGVsbG8=" }, { "b64": "d29ybGQ=" } ]}', STRING)
    assert fmt == ROW
    equals_proto(req.inputs["default"], """
        dtype: DT_STRING tensor_shape { dim { size: 2 } }
        string_val: "hello" string_val: "world" """)


def test_SingleUnnamedTensorBase64Lists():
    req, _ = fill_predict_request_from_json(
        '{"instances": [ [{ "b64" : "aGVsbG8=" }], [{ "b64": "d29ybGQ=" }] ]}', STRING)
    equals_proto(req.inputs["default"], """
        dtype: DT_STRING tensor_shape { dim { size: 2 } dim { size: 1 } }
        string_val: "hello" string_val: "world" """)


def test_SingleNamedTensorBase64():
    req, _ = fill_predict_request_from_json("""{"instances": [
        {"default": [ [{ "b64" : "aGVsbG8=" }], [{ "b64": "d29ybGQ=" }] ]}]}""", STRING)
    equals_proto(req.inputs["default"], """
        dtype: DT_STRING tensor_shape { dim { size: 1 } dim { size: 2 } dim { size: 1 } }
        string_val: "hello" string_val: "world" """)


FOUR = {"int_tensor": "dtype: DT_INT32", "str_tensor": "dtype: DT_STRING",
        "float_tensor": "dtype: DT_FLOAT", "dbl_tensor": "dtype: DT_DOUBLE"}


def test_MultipleNamedTensor():
    req, fmt = fill_predict_request_from_json("""{"instances": [
        {"int_tensor": [[1,2],[3,4],[5,6]], "str_tensor": ["foo", "bar"],
         "float_tensor": [1.0, NaN], "dbl_tensor": [NaN]},
        {"int_tensor": [[7,8],[9,0],[1,2]], "str_tensor": ["baz", "bat"],
         "float_tensor": [2.0, Infinity], "dbl_tensor": [2.0]}]}""", FOUR)
    assert len(req.inputs) == 4 and fmt == ROW
    equals_proto(req.inputs["int_tensor"], """
        dtype: DT_INT32 tensor_shape { dim { size: 2 } dim { size: 3 } dim { size: 2 } }
        int_val: 1 int_val: 2 int_val: 3 int_val: 4 int_val: 5 int_val: 6
        int_val: 7 int_val: 8 int_val: 9 int_val: 0 int_val: 1 int_val: 2""")
    equals_proto(req.inputs["str_tensor"], """
        dtype: DT_STRING tensor_shape { dim { size: 2 } dim { size: 2 } }
        string_val: "foo" string_val: "bar" string_val: "baz" string_val: "bat" """)
    equals_proto(req.inputs["float_tensor"], """
        dtype: DT_FLOAT tensor_shape { dim { size: 2 } dim { size: 2 } }
        float_val: 1.0 float_val: NaN float_val: 2.0 float_val: Infinity""")
    equals_proto(req.inputs["dbl_tensor"], """
        dtype: DT_DOUBLE tensor_shape { dim { size: 2 } dim { size: 1 } }
        double_val: NaN double_val: 2.0""")


INT_123 = """dtype: DT_INT32 tensor_shape { dim { size: 1 } dim { size: 3 } dim { size: 2 } }
    int_val: 1 int_val: 2 int_val: 3 int_val: 4 int_val: 5 int_val: 6"""


def test_SingleUnnamedTensorColumnarFormat():
    infomap = {"int_tensor": "dtype: DT_INT32"}
    for text in ('{"inputs": {"int_tensor": [[[1,2],[3,4],[5,6]]]}}',
                 '{"inputs": [[[1,2],[3,4],[5,6]]]}'):  # skip naming the input
        req, fmt = fill_predict_request_from_json(text, infomap)
        assert len(req.inputs) == 1 and fmt == COLUMNAR
        equals_proto(req.inputs["int_tensor"], INT_123)


def test_MultipleNamedTensorColumnarFormat():
    req, fmt = fill_predict_request_from_json("""{"inputs": {
        "int_tensor": [[[1,2],[3,4],[5,6]]], "str_tensor": ["foo", "bar"],
        "bin_tensor": { "b64" : "aGVsbG8=" }}}""",
        {"int_tensor": "dtype: DT_INT32", "str_tensor": "dtype: DT_STRING",
         "bin_tensor": "dtype: DT_STRING"})
    assert len(req.inputs) == 3 and fmt == COLUMNAR
    equals_proto(req.inputs["int_tensor"], INT_123)
    equals_proto(req.inputs["str_tensor"], """
        dtype: DT_STRING tensor_shape { dim { size: 2 } }
        string_val: "foo" string_val: "bar" """)
    equals_proto(req.inputs["bin_tensor"], """
        dtype: DT_STRING tensor_shape {} string_val: "hello" """)


@pytest.mark.parametrize("text, needle", [
    ("", "document is empty"),
    ('{"signature_name": 5, "instances": [[1,2],[3,4],[5,6,7]]}', "must be a string value"),
    ('{"instances": [[1,2],[3,4],[5,6,7]], "inputs": [[1,2],[3,4],[5,6,7]]}',
     "Not formatted correctly"),
    ('{"instances": [[1,2],[3,4],[5,6,7]]}', "Expecting tensor size"),
    ('{"instances": [[1,2],[3,4],[[5,6]]]}', "Expecting shape"),
    ('{"instances": [1, [1]]}', "Expecting shape"),
    ('{"instances": [[1,2],["a", "b"]]}', "not of expected type"),
])
def test_SingleUnnamedTensorErrors(text, needle):
    e = error_of(lambda: fill_predict_request_from_json(text, INT32))
    assert e.code == Code.INVALID_ARGUMENT and needle in e.message


TWO = {"int_tensor": "dtype: DT_INT32", "str_tensor": "dtype: DT_STRING"}


@pytest.mark.parametrize("text, infomap, needle", [
    # Different shapes across int_tensor instances.
    ("""{"instances": [{"int_tensor": [[1,2],[3,4],[5,6]], "str_tensor": ["foo", "bar"]},
                       {"int_tensor": [[[7,8],[9,0],[1,2]]], "str_tensor": ["baz", "bat"]}]}""",
     TWO, "Expecting shape"),
    # Different size/length across int_tensor instances.
    ("""{"instances": [{"int_tensor": [[1,2],[3,4],[5,6],[7,8]], "str_tensor": ["foo", "bar"]},
                       {"int_tensor": [[7,8],[9,0],[1,2]], "str_tensor": ["baz", "bat"]}]}""",
     TWO, "Expecting tensor size"),
    # Mix of object and value/list in "instances" list: the first is an object.
    ("""{"instances": [{"int_tensor": [[1,2],[3,4],[5,6]], "str_tensor": ["foo", "bar"]},
                       [1, 20, 30],
                       {"int_tensor": [[[7,8],[9,0],[1,2]]], "str_tensor": ["baz", "bat"]}]}""",
     TWO, "Expecting object but got list"),
    # The first is a list.
    ("""{"instances": [["baz", "bar"], {"str_tensor": ["baz", "bat"]}]}""",
     {"str_tensor": "dtype: DT_STRING"}, "Expecting value/list but got object"),
])
def test_MultipleNamedTensorErrors(text, infomap, needle):
    e = error_of(lambda: fill_predict_request_from_json(text, infomap))
    assert e.code == Code.INVALID_ARGUMENT and needle in e.message


# -- tensors -> JSON -------------------------------------------------------------------------

INT_2x3x2 = """dtype: DT_INT32 tensor_shape { dim { size: 2 } dim { size: 3 } dim { size: 2 } }
    int_val: 1 int_val: 2 int_val: 3 int_val: 4 int_val: 5 int_val: 6
    int_val: 7 int_val: 8 int_val: 9 int_val: 0 int_val: 1 int_val: 2"""


def test_FromJsonSingleTensor():
    tensormap = {"int_tensor": INT_2x3x2}
    compare_json(make_json_from_tensors(tensormap, ROW), """{
        "predictions": [[[1, 2], [3, 4], [5, 6]], [[7, 8], [9, 0], [1, 2]]]}""")
    compare_json(make_json_from_tensors(tensormap, COLUMNAR), """{
        "outputs": [[[1, 2], [3, 4], [5, 6]], [[7, 8], [9, 0], [1, 2]]]}""")


def test_FromJsonSingleScalarTensor():
    tensormap = {"int_tensor": """dtype: DT_INT32 tensor_shape { dim { size: 5 } }
        int_val: 1 int_val: 2 int_val: 3 int_val: 4 int_val: 5"""}
    compare_json(make_json_from_tensors(tensormap, ROW), '{ "predictions": [1, 2, 3, 4, 5] }')
    compare_json(make_json_from_tensors(tensormap, COLUMNAR), '{ "outputs": [1, 2, 3, 4, 5] }')


BYTES_2x2 = """dtype: DT_STRING tensor_shape { dim { size: 2 } dim { size: 2 } }
    string_val: "hello" string_val: "world" string_val: "tf" string_val: "serving" """


def test_FromJsonSingleBytesTensor():
    compare_json(make_json_from_tensors({"str_tensor_bytes": BYTES_2x2}, ROW), """{
        "predictions": [
          [{"b64": "aGVsbG8="}, {"b64": "d29ybGQ="}],
          [{"b64": "dGY="}, {"b64": "c2VydmluZw=="}]]}""")


def test_FromJsonSingleFloatTensorSixDigitPrecision():
    tensormap = {"float_tensor": """dtype: DT_FLOAT
        tensor_shape { dim { size: 2 } dim { size: 3 } }
        float_val: 9000000 float_val: 999999 float_val: 0.50000 float_val: .0003
        float_val: .00003 float_val: 555557.5"""}
    compare_json_all_values_as_strings(make_json_from_tensors(tensormap, ROW), """{
        "predictions": [[9e+06, 999999.0, 0.5], [0.0003, 3e-05, 555557.5]]}""")


def test_FromJsonSingleFloatTensorNonFinite():
    tensormap = {"float_tensor": """dtype: DT_FLOAT
        tensor_shape { dim { size: 2 } dim { size: 2 } }
        float_val: NaN float_val: Infinity float_val: 3 float_val: -Infinity"""}
    compare_json_all_values_as_strings(make_json_from_tensors(tensormap, ROW), """{
        "predictions": [[NaN, Infinity], [3.0, -Infinity]]}""")


def test_FromJsonSingleTensorErrors():
    e = error_of(lambda: predict_json({}, True))
    assert e.code == Code.INVALID_ARGUMENT and "empty tensor map" in e.message
    e = error_of(lambda: make_json_from_tensors({"tensor": """dtype: DT_COMPLEX64
        tensor_shape { dim { size: 2 } } scomplex_val: 1.0 scomplex_val: 2.0"""}, ROW))
    assert e.code == Code.INVALID_ARGUMENT and "tensor type: complex64" in e.message
    e = error_of(lambda: make_json_from_tensors({"tensor": "dtype: DT_INT32 int_val: 1"}, ROW))
    assert e.code == Code.INVALID_ARGUMENT and "no shape information" in e.message


def test_FromJsonMultipleNamedTensors():
    tensormap = {
        "int_tensor": INT_2x3x2,
        "str_tensor": """dtype: DT_STRING tensor_shape { dim { size: 2 } dim { size: 2 } }
            string_val: "foo" string_val: "bar" string_val: "baz" string_val: "bat" """,
        "float_tensor": """dtype: DT_FLOAT tensor_shape { dim { size: 2 } dim { size: 1 } }
            float_val: 1.0 float_val: 2.0""",
        "double_scalar_tensor": """dtype: DT_DOUBLE tensor_shape { dim { size: 2 } }
            double_val: 8.0 double_val: 9.0""",
        "str_tensor_bytes": BYTES_2x2,
    }
    compare_json(make_json_from_tensors(tensormap, ROW), """{
    "predictions": [
      {
        "double_scalar_tensor": 8.0,
        "float_tensor": [1.0],
        "int_tensor": [[1, 2], [3, 4], [5, 6]],
        "str_tensor": ["foo", "bar"],
        "str_tensor_bytes": [ {"b64": "aGVsbG8="}, {"b64": "d29ybGQ="} ]
      },
      {
        "double_scalar_tensor": 9.0,
        "float_tensor": [2.0],
        "int_tensor": [[7, 8], [9, 0], [1, 2]],
        "str_tensor": ["baz", "bat"],
        "str_tensor_bytes": [ {"b64": "dGY="}, {"b64": "c2VydmluZw=="} ]
      }
    ]}""")
    compare_json(make_json_from_tensors(tensormap, COLUMNAR), """{
    "outputs": {
      "double_scalar_tensor": [8.0, 9.0],
      "float_tensor": [[1.0], [2.0]],
      "int_tensor": [[[1, 2], [3, 4], [5, 6]], [[7, 8], [9, 0], [1, 2]]],
      "str_tensor": [["foo", "bar"], ["baz", "bat"]],
      "str_tensor_bytes": [[{"b64": "aGVsbG8="}, {"b64": "d29ybGQ="}],
                           [{"b64": "dGY="}, {"b64": "c2VydmluZw=="}]]
    }}""")


def test_FromJsonMultipleNamedTensorsErrors():
    tensormap = {
        "int_tensor": """dtype: DT_INT32 tensor_shape { dim { size: 2 } dim { size: 3 } }
            int_val: 1 int_val: 2 int_val: 3 int_val: 4 int_val: 5 int_val: 6""",
        "str_tensor": """dtype: DT_STRING tensor_shape { dim { size: 1 } dim { size: 3 } }
            string_val: "foo" string_val: "bar" string_val: "baz" """}
    e = error_of(lambda: make_json_from_tensors(tensormap, ROW))
    assert e.code == Code.INVALID_ARGUMENT and "inconsistent batch size" in e.message


def test_FromJsonSingleZeroBatchTensor():
    tensormap = {"int_tensor": "dtype: DT_INT32 tensor_shape { dim { size: 0 } dim { size: 2 } }"}
    compare_json(make_json_from_tensors(tensormap, ROW), '{ "predictions": [] }')


def test_FromJsonMultipleZeroBatchTensors():
    tensormap = {
        "str_tensor": """dtype: DT_STRING
            tensor_shape { dim { size: 0 } dim { size: 1 } dim { size: 2 } }""",
        "float_tensor": """dtype: DT_FLOAT
            tensor_shape { dim { size: 0 } dim { size: 3 } dim { size: 4 } }"""}
    compare_json(make_json_from_tensors(tensormap, ROW), '{ "predictions": [] }')


def test_FromJsonMultipleZeroBatchTensorsErrors():
    tensormap = {
        "int_tensor": "dtype: DT_INT32 tensor_shape { dim { size: 0 } dim { size: 2 } }",
        "str_tensor": """dtype: DT_STRING tensor_shape { dim { size: 1 } dim { size: 2 } }
            string_val: "foo" string_val: "bar" """}
    e = error_of(lambda: make_json_from_tensors(tensormap, ROW))
    assert e.code == Code.INVALID_ARGUMENT and "inconsistent batch size" in e.message


# -- classify / regress requests ---------------------------------------------------------------

REQUEST_TYPES = [classification_pb2.ClassificationRequest, regression_pb2.RegressionRequest]


@pytest.mark.parametrize("request_type", REQUEST_TYPES)
def test_RequestNoContext(request_type):
    req = fill_classify_regress_request_from_json("""{"examples": [
        {"names": [ "foo", "bar" ], "ratings": [ 8.0, 9.0 ], "age": 20},
        {"names": [ "baz" ], "ratings": 6.0}]}""", request_type())
    equals_proto(req, """
    input { example_list {
        examples { features {
            feature { key: "names" value { bytes_list { value: "foo" value: "bar" }}}
            feature { key: "ratings" value { float_list { value: 8.0 value: 9.0 }}}
            feature { key: "age" value { int64_list { value: 20 }}} } }
        examples { features {
            feature { key: "names" value { bytes_list { value: "baz" }}}
            feature { key: "ratings" value { float_list { value: 6.0 }}} } } } }""")


@pytest.mark.parametrize("request_type", REQUEST_TYPES)
def test_RequestWithContextAndSignature(request_type):
    req = fill_classify_regress_request_from_json("""{
      "signature_name": "custom_signture",
      "context": {"query": "pizza", "location": [ "sfo" ]},
      "examples": [
        {"names": [ "foo", "bar" ], "ratings": [ 8.0, 9.0, NaN, Infinity ], "age": 20},
        {"names": [ "baz", { "b64": "aGVsbG8=" } ], "ratings": 6.0,
         "intboolmix": [ 1, true, false ]},
        {"names": "bar", "ratings": -Infinity}]}""", request_type())
    equals_proto(req, """
    model_spec { signature_name: "custom_signture" }
    input { example_list_with_context {
        context { features {
            feature { key: "query" value { bytes_list { value: "pizza" }}}
            feature { key: "location" value { bytes_list { value: "sfo" }}} } }
        examples { features {
            feature { key: "names" value { bytes_list { value: "foo" value: "bar" }}}
            feature { key: "ratings" value { float_list {
                value: 8.0 value: 9.0 value: NaN value: Infinity }}}
            feature { key: "age" value { int64_list { value: 20 }}} } }
        examples { features {
            feature { key: "names" value { bytes_list { value: "baz" value: "hello" }}}
            feature { key: "ratings" value { float_list { value: 6.0 }}}
            feature { key: "intboolmix" value { int64_list { value: 1 value: 1 value: 0 }}} } }
        examples { features {
            feature { key: "names" value { bytes_list { value: "bar" }}}
            feature { key: "ratings" value { float_list { value: -Infinity }}} } } } }""")


@pytest.mark.parametrize("request_type", REQUEST_TYPES)
@pytest.mark.parametrize("text, needle", [
    ('{"signature_name": [ "hello" ], "examples": [ { "names": [ "foo", "bar" ] } ]}',
     "'signature_name' key must be a string"),
    ('{"context": [ { "names": [ "foo", "bar" ] } ]}', "Example must be JSON object"),
    ('{"examples": { "names": [ "foo", "bar" ] }}', "list/array"),
    ('{"examples": [ [ { "names": [ "foo", "bar" ] } ] ]}', "Example must be JSON object"),
    ('{"examples": [ { "names": [ 10, null ] } ]}',
     "names has element with unexpected JSON type: Null"),
    ('{"examples": [ { "names": [ 10, 10.0 ] } ]}', "feature: names expecting type: int64"),
    ('{"examples": [ { "names": [ 10, { "test": 10 } ] } ]}',
     "names has element with unexpected JSON type: Object"),
    ('{"examples": [ { "names": [ [10], 20 ] } ]}',
     "names has element with unexpected JSON type: Array"),
    ('{"examples": [ { "names": [ 20, 18446744073709551603 ] } ]}',
     "Only int64_t is supported"),
])
def test_JsonErrors(request_type, text, needle):
    e = error_of(lambda: fill_classify_regress_request_from_json(text, request_type()))
    assert e.code == Code.INVALID_ARGUMENT and needle in e.message


# -- classify / regress results ----------------------------------------------------------------

def test_JsonFromClassificationResult():
    rows = [[("car", 0.2), ("bike", 0.7), ("bus", 0.1)],
            [("car", 0.7), ("bike", 0.1), ("bus", 0.2)]]
    compare_json(classify_json(rows).decode(), """{
        "results": [
          [ ["car", 0.2], ["bike", 0.7], ["bus", 0.1] ],
          [ ["car", 0.7], ["bike", 0.1], ["bus", 0.2] ]]}""")


def test_JsonFromRegressionResult():
    compare_json(regress_json([0.2, 0.9, 1.0]).decode(), '{ "results": [ 0.2, 0.9, 1.0 ] }')


def test_JsonFromRegressionResultWithNonFinite():
    compare_json_all_values_as_strings(
        regress_json([0.2, math.inf, 1.0, -math.inf, math.nan]).decode(),
        '{ "results": [ 0.2, Infinity, 1.0, -Infinity, NaN ] }')


def test_JsonFromResultErrors():
    e = error_of(lambda: classify_json([]))
    assert e.code == Code.INVALID_ARGUMENT and "empty ClassificationResults" in e.message
    e = error_of(lambda: regress_json([]))
    assert e.code == Code.INVALID_ARGUMENT and "empty RegressionResults" in e.message


def test_MakeJsonFromStatus_StatusError():
    compare_json(error_body('Bad key: "key"').decode(), '{ "error": "Bad key: \\"key\\"" }')
    compare_json(error_body("Bad key: 'key'").decode(), """{ "error": "Bad key: 'key'" }""")
