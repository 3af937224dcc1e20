"""The REST fast paths give exactly what the general paths give.

Rows of scalars are converted by a per-signature plan (rest_json._rows_fast), outputs
are written as TF Serving writes them (json_write), a loaded signature is called flat and batch metrics are
recorded in bulk: each is checked here against the slower path it stands in for, on
valid input and, for the row plan, on input that must fall back and fail the same way.
"""



import fixture_models as fm
import numpy as np
import pytest

from baton.serving.batcher import Task
from baton.serving.json_parse import parse
from baton.serving.json_write import predict_json
from baton.serving.loader import load_servable
from baton.serving.metrics import Histogram
from baton.serving.rest_json import _row_plan, _rows_fast, feeds_from_json, parse_predict
from baton.serving.status import ServingError


@pytest.fixture(scope="module")
def sig(built):
    return load_servable("penguins", 1, built["penguins1"]).signature("serving_default")


def _error(fn):
    try:
        fn()
    except ServingError as e:
        return e.code, e.message
    return None


GOOD = [
    {"instances": [fm.PENGUIN]},
    {"instances": [fm.PENGUIN] * 5},
    {"instances": [dict(fm.PENGUIN, body_mass_g=4000)]},  # an int for a float
    {"instances": [dict(fm.PENGUIN, island="Dream é"), dict(fm.PENGUIN, sex="")]},
    {"instances": [{k: fm.PENGUIN[k] for k in reversed(list(fm.PENGUIN))}]},
    {"instances": [dict(fm.PENGUIN, flipper_length_mm=1e300)]},  # inf in float32, as before
    {"instances": [dict(fm.PENGUIN, body_mass_g=2 ** 70)]},  # a float32 like any other
]
BAD = [
    {"instances": [dict(fm.PENGUIN, bill_depth_mm=True)]},  # not a number, as rapidjson
    {"instances": [dict(fm.PENGUIN, bill_length_mm="abc")]},
    {"instances": [dict(fm.PENGUIN, bill_length_mm=None)]},
    {"instances": [dict(fm.PENGUIN, island=7)]},
    {"instances": [dict(fm.PENGUIN, island={"b64": "!!"})]},
    {"instances": [dict(fm.PENGUIN, extra=1)]},
    {"instances": [{k: v for k, v in fm.PENGUIN.items() if k != "sex"}]},
    {"instances": [fm.PENGUIN, dict(fm.PENGUIN, extra=1)]},
    {"instances": [fm.PENGUIN, [1, 2]]},
    {"instances": [fm.PENGUIN], "inputs": {}},
    {"instances": []},
]


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")
@pytest.mark.parametrize("body", GOOD)
def test_row_plan_builds_the_same_feeds_and_key(sig, body):
    feeds, row, key = parse_predict(body, sig)
    ref, ref_row = feeds_from_json(body, sig)
    assert key is not None and row is ref_row is True
    assert list(feeds) == list(ref)
    for k in ref:
        assert feeds[k].dtype == ref[k].dtype and feeds[k].shape == ref[k].shape, k
        assert feeds[k].flags.c_contiguous
        np.testing.assert_array_equal(feeds[k], ref[k])
    general = Task(sig, ref, lambda o, e: None)
    fast = Task(sig, feeds, lambda o, e: None, key=key)
    assert (fast.key, fast.size) == (general.key, general.size)


@pytest.mark.parametrize("body", BAD)
def test_row_plan_falls_back_and_fails_the_same_way(sig, body):
    plan = _row_plan(sig)
    rows = body["instances"]
    assert not rows or "inputs" in body or _rows_fast(rows, plan) is None
    err = _error(lambda: parse_predict(body, sig))
    assert err is not None and err == _error(lambda: feeds_from_json(body, sig))


@pytest.mark.parametrize("name, value", [("bill_length_mm", [1.0]), ("island", ["a"])])
def test_a_row_the_plan_cannot_take_is_parsed_by_the_general_path_shape_unchecked(
        sig, name, value):
    """A list where the signature has a scalar: not the plan's, and not refused by the
    parser either (TF Serving checks names; TensorFlow checks shapes when it runs)."""
    body = {"instances": [dict(fm.PENGUIN, **{name: value})]}
    assert _rows_fast(body["instances"], _row_plan(sig)) is None
    feeds, row, key = parse_predict(body, sig)
    assert key is None and row and feeds[name].shape == (1, 1)


