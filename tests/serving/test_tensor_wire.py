"""The hand-written TensorProto / PredictRequest / PredictResponse codecs against protobuf's.

Every dtype, shape and value form: where tensor_wire handles a tensor, its result must be
what tensor_proto (through the protobuf message API) gives, byte for byte or value for
value; where it does not, it must say so (None), never guess.
"""

from __future__ import annotations

import numpy as np
import pytest
from tensorflow.core.framework import tensor_pb2
from tensorflow_serving.apis import predict_pb2

from baton.serving import predict_wire as pw
from baton.serving import tensor_wire as tw
from baton.serving.status import ServingError
from baton.serving.tensor_proto import from_ndarray, to_ndarray

DTYPES = [np.float32, np.float64, np.int32, np.int64, np.uint8, np.int8, np.int16,
          np.uint16, np.uint32, np.uint64, np.bool_, np.float16]
SHAPES = [(), (0,), (1,), (3,), (2, 5), (1, 0, 4), (2, 1, 3)]


def _array(dtype, shape, rng):
    a = rng.standard_normal(shape) * 1000
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        a = rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    return np.asarray(a).astype(dtype)


@pytest.mark.parametrize("content", [False, True])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_encode_is_from_ndarray_byte_for_byte(dtype, content):
    rng = np.random.default_rng(3)
    for shape in SHAPES:
        a = _array(dtype, shape, rng)
        got = tw.encode_tensor(a, content)
        want = tensor_pb2.TensorProto()
        from_ndarray(a, want, content)
        if got is None:  # only large varint outputs are left to protobuf
            assert not content and a.size > tw.MAX_VARINT_VALUES
            continue
        assert got == want.SerializeToString(), (dtype, shape)


def test_edge_values_encode_as_protobuf_does():
    for a in (np.array([-1, -(2**31), 2**31 - 1], np.int32),
              np.array([-(2**63), 2**63 - 1, 0], np.int64),
              np.array([2**64 - 1], np.uint64), np.array([np.nan, -np.inf, -0.0], np.float32),
              np.array([True, False]), np.zeros((3, 0), np.float32),
              np.array(7.5, np.float64)):
        want = tensor_pb2.TensorProto()
        from_ndarray(a, want)
        assert tw.encode_tensor(a) == want.SerializeToString(), a


def test_strings_and_large_integers_are_left_to_protobuf():
    assert tw.encode_tensor(np.array([b"a", b"b"], dtype=object)) is None
    assert tw.encode_tensor(np.arange(tw.MAX_VARINT_VALUES + 1)) is None
    assert tw.encode_tensor(np.arange(tw.MAX_VARINT_VALUES + 1), True) is not None


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_decode_is_to_ndarray(dtype):
    rng = np.random.default_rng(5)
    for shape in SHAPES:
        a = _array(dtype, shape, rng)
        for content in (False, True):
            p = tensor_pb2.TensorProto()
            from_ndarray(a, p, content)
            got = tw.decode_tensor(p.SerializeToString())
            if got is None:  # varint-valued inputs, and empty integers, are to_ndarray's
                assert np.dtype(dtype) not in (np.float32, np.float64)
                assert not content or a.size == 0
                continue
            want = to_ndarray(p)
            assert got.dtype == want.dtype and got.shape == want.shape
            assert got.tobytes() == want.tobytes()
            assert got.flags.writeable


def _proto(**fields) -> bytes:
    return tensor_pb2.TensorProto(**fields).SerializeToString()


def test_decode_leaves_every_doubtful_form_to_to_ndarray():
    shape = {"dim": [{"size": 2}]}
    cases = [
        _proto(dtype=1, tensor_shape=shape, float_val=[1.0]),  # the fill form: handled
        _proto(dtype=1, tensor_shape=shape, float_val=[1.0, 2.0, 3.0]),  # too many values
        _proto(dtype=1, tensor_shape=shape, double_val=[1.0, 2.0]),  # another dtype's field
        _proto(dtype=1, tensor_shape={"dim": [{"size": -1}]}, float_val=[1.0]),
        _proto(dtype=1, tensor_shape={"unknown_rank": True}),
        _proto(dtype=1, tensor_shape=shape, tensor_content=b"\0" * 7),  # wrong length
        _proto(dtype=7, tensor_shape=shape, string_val=[b"a", b"b"]),
        _proto(dtype=99, tensor_shape=shape, tensor_content=b"\0" * 8),
        _proto(dtype=1, tensor_shape={"dim": [{"size": 2, "name": "batch"}]},
               float_val=[1.0, 2.0]),  # a named dim: handled
        b"\x08\x01\x12\x02\x12",  # truncated
    ]
    for raw in cases:
        p = tensor_pb2.TensorProto.FromString(raw) if raw != cases[-1] else None
        got = tw.decode_tensor(raw)
        if got is None:
            continue
        want = to_ndarray(p)
        assert got.tobytes() == want.tobytes() and got.shape == want.shape, raw
    assert tw.decode_tensor(cases[1]) is None and tw.decode_tensor(cases[3]) is None
    assert tw.decode_tensor(cases[-1]) is None
    with pytest.raises(ServingError):
        to_ndarray(tensor_pb2.TensorProto.FromString(cases[1]))
    # unpacked floats (a legal but rare encoding): left to protobuf, which merges them
    unpacked = b"\x08\x01\x12\x04\x12\x02\x08\x02" + b"\x2d\x00\x00\x80\x3f" * 2
    assert tw.decode_tensor(unpacked) is None
    assert to_ndarray(tensor_pb2.TensorProto.FromString(unpacked)).tolist() == [1.0, 1.0]


