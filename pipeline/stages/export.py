"""Export: the transform graph and the trained model as one versioned, servable SavedModel.

Output layout (TF Serving's, so the artifact itself can be served as a model base path)::

    saved_model/
      <version>/saved_model.pb, variables/, assets.extra/tf_serving_warmup_requests
      export.json            version, task, signatures, raw inputs (for check and push)
      expected_outputs.json  what the in-process model answers to each warmup request

The version is one more than the last version exported by this pipeline (found in lineage),
so versions increase across runs. `expected_outputs.json` is computed here from the Keras model
and the transform *objects*, not from the saved graph, so the check stage compares two
genuinely different paths to the same answers.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from baton.errors import StageError
from baton.pipeline.context import StageContext

INPUTS = {"model": True, "transform_graph": True, "examples": True}
OUTPUTS = ("saved_model",)
CODE_DEPS = ("baton.graphs.signatures", "baton.pipeline.release.data", "baton.pipeline.release.baseline",
             "baton.graphs.model_outputs", "baton.graphs.transform_reads")
CACHEABLE = True
EXPORT_INFO = "export.json"
EXPECTED = "expected_outputs.json"


@dataclasses.dataclass(frozen=True)
class Config:
    """warmup_rows: eval rows turned into warmup requests (each as Predict and Classify).
    model_name: the name in warmup requests' model_spec (default: the pipeline name).
    version: force a version number instead of last exported + 1."""

    warmup_rows: int = 8
    model_name: str | None = None
    version: int | None = None
    split: str = "eval"

    def __post_init__(self) -> None:
        if not 0 <= self.warmup_rows <= 1000:
            raise ValueError(f"warmup_rows must be in [0, 1000]. Received: {self.warmup_rows}")
        if self.version is not None and self.version < 1:
            raise ValueError(f"version must be a positive integer. Received: {self.version}")


def run(ctx: StageContext, config: Config) -> None:
    from baton.graphs import signatures as S
    from baton.graphs.feature_spec import FeatureSpec
    from baton.pipeline.release import baseline, data

    spec = FeatureSpec.load(ctx.inputs["transform_graph"])
    version = config.version or baseline.last_version(ctx, "export") + 1
    transform = data.load_transform(ctx.inputs["transform_graph"])
    model = data.load_model(ctx.inputs["model"])
    out = ctx.output("saved_model")
    export_dir = out / str(version)
    kind = data.output_kind(ctx.inputs["model"])
    try:
        module = S.build_module(transform, model, spec, outputs=kind)
        S.save(module, export_dir, spec)
    except StageError:
        raise
    except Exception as exc:  # noqa: BLE001 - tracing errors name the mismatched feature
        raise StageError(f"export: cannot build the serving signatures: {exc}") from None

    split = data.read_split(ctx.inputs["examples"], spec, config.split,
                            limit=config.warmup_rows or 1).take(config.warmup_rows)
    name = config.model_name or ctx.pipeline
    required = S.serving_inputs(transform, spec)
    logs = S.warmup_logs(split.columns, split.serialized, spec, name)
    S.write_warmup(export_dir, logs)
    expected = expected_outputs(transform, model, split, spec, kind)
    (out / EXPECTED).write_text(json.dumps(expected) + "\n")
    info = {
        "version": version,
        "model_name": name,
        "task": spec.label.task,
        "classes": list(spec.label.vocabulary),
        "signatures": S.signature_names(spec),
        # `required`: read by the transform; the others are optional (a default in the
        # SignatureDef, graphs.signatures)
        "raw_inputs": [{"name": n, "dtype": d, **_shape(S.raw_shapes(spec)[n]),
                        "required": required[n]} for n, d in S.raw_inputs(spec)],
        "features": [{"name": f.name, "dtype": f.dtype, **_shape(f.shape)}
                     for f in spec.features],
        "warmup_requests": len(logs),
    }
    (out / EXPORT_INFO).write_text(json.dumps(info, indent=2) + "\n")
    size = sum(p.stat().st_size for p in export_dir.rglob("*") if p.is_file())
    ctx.record(version=version, size_bytes=size, warmup_requests=len(logs))
    ctx.log(f"exported version {version} ({size / 1e6:.2f} MB, {len(logs)} warmup requests)")
    unread = [n for n, needed in required.items() if not needed]
    if unread:
        ctx.log(f"serving_default requires {[n for n, needed in required.items() if needed]} "
                f"(what the transform reads); {unread} are optional (never read)")


def _shape(shape: tuple[int | None, ...]) -> dict[str, Any]:
    """`{"shape": [...]}` for a tensor input (per example, without the batch), {} for a scalar."""
    return {"shape": list(shape)} if shape else {}


def expected_outputs(transform: Any, model: Any, split: Any, spec: Any,
                     kind: str = "logits") -> list[dict[str, Any]]:
    """Per warmup request, in file order: the outputs the in-process model gives (`kind`: what
    the model outputs, logits or probabilities, graphs.model_outputs).

    Predict requests come first (one per row), then Classify/Regress (one per row), matching
    `graphs.signatures.warmup_logs`.
    """
    from baton.pipeline.release import data

    if not len(split):
        return []
    feats = data.transform_split(transform, split, spec)
    logits = data.predict(model, feats)
    classes = list(spec.label.vocabulary)
    preds: list[dict[str, Any]] = []
    examples: list[dict[str, Any]] = []
    for i in range(len(split)):
        if spec.label.task == "regression":
            value = float(logits[i].reshape(-1)[0])
            preds.append({"predictions": [value]})
            examples.append({"outputs": [value]})
        else:
            probs = data.probabilities(logits[i:i + 1], kind)[0]
            k = int(probs.argmax())
            preds.append({"probabilities": [probs.tolist()], "class_ids": [k],
                          "classes": [classes[k]]})
            examples.append({"scores": [probs.tolist()], "classes": [classes]})
    return preds + examples


def version_dir(saved_model: Path) -> Path:
    """The single integer-named SavedModel directory inside a saved_model artifact."""
    versions = sorted((p for p in saved_model.iterdir() if p.is_dir() and p.name.isdigit()),
                      key=lambda p: int(p.name))
    if not versions:
        raise StageError(f"saved_model: no <integer version>/ directory in {saved_model}; found "
                         f"{sorted(p.name for p in saved_model.iterdir())}")
    return versions[-1]