def test_outputs_are_written_as_tf_serving_writes_them():
    outputs = {
        "classes": np.array([b"Adelie", "Gentoo é".encode(), b"null", b"tab\there \"q\" \\",
                             b"\x7f\x01"], dtype=object),
        "class_ids": np.arange(5, dtype=np.int64),
        "probabilities": np.array([[0.25, 0.5, 0.2]] * 4 + [[np.nan, 1.0, 0.0]], np.float32),
        "raw_bytes": np.array([b"\xff\x00"] * 5, dtype=object),
    }
    rows = parse(predict_json(outputs, True).decode())["predictions"]
    assert rows[0] == {"classes": "Adelie", "class_ids": 0, "probabilities": [0.25, 0.5, 0.2],
                       "raw_bytes": {"b64": "/wA="}}
    assert rows[4]["classes"] == "\x7f\x01" and rows[2]["classes"] == "null"
    assert rows[3]["classes"] == "tab\there \"q\" \\"
    assert rows[1]["classes"] == "Gentoo é" and rows[4]["probabilities"][1:] == [1.0, 0.0]
    # float32 0.2 is written 0.2 (six significant digits), not 0.20000000298023224
    assert b"0.2]" in predict_json({"p": outputs["probabilities"][:1]}, True)
    text = predict_json({"s": np.array([b"\xc3\xa9", b"\xff"], dtype=object)}, True)
    assert parse(text.decode()) == {"predictions": ["é", {"b64": "/w=="}]}


def test_fast_signature_call_matches_the_keyword_call(sig):
    feeds, _, _ = parse_predict({"instances": [fm.PENGUIN] * 3}, sig)
    fast = sig._fast
    assert fast is not None and fast.fn is sig.fn and fast.verified  # checked by the warmup
    got = sig(feeds)
    sig._fast = None
    try:
        ref = sig(feeds)
        assert got.keys() == ref.keys()
        for k in ref:
            assert got[k].dtype == ref[k].dtype
            np.testing.assert_array_equal(got[k], ref[k])
        # inputs that need a cast take the keyword call, and give its errors
        as_f64 = dict(feeds, bill_length_mm=feeds["bill_length_mm"].astype(np.float64))
        keyword = _error(lambda: sig(as_f64))
        sig._fast = fast
        assert _error(lambda: sig(as_f64)) == keyword
    finally:
        sig._fast = fast


def test_a_fast_call_that_disagrees_is_dropped_at_its_first_call(built):
    from baton.serving.servable import _FastCall

    sig = load_servable("penguins", 1, built["penguins1"], warmup=False).signature("")
    feeds, _, _ = parse_predict({"instances": [fm.PENGUIN]}, sig)
    assert isinstance(sig._fast, _FastCall) and not sig._fast.verified
    calls = []

    class Wrong:
        fn, order, verified = sig.fn, sig._fast.order, False

        def __call__(self, feeds):
            calls.append(1)
            return {"class_ids": np.zeros(1, np.int64)}

    sig._fast = Wrong()
    out = sig(feeds)  # the keyword call's outputs, and the fast call is gone
    assert calls == [1] and sig._fast is None and set(out) == set(sig.outputs)
    assert sig(feeds).keys() == out.keys() and calls == [1]


def test_a_replaced_fn_is_called(sig):
    fn, calls = sig.fn, []

    def wrapped(**kw):
        calls.append(1)
        return fn(**kw)

    feeds, _, _ = parse_predict({"instances": [fm.PENGUIN]}, sig)
    sig.fn = wrapped
    try:
        sig(feeds)
    finally:
        sig.fn = fn
    assert calls == [1]


def test_observe_many_equals_observe():
    values = [0.5, 3.0, 150.0, 1e9, 10.0]
    one, many = (Histogram("h", "h", ["a"], [1.0, 10.0, 100.0]) for _ in range(2))
    for v in values:
        one.observe(v, "x")
    many.observe_many(values, "x")
    many.observe_many([], "x")
    a, b = [], []
    one.render(a)
    many.render(b)
    assert a == b


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_large_float_tensors_are_written_as_value_by_value(dtype):
    """json_write's numpy path (>= 48 values) writes the same text as the per-value
    WriteDecimal: six significant digits where they read back, else full precision,
    exponents, NaN/Infinity, powers of ten and ties."""

    from baton.serving.json_write import _nest, decimals, item_jsons, tensor_json

    rng = np.random.default_rng(7)
    special = [9000000, 999999, 0.5, .0003, .00003, 555557.5, 0.2, 1 / 3, np.nan, np.inf,
               -np.inf, 0, -0.0, 1e-45, 999999.5, 99999.95, 0.1, 1000, 100000, 0.0001,
               0.00009999999, 1e-300 if dtype == np.float64 else 1e-38]
    values = np.concatenate([
        rng.random(500), rng.random(500) * 1e6, rng.standard_normal(500) * 1e-3,
        np.round(rng.random(500) * 100, 2), rng.random(500) * 10.0 ** rng.integers(-6, 7, 500),
        np.array(special * 3)]).astype(dtype)[:2560]
    for shape in [(2560,), (256, 10), (64, 8, 5)]:
        arr = values.reshape(shape)
        reference = _nest(decimals(arr), arr.shape)  # value by value, as WriteDecimal
        assert tensor_json("y", arr) == reference
        rows = [_nest(decimals(r), r.shape) if r.ndim else decimals(r)[0] for r in arr]
        assert item_jsons("y", arr) == rows
