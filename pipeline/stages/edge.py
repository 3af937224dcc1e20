"""Edge: TFLite variants of the exported model, measured against it, and a release decision.

Each variant (see pipeline.release.tflite) is converted, run in LiteRT (ai-edge-litert) on the
eval split and compared with the SavedModel on the same rows: size, latency per example, the
metric and its delta, agreement. The first variant in `prefer` whose metric is within
`max_delta` of the cloud model's is released (as model.tflite, with the transform's constants);
if none is, the edge model is not released and push releases the cloud model alone.
Conversion failures are recorded as results, not errors: "full integer where the model allows
it" means a model that does not allow it still gets its other variants.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from typing import Any, Literal

from baton.pipeline.context import StageContext

INPUTS = {"saved_model": True, "examples": True, "transform_graph": True}
OUTPUTS = ("edge_model",)
CODE_DEPS = ("baton.pipeline.release.tflite", "baton.pipeline.release.data")
CACHEABLE = True
Variant = Literal["float", "dynamic", "int8", "raw"]


@dataclasses.dataclass(frozen=True)
class Config:
    """max_delta: the largest allowed worsening of accuracy (MAE for regression) vs the cloud
    model. prefer: release order among the variants that pass."""

    variants: tuple[Variant, ...] = ("float", "dynamic", "int8", "raw")
    prefer: tuple[Variant, ...] = ("int8", "dynamic", "float")
    max_delta: float = 0.01
    representative_rows: int = 200
    latency_rows: int = 50
    split: str = "eval"

    def __post_init__(self) -> None:
        if self.max_delta < 0:
            raise ValueError(f"max_delta must be >= 0. Received: {self.max_delta}")
        unknown = [p for p in self.prefer if p not in self.variants]
        if unknown:
            raise ValueError(f"prefer names variants that are not converted: {unknown}; "
                             f"variants: {list(self.variants)}")
        if self.representative_rows < 1 or self.latency_rows < 1:
            raise ValueError("representative_rows and latency_rows must be >= 1. Received: "
                             f"{self.representative_rows}, {self.latency_rows}")


def run(ctx: StageContext, config: Config) -> None:
    import tensorflow as tf

    from baton.graphs.feature_spec import FILENAME as FEATURE_SPEC_FILE
    from baton.graphs.feature_spec import FeatureSpec
    from baton.graphs.transform import ANALYSIS_FILE
    from baton.pipeline.release import data, tflite
    from baton.pipeline.stages.export import version_dir

    spec = FeatureSpec.load(ctx.inputs["transform_graph"])
    vdir = version_dir(ctx.inputs["saved_model"])
    transform = data.load_transform(ctx.inputs["transform_graph"])
    split = data.read_split(ctx.inputs["examples"], spec, config.split)
    feats = data.transform_split(transform, split, spec)
    raw = {n: split.columns[n] for n in split.columns}
    regression = spec.label.task == "regression"
    key = "predictions" if regression else "probabilities"

    cloud_fn = tf.saved_model.load(str(vdir)).signatures[
        tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY]
    cloud = {k: v.numpy() for k, v in cloud_fn(**{n: tf.constant(v) for n, v in raw.items()}
                                              ).items()}[key]
    cloud_latency = tflite.latency_ms(lambda **kw: cloud_fn(
        **{n: tf.constant(v) for n, v in kw.items()}), raw, config.latency_rows)

    rep = _representative(ctx, spec, transform, config, feats)
    out = ctx.output("edge_model")
    measured: dict[str, dict[str, Any]] = {}
    for variant in config.variants:
        inputs = raw if variant == "raw" else feats
        try:
            model = tflite.convert(vdir, variant, rep)
            run_fn = tflite.runner(model)
            edge = tflite.predict(run_fn, inputs)[key]
        except Exception as exc:  # noqa: BLE001 - a variant the model does not allow
            measured[variant] = {"error": f"{type(exc).__name__}: {_first_line(exc)}"}
            ctx.log(f"{variant}: not available ({measured[variant]['error']})")
            continue
        (out / f"{variant}.tflite").write_bytes(model)
        measured[variant] = {
            "file": f"{variant}.tflite", "size_bytes": len(model),
            "latency_ms": tflite.latency_ms(run_fn, inputs, config.latency_rows),
            "inputs": "raw features" if variant == "raw" else "transformed features",
            "parity": tflite.parity(edge, cloud, split.labels, spec.label.task),
        }
        p = measured[variant]["parity"]
        ctx.log(f"{variant}: {len(model) / 1024:.1f} KiB, {measured[variant]['latency_ms']:.3f} "
                f"ms/example, {p['metric']} {p['edge']:.4f} (cloud {p['cloud']:.4f})")

    decision = tflite.decide(measured, config.prefer, config.max_delta)
    files: list[str] = []
    if decision["released"]:
        shutil.copyfile(out / measured[decision["variant"]]["file"], out / "model.tflite")
        files.append("model.tflite")
        if decision["variant"] != "raw":  # the transform runs beside the model on the device
            for name in (FEATURE_SPEC_FILE, ANALYSIS_FILE):
                src = ctx.inputs["transform_graph"] / name
                if src.is_file():
                    shutil.copyfile(src, out / name)
                    files.append(name)
    info = {"released": decision["released"], "variant": decision["variant"],
            "reason": decision["reason"], "max_delta": config.max_delta,
            "release_files": files, "variants": measured, "rows": len(split),
            "cloud": {"latency_ms": cloud_latency, "source": str(vdir)}}
    (out / "edge.json").write_text(json.dumps(info, indent=2) + "\n")
    numbers: dict[str, Any] = {"released": decision["released"],
                               "variant": decision["variant"] or "none",
                               "cloud_latency_ms": round(cloud_latency, 4)}
    for name, m in measured.items():
        if "error" not in m:
            numbers[f"{name}_size_bytes"] = m["size_bytes"]
            numbers[f"{name}_latency_ms"] = round(m["latency_ms"], 4)
            numbers[f"{name}_delta"] = round(m["parity"]["delta"], 6)
    ctx.record(**numbers)
    ctx.log(("released " if decision["released"] else "not released: ") + decision["reason"])


def _representative(ctx: StageContext, spec: Any, transform: Any, config: Config,
                    fallback: dict[str, Any]):
    """Calibration rows for int8: from the train split when present (never the rows the
    variant is then measured on), else the eval split."""
    from baton.errors import StageError
    from baton.pipeline.release import data

    try:
        rows = data.read_split(ctx.inputs["examples"], spec, "train",
                               limit=config.representative_rows)
        feats = data.transform_split(transform, rows, spec)
    except StageError:
        feats = fallback
    n = min(config.representative_rows, len(next(iter(feats.values()))))

    def gen():
        for i in range(n):
            yield {k: v[i:i + 1] for k, v in feats.items()}

    return gen


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else ""
