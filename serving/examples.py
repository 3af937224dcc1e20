"""Classify and Regress: tf.Example inputs in, TF Serving's result shapes out.

The REST `examples`/`context` JSON and the gRPC `Input` proto both become serialized
tf.Example strings fed to the signature's single string input. A context is merged into
every example by concatenating serialized protos (protobuf merge semantics: an example's
own feature wins), which is exactly what TF Serving does for ExampleListWithContext.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from baton.serving.conventions import (
    CLASSIFY_INPUTS,
    CLASSIFY_METHOD_NAME,
    CLASSIFY_OUTPUT_CLASSES,
    CLASSIFY_OUTPUT_SCORES,
    DEFAULT_SERVING_SIGNATURE_DEF_KEY,
    REGRESS_INPUTS,
    REGRESS_OUTPUTS,
)
from baton.serving.json_parse import b64decode, debug_string, is_b64, is_double, json_type
from baton.serving.servable import Servable, Signature
from baton.serving.status import invalid
from baton.serving.tensor_proto import examples_from_input_proto

INT64_MAX = 2 ** 63 - 1


def _feature(name: str, content):
    """AddValueToFeature over a feature's value or list: the first value's kind (bytes,
    float, int64) is the feature's; true/false are int64 1/0; 10.0 is a float, 10 an int."""
    from tensorflow.core.example import feature_pb2

    values = content if type(content) is list else [content]
    kind = None
    out: list = []
    x: Any
    for v in values:
        t = type(v)
        if t is bool:
            k, x = "int64", int(v)
        elif t is str:
            k, x = "bytes", v.encode()
        elif t is int or t is float:
            if is_double(v):
                k, x = "float", float(v)
            elif v > INT64_MAX:
                raise invalid(f"Feature: {name} has uint64_t element. "
                              "Only int64_t is supported.")
            else:
                k, x = "int64", v
        elif is_b64(v):
            k, x = "bytes", b64decode(v)
        else:
            raise invalid(f"Feature: {name} has element with unexpected JSON type: "
                          f"{json_type(v)}")
        if kind is None:
            kind = k
        elif kind != k:
            raise invalid(f"Unexpected element type in feature: {name} expecting type: {kind}")
        out.append(x)
    f = feature_pb2.Feature()
    if kind == "bytes":
        f.bytes_list.value.extend(out)
    elif kind == "float":
        f.float_list.value.extend(out)
    elif kind == "int64":
        f.int64_list.value.extend(out)
    return f  # no values: a Feature of no kind, as TF Serving's


def _example_bytes(obj) -> bytes:
    """MakeExampleFromJsonObject, serialized."""
    from tensorflow.core.example import example_pb2

    if type(obj) is not dict:
        raise invalid(f"Example must be JSON object but got JSON {json_type(obj)}")
    ex = example_pb2.Example()
    for k, v in obj.items():
        ex.features.feature[k].CopyFrom(_feature(k, v))
    return ex.SerializeToString()


def example_list_from_json(body: dict) -> tuple[bytes | None, list[bytes]]:
    """(serialized context or None, serialized examples) of a classify/regress body,
    checked as FillClassifyRegressRequestFromJson checks them, in its words."""
    context = _example_bytes(body["context"]) if "context" in body else None
    if "examples" not in body:
        raise invalid(f"JSON Value: {debug_string(body)} When method is classify, key "
                      "'examples' is expected and was not found")
    exs = body["examples"]
    if type(exs) is not list:
        raise invalid(f"JSON Value: {debug_string(body)} Expecting 'examples' value to be an "
                      "list/array")
    if not exs:
        raise invalid(f"JSON Value: {debug_string(body)} 'examples' value is an empty array")
    return context, [_example_bytes(e) for e in exs]


def examples_from_json(body: dict) -> np.ndarray:
    """`{"examples": [...], "context": {...}}` -> serialized tf.Examples (object array),
    the context merged into each (ExampleListWithContext's meaning)."""
    context, examples = example_list_from_json(body)
    arr = np.empty(len(examples), dtype=object)
    arr[:] = [(context or b"") + e for e in examples]
    return arr


