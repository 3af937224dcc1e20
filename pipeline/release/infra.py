"""Infra-validation of an exported SavedModel (TFX calls this InfraValidator).

Two layers, cheapest first, each naming the problem it finds:

1. Static: saved_model.pb parses (a truncated file does not), the variables index and every
   data shard exist, and each signature has the inputs, outputs, dtypes and method names TF
   Serving needs (`inputs` for classify/regress, DT_STRING classes, DT_FLOAT scores...).
2. Dynamic: a *fresh* Python process (`pipeline.release.infra_worker`) loads the SavedModel
   with nothing but TensorFlow, replays the warmup requests through the signatures a server
   would call, and its answers are compared with what the in-process model answered at export
   time. A fresh process catches what an in-process reload cannot: objects that only resolve
   because the exporter had them imported, and state that lived only in the exporting process.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

STRING, FLOAT, INT64 = "DT_STRING", "DT_FLOAT", "DT_INT64"
_DTYPE = {"float32": FLOAT, "int64": INT64, "string": STRING}
_SHARD = re.compile(r"^variables\.data-(\d+)-of-(\d+)$")


def static_problems(version_dir: Path, info: Mapping[str, Any] | None) -> list[str]:
    """Problems visible without running the model; [] when the layout and signatures are right."""
    from google.protobuf.message import DecodeError
    from tensorflow.core.protobuf import saved_model_pb2

    problems: list[str] = []
    pb = version_dir / "saved_model.pb"
    if not pb.is_file():
        return [f"{pb} is missing (is this a SavedModel directory?)"]
    sm = saved_model_pb2.SavedModel()
    data = pb.read_bytes()
    try:
        sm.ParseFromString(data)
    except DecodeError as exc:
        return [f"saved_model.pb is truncated or corrupt ({len(data)} bytes): {exc}"]
    if not sm.meta_graphs or not sm.meta_graphs[0].signature_def:
        return [f"saved_model.pb has no MetaGraph with signatures ({len(data)} bytes): "
                "truncated or not a serving SavedModel"]
    problems += variable_problems(version_dir)
    sigs = sm.meta_graphs[0].signature_def
    problems += signature_problems(sigs, info or {})
    return problems


def variable_problems(version_dir: Path) -> list[str]:
    var_dir = version_dir / "variables"
    if not (var_dir / "variables.index").is_file():
        return [f"variables file {var_dir / 'variables.index'} is missing"]
    shards = [m for p in var_dir.iterdir() if (m := _SHARD.match(p.name))]
    total = int(shards[0].group(2)) if shards else 1
    present = {int(m.group(1)) for m in shards}
    return [f"variables file {var_dir / f'variables.data-{i:05d}-of-{total:05d}'} is missing"
            for i in range(total) if i not in present]


def _dtype(info: Any) -> str:
    from tensorflow.core.framework import types_pb2

    return types_pb2.DataType.Name(info.dtype)


def _expect_io(name: str, kind: str, have: Mapping[str, Any], want: Mapping[str, str],
               exact: bool) -> list[str]:
    problems = []
    for key, dtype in want.items():
        if key not in have:
            problems.append(f"signature {name!r}: missing {kind} {key!r} ({dtype}); "
                            f"it has {sorted(have)}")
        elif _dtype(have[key]) != dtype:
            problems.append(f"signature {name!r}: {kind} {key!r} is {_dtype(have[key])}, "
                            f"expected {dtype}")
    if exact:
        extra = sorted(set(have) - set(want))
        if extra:
            problems.append(f"signature {name!r}: unexpected {kind}s {extra}; expected exactly "
                            f"{sorted(want)}")
    return problems


def _shape_problems(name: str, have: Mapping[str, Any], want: Sequence[Mapping[str, Any]]
                    ) -> list[str]:
    """A raw input's shape must be `[batch, *shape]` (export.json's per-example `shape`)."""
    problems = []
    for f in want:
        if f["name"] not in have:
            continue
        shape = have[f["name"]].tensor_shape
        got = None if shape.unknown_rank else [d.size for d in shape.dim]
        expected = [-1, *f.get("shape", [])]
        if got is not None and got != expected:
            problems.append(f"signature {name!r}: input {f['name']!r} has shape {got}, "
                            f"expected {expected} (-1: the batch)")
    return problems


def signature_problems(sigs: Mapping[str, Any], info: Mapping[str, Any]) -> list[str]:
    """Check each signature against the contract (export.json tells the raw inputs and task)."""
    import tensorflow as tf

    sm = tf.saved_model
    default = sm.DEFAULT_SERVING_SIGNATURE_DEF_KEY
    regression = info.get("task") == "regression"
    expected = info.get("signatures") or [default]
    problems = [f"signature {s!r} is missing; the SavedModel has {sorted(sigs)}"
                for s in expected if s not in sigs]
    if default in sigs:
        raw = {f["name"]: _DTYPE[f["dtype"]] for f in info.get("raw_inputs", [])}
        if raw:
            problems += _expect_io(default, "input", sigs[default].inputs, raw, exact=True)
            problems += _shape_problems(default, sigs[default].inputs, info["raw_inputs"])
            problems += [
                f"signature {default!r}: input {f['name']!r} is optional (the transform does "
                "not read it) but has no default in the SignatureDef"
                for f in info["raw_inputs"]
                if f.get("required") is False and f["name"] not in sigs[default].defaults]
        outs = {"predictions": FLOAT} if regression else {
            "probabilities": FLOAT, "class_ids": INT64, "classes": STRING}
        problems += _expect_io(default, "output", sigs[default].outputs, outs, exact=False)
    for name, method, inputs, outs in (
        ("classify", sm.CLASSIFY_METHOD_NAME, sm.CLASSIFY_INPUTS,
         {sm.CLASSIFY_OUTPUT_CLASSES: STRING, sm.CLASSIFY_OUTPUT_SCORES: FLOAT}),
        ("regress", sm.REGRESS_METHOD_NAME, sm.REGRESS_INPUTS, {sm.REGRESS_OUTPUTS: FLOAT}),
    ):
        if name not in sigs:
            continue
        sig = sigs[name]
        if sig.method_name != method:
            problems.append(f"signature {name!r}: method_name is {sig.method_name!r}, TF Serving "
                            f"requires {method!r}")
        problems += _expect_io(name, "input", sig.inputs, {inputs: STRING}, exact=True)
        problems += _expect_io(name, "output", sig.outputs, outs, exact=True)
    return problems


def run_fresh(version_dir: Path, timeout: float) -> dict[str, Any]:
    """Replay the warmup file in a fresh interpreter; returns its JSON report."""
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with tempfile.TemporaryDirectory(prefix="baton-infra-") as tmp:
        out = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "baton.pipeline.release.infra_worker", str(version_dir), str(out)]
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                                  cwd=tmp)
        except subprocess.TimeoutExpired:
            return {"error": f"loading and warming up the model took more than {timeout:.0f}s"}
        if out.is_file():
            return json.loads(out.read_text())
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        return {"error": f"the validation process exited with code {proc.returncode}: {tail}"}


def compare(got: Sequence[Mapping[str, Any]], want: Sequence[Mapping[str, Any]],
            atol: float) -> tuple[float, list[str]]:
    """(max abs difference, problems) between fresh-process and in-process answers.

    A NaN (or infinity) is a problem of its own, reported as such once per output with the
    requests it appears in and whether both sides agree on it: a model that answers NaN must
    not pass as one that "differs from the in-process model by nan"."""
    import numpy as np

    if len(got) != len(want):
        return float("inf"), [f"{len(got)} warmup answers, expected {len(want)}"]
    worst, problems = 0.0, []
    nonfinite: dict[str, dict[str, list[int]]] = {}
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        for key, expected in w.items():
            if key not in g:
                problems.append(f"warmup request {i}: output {key!r} missing")
                continue
            a, b = np.asarray(g[key]), np.asarray(expected)
            if a.shape != b.shape:
                problems.append(f"warmup request {i}: output {key!r} has shape {a.shape}, "
                                f"expected {b.shape}")
            elif a.dtype.kind in "fc" or b.dtype.kind in "fc":
                a, b = a.astype(float), b.astype(float)
                bad_a, bad_b = ~np.isfinite(a), ~np.isfinite(b)
                if bad_a.any() or bad_b.any():
                    side = ("both" if bad_a.any() and bad_b.any() else
                            "fresh" if bad_a.any() else "in-process")
                    nonfinite.setdefault(key, {}).setdefault(side, []).append(i)
                ok = ~(bad_a | bad_b)
                diff = float(np.max(np.abs(a[ok] - b[ok]))) if ok.any() else 0.0
                worst = max(worst, diff)
                if not diff <= atol:
                    problems.append(f"warmup request {i}: output {key!r} differs from the "
                                    f"in-process model by {diff:.3g} (> atol {atol})")
            elif a.tolist() != b.tolist():
                problems.append(f"warmup request {i}: output {key!r} is {a.tolist()}, the "
                                f"in-process model gives {b.tolist()}")
    sides = {"both": "in the fresh process as in the in-process model",
             "in-process": "in the in-process model, not in the fresh process (whose fused "
                           "kernels may turn NaN into numbers)",
             "fresh": "in the fresh process, not in the in-process model"}
    for key, where in nonfinite.items():
        for side, text in sides.items():
            if where.get(side):
                problems.append(f"output {key!r} is NaN (or infinite) for warmup requests "
                                f"{where[side]}, {text}: the model cannot answer those rows "
                                "(missing values the transform hands on?)")
    return worst, problems