@pytest.mark.parametrize("version, name, sig", [(1, "m", "serving_default"),
                                                (0, "", ""), (2**40, "ünï", "s")])
def test_predict_response_is_protobuf_s(version, name, sig):
    outs = {"probabilities": np.random.default_rng(1).random((2, 10)).astype(np.float32),
            "class_ids": np.array([3, 7], np.int64), "empty": np.zeros((0,), np.float64)}
    want = predict_pb2.PredictResponse()
    want.model_spec.name = name
    want.model_spec.version.value = version
    want.model_spec.signature_name = sig
    for k, v in outs.items():
        from_ndarray(v, want.outputs[k])
    got = pw.predict_response([(k, tw.encode_tensor(v)) for k, v in outs.items()],
                              pw.model_spec(name, version, sig))
    parsed = predict_pb2.PredictResponse.FromString(got)
    assert parsed == want
    assert parsed.model_spec.HasField("version")
    assert len(got) == len(want.SerializeToString())


def _request(values, name="m", signature="", version=None, extra=None):
    r = predict_pb2.PredictRequest()
    r.model_spec.name = name
    r.model_spec.signature_name = signature
    if version is not None:
        r.model_spec.version.value = version
    from_ndarray(np.asarray(values, np.float32), r.inputs["x"])
    if extra is not None:
        from_ndarray(np.asarray(extra, np.float64), r.inputs["y"])
    return r.SerializeToString()


def _same(parts, raw):
    want = predict_pb2.PredictRequest.FromString(raw)
    assert parts.name == want.model_spec.name
    assert parts.signature_name == want.model_spec.signature_name
    assert parts.version == (want.model_spec.version.value
                             if want.model_spec.HasField("version") else None)
    assert sorted(parts.inputs) == sorted(want.inputs)
    for k, v in want.inputs.items():
        got, ref = parts.inputs[k], to_ndarray(v)
        assert got.dtype == ref.dtype and got.shape == ref.shape
        assert got.tobytes() == ref.tobytes() and got.flags.writeable


def test_request_layouts_read_only_what_matches_them():
    """A request laid out as one already read (same spec, names, dtypes, shapes) is read
    by comparing its literal bytes; any other byte difference is parsed in full."""
    pw._LAYOUTS.clear()
    rng = np.random.default_rng(7)
    first = _request(rng.random((2, 3)), extra=rng.random(4))
    _same(pw.parse_predict_request(first), first)
    assert len(pw._LAYOUTS) == 1
    for _ in range(20):  # other values: the layout reads them
        raw = _request(rng.random((2, 3)), extra=rng.random(4))
        assert pw._LAYOUTS[0].read(raw) is not None
        _same(pw.parse_predict_request(raw), raw)
    others = [_request(rng.random((2, 3)), name="n", extra=rng.random(4)),
              _request(rng.random((2, 3)), signature="s", extra=rng.random(4)),
              _request(rng.random((2, 3)), version=3, extra=rng.random(4)),
              _request(rng.random((3, 2)), extra=rng.random(4)),  # same size, other shape
              _request(rng.random((2, 3)))]
    for raw in others:
        assert pw._LAYOUTS[-1].read(raw) is None
        _same(pw.parse_predict_request(raw), raw)
    assert len(pw._LAYOUTS) == 1 + len(others)
    # the fill form and repeated keys are parsed, never laid out
    pw._LAYOUTS.clear()
    fill = tensor_pb2.TensorProto(dtype=1, tensor_shape={"dim": [{"size": 3}]},
                                  float_val=[2.0])
    r = predict_pb2.PredictRequest()
    r.model_spec.name = "m"
    r.inputs["x"].CopyFrom(fill)
    parts = pw.parse_predict_request(r.SerializeToString())
    assert parts.inputs["x"].tolist() == [2.0, 2.0, 2.0] and not pw._LAYOUTS