def signature_for(servable: Servable, name: str, method: str,
                  check_method_name: bool = False) -> Signature:
    """The classify/regress signature a request names (serving_default if none).

    As TF Serving's GetClassificationSignatureDef / GetRegressionSignatureDef: the
    method_name is checked only with `check_method_name`
    (`--enable_signature_method_name_check`, default false: TF2's saver writes every
    signature as predict); otherwise the signature's structure is (see `check_signature`).
    Leniency (ours): without a name, when serving_default is not of `method`, the model's
    only signature whose method_name is `method` is used.
    """
    if not name:
        default = servable.signatures.get(DEFAULT_SERVING_SIGNATURE_DEF_KEY)
        if default is None or default.method_name != method:
            matches = [s for s in servable.signatures.values() if s.method_name == method]
            if len(matches) == 1:
                return check_signature(matches[0], method, check_method_name)
    key = name or DEFAULT_SERVING_SIGNATURE_DEF_KEY
    sig = servable.signatures.get(key)
    if sig is None:
        raise invalid(f"No signature was found with the name: {key}")
    return check_signature(sig, method, check_method_name)


def check_signature(sig: Signature, method: str, check_method_name: bool = False) -> Signature:
    """TF Serving's PreProcessClassification / PreProcessRegression checks, its messages."""
    classify = method == CLASSIFY_METHOD_NAME
    kind = "classification" if classify else "regression"
    if check_method_name and sig.method_name != method:
        raise invalid(f"Expected {kind} signature method_name to be {method}. "
                      f"Was: {sig.method_name}")
    if len(sig.inputs) != 1:
        raise invalid("Expected one input Tensor.")
    n = len(sig.outputs)
    if classify and n not in (1, 2):
        raise invalid(f"Expected one or two output Tensors, found {n}")
    if not classify and n != 1:
        raise invalid("Expected one output Tensor.")
    if (CLASSIFY_INPUTS if classify else REGRESS_INPUTS) not in sig.inputs:
        raise invalid(f"No {kind} inputs found in SignatureDef {sig.name}: "
                      f"inputs {sorted(sig.inputs)}")
    if classify and not {CLASSIFY_OUTPUT_CLASSES, CLASSIFY_OUTPUT_SCORES} & sig.outputs.keys():
        raise invalid("Expected classification signature outputs to contain at least one of "
                      f"\"{CLASSIFY_OUTPUT_CLASSES}\" or \"{CLASSIFY_OUTPUT_SCORES}\". "
                      f"Signature {sig.name} outputs: {sorted(sig.outputs)}")
    if not classify and REGRESS_OUTPUTS not in sig.outputs:
        raise invalid(f"No regression outputs found in SignatureDef {sig.name}: "
                      f"outputs {sorted(sig.outputs)}")
    return sig


def classification_rows(sig: Signature, out: dict[str, np.ndarray]) -> list[list[tuple]]:
    """[[(label, score), ...] per example]; labels empty when the model has no classes."""
    scores = out.get(CLASSIFY_OUTPUT_SCORES)
    classes = out.get(CLASSIFY_OUTPUT_CLASSES)
    if scores is None and classes is None:
        raise invalid(f"signature {sig.name} has neither '{CLASSIFY_OUTPUT_CLASSES}' nor "
                      f"'{CLASSIFY_OUTPUT_SCORES}' outputs")
    ref = scores if scores is not None else classes
    assert ref is not None
    n = ref.shape[0]
    ref = ref.reshape(n, -1)
    rows = []
    for i in range(n):
        row = []
        for j in range(ref.shape[1]):
            label = classes.reshape(n, -1)[i, j] if classes is not None else b""
            if isinstance(label, bytes):
                label = label.decode("utf-8", "replace")
            score = float(scores.reshape(n, -1)[i, j]) if scores is not None else 0.0
            row.append((label, score))
        rows.append(row)
    return rows


def regression_values(sig: Signature, out: dict[str, np.ndarray]) -> list[float]:
    vals = out.get(REGRESS_OUTPUTS)
    if vals is None:
        if len(out) != 1:
            raise invalid(f"signature {sig.name} has no '{REGRESS_OUTPUTS}' output")
        vals = next(iter(out.values()))
    n = vals.shape[0] if vals.ndim else 1
    flat = vals.reshape(n, -1)
    if flat.shape[1] != 1:
        raise invalid(f"regression output must be one value per example. "
                      f"Received shape {list(vals.shape)}")
    return [float(v) for v in flat[:, 0]]


__all__ = ["examples_from_json", "examples_from_input_proto", "signature_for",
           "check_signature", "classification_rows", "regression_values"]
