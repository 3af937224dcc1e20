"""TFLite conversion and measurement of the exported SavedModel's edge variants.

Variants:

- `float`, `dynamic` (dynamic-range: int8 weights, float activations) and `int8` (weights and
  activations int8, calibrated on a representative dataset; float32/int64 interface because the
  categorical ids are int64) are converted from the `predict_transformed` signature: TFLite has
  no general string support, so on a device the transform runs beside the model using the
  shipped feature_spec.json + analysis.json (scaling constants and vocabularies).
- `raw` converts `serving_default` itself (transform inside) with SELECT_TF_OPS: self-contained
  but needs the Flex delegate on the device, a much larger runtime.

Conversion goes through `from_concrete_functions` on the loaded SavedModel, which freezes the
variables. `from_saved_model` on this SavedModel (Keras 3 resource variables next to the
transform's hash tables) produced a model that ran and answered wrongly (READ_VARIABLE of
uninitialised variables; 57% vs 100% accuracy here) - exactly the failure the parity
measurement exists to catch.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

VARIANTS = ("float", "dynamic", "int8", "raw")
TRANSFORMED_SIGNATURE = "predict_transformed"


def convert(version_dir: Path, variant: str,
            representative: Callable[[], Any] | None = None) -> bytes:
    """The .tflite flatbuffer of one variant (raises on a conversion failure)."""
    import tensorflow as tf

    loaded = tf.saved_model.load(str(version_dir))
    signature = (tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY if variant == "raw"
                 else TRANSFORMED_SIGNATURE)
    fn = loaded.signatures[signature]
    conv = tf.lite.TFLiteConverter.from_concrete_functions([fn], loaded)
    if variant == "raw":
        conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS,
                                          tf.lite.OpsSet.SELECT_TF_OPS]
    elif variant in ("dynamic", "int8"):
        conv.optimizations = [tf.lite.Optimize.DEFAULT]
        if variant == "int8":
            if representative is None:
                raise ValueError("int8 needs a representative dataset")
            conv.representative_dataset = representative
            conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    elif variant != "float":
        raise ValueError(f"unknown edge variant {variant!r}; known: {', '.join(VARIANTS)}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # int8 calibration builds a (deprecated) tf.lite.Interpreter
        return conv.convert()


def runner(model: bytes) -> Callable[..., dict[str, Any]]:
    """A callable running the model's only signature on numpy inputs (any batch size).

    Runs in LiteRT (the ai-edge-litert package), which replaced TensorFlow's deprecated
    tf.lite.Interpreter: the runtime a device ships, so the parity measured here is the
    device's.
    """
    from ai_edge_litert.interpreter import Interpreter

    return Interpreter(model_content=model).get_signature_runner()


def predict(run: Callable[..., dict[str, Any]], inputs: Mapping[str, Any],
            batch_size: int = 256) -> dict[str, Any]:
    """Outputs of `run` over all rows, in batches."""
    import numpy as np

    n = len(next(iter(inputs.values())))
    parts: list[dict[str, Any]] = []
    for start in range(0, n, batch_size):
        parts.append(run(**{k: v[start:start + batch_size] for k, v in inputs.items()}))
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def latency_ms(fn: Callable[..., Any], inputs: Mapping[str, Any], rows: int) -> float:
    """Median wall time of one single-example call, in milliseconds."""
    n = min(rows, len(next(iter(inputs.values()))))
    times = []
    for i in range(n):
        one = {k: v[i:i + 1] for k, v in inputs.items()}
        t = time.perf_counter()
        fn(**one)
        times.append(time.perf_counter() - t)
    times.sort()
    return 1000 * times[len(times) // 2] if times else float("nan")


def parity(edge: Any, cloud: Any, labels: Any, task: str) -> dict[str, Any]:
    """Edge vs cloud on the same rows: metric of each, the delta and how often they agree."""
    import numpy as np

    if task == "regression":
        e, c = edge.reshape(-1), cloud.reshape(-1)
        mae_e = float(np.abs(e - labels).mean())
        mae_c = float(np.abs(c - labels).mean())
        return {"metric": "mae", "edge": mae_e, "cloud": mae_c, "delta": mae_e - mae_c,
                "worsening": mae_e - mae_c, "max_abs_diff": float(np.abs(e - c).max())}
    acc_e = float((edge.argmax(1) == labels).mean())
    acc_c = float((cloud.argmax(1) == labels).mean())
    return {"metric": "accuracy", "edge": acc_e, "cloud": acc_c, "delta": acc_e - acc_c,
            "worsening": acc_c - acc_e,
            "agreement": float((edge.argmax(1) == cloud.argmax(1)).mean()),
            "max_abs_diff": float(np.abs(edge - cloud).max())}


def decide(measured: Mapping[str, Mapping[str, Any]], prefer: tuple[str, ...],
           max_delta: float) -> dict[str, Any]:
    """Release the first preferred variant whose metric is within `max_delta` of the cloud
    model's; otherwise release nothing, and say why for each variant."""
    reasons = []
    for name in prefer:
        m = measured.get(name)
        if m is None:
            reasons.append(f"{name}: not converted")
            continue
        if "error" in m:
            reasons.append(f"{name}: {m['error']}")
            continue
        p = m["parity"]
        if p["worsening"] <= max_delta:
            return {"released": True, "variant": name,
                    "reason": f"{name}: {p['metric']} {p['edge']:.4f} vs cloud "
                              f"{p['cloud']:.4f} (within {max_delta})"}
        reasons.append(f"{name}: {p['metric']} {p['edge']:.4f} vs cloud {p['cloud']:.4f}, "
                       f"worse by {p['worsening']:.4f} > max_delta {max_delta}")
    return {"released": False, "variant": None,
            "reason": "no edge variant within max_delta: " + "; ".join(reasons)}
