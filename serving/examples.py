"""Classify and Regress: tf.Example inputs in, TF Serving's result shapes out.

The REST `examples`/`context` JSON and the gRPC `Input` proto both become serialized
tf.Example strings fed to the signature's single string input. A context is merged into
every example by concatenating serialized protos (protobuf merge semantics: an example's
own feature wins), which is exactly what TF Serving does for ExampleListWithContext.
"""

from __future__ import annotations

import base64
import binascii

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
from baton.serving.servable import Servable, Signature
from baton.serving.status import invalid
from baton.serving.tensor_proto import examples_from_input_proto


def _feature(name: str, value):
    from tensorflow.core.example import feature_pb2

    vals = value if isinstance(value, list) else [value]
    f = feature_pb2.Feature()
    if not vals:
        f.float_list.SetInParent()
        return f
    kinds: set[str] = set()
    conv: list[int | float | bytes] = []
    for v in vals:
        if isinstance(v, bool):
            raise invalid(f"feature {name!r}: booleans are not tf.Example values. Received: {v}")
        if isinstance(v, int):
            kinds.add("int")
            conv.append(v)
        elif isinstance(v, float):
            kinds.add("float")
            conv.append(v)
        elif isinstance(v, str):
            kinds.add("bytes")
            conv.append(v.encode())
        elif isinstance(v, dict) and set(v) == {"b64"} and isinstance(v["b64"], str):
            kinds.add("bytes")
            try:
                conv.append(base64.b64decode(v["b64"], validate=True))
            except (binascii.Error, ValueError):
                raise invalid(f"feature {name!r}: invalid base64 in 'b64'") from None
        else:
            raise invalid(f"feature {name!r}: values must be numbers, strings or "
                          f"{{\"b64\": ...}}. Received: {str(v)[:80]}")
    if "bytes" in kinds:
        if len(kinds) > 1:
            raise invalid(f"feature {name!r} mixes strings and numbers")
        f.bytes_list.value.extend(conv)
    elif "float" in kinds:
        f.float_list.value.extend(float(v) for v in conv)
    else:
        try:
            f.int64_list.value.extend(conv)
        except ValueError:
            raise invalid(f"feature {name!r}: integer out of int64 range") from None
    return f


def _example_bytes(obj, where: str) -> bytes:
    from tensorflow.core.example import example_pb2

    if not isinstance(obj, dict):
        raise invalid(f"{where} must be a JSON object of features. Received: {str(obj)[:80]}")
    ex = example_pb2.Example()
    for k, v in obj.items():
        ex.features.feature[k].CopyFrom(_feature(k, v))
    return ex.SerializeToString()


def examples_from_json(body: dict) -> np.ndarray:
    """`{"examples": [...], "context": {...}}` -> serialized tf.Examples (object array)."""
    exs = body.get("examples")
    if not isinstance(exs, list) or not exs:
        raise invalid("'examples' must be a non-empty list of objects. "
                      f"Received: {str(exs)[:80]}")
    ctx = body.get("context")
    prefix = _example_bytes(ctx, "'context'") if ctx is not None else b""
    arr = np.empty(len(exs), dtype=object)
    for i, e in enumerate(exs):
        arr[i] = prefix + _example_bytes(e, f"examples[{i}]")
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
