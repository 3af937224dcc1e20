"""Validate manifests as the cluster would: schema, admission webhook, Kubernetes' own schemas.

`validate_file` reports every violation with its JSON path, so a hand-edited manifest is fixed in
one pass. TFJobs are checked against the CRD of the Kubeflow training operator v1.9.0 shipped in
`k8s/schemas/` (see `k8s.crd`) and its webhook rules (`k8s.webhook`); built-in kinds against
Kubernetes' schemas (`k8s.kube_schemas`); a KServe InferenceService only for the fields Baton
relies on (no schema for it ships in any package we use).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from baton.k8s import kube_schemas
from baton.k8s.errors import ValidationFailed, Violation
from baton.k8s.schema_errors import violations_from_errors

SKIP_KINDS = {("kustomize.config.k8s.io/v1beta1", "Kustomization")}


def _check_tfjob(doc: dict[str, Any]) -> list[Violation]:
    import jsonschema

    from baton.k8s.crd import tfjob_schema
    from baton.k8s.webhook import check_tfjob

    validator = jsonschema.Draft202012Validator(tfjob_schema())
    return violations_from_errors(validator.iter_errors(doc)) + check_tfjob(doc)


def _check_inference_service(doc: dict[str, Any]) -> list[Violation]:
    out = []
    predictor = (doc.get("spec") or {}).get("predictor") if isinstance(doc.get("spec"), dict) else None
    if not isinstance(predictor, dict) or not predictor:
        out.append(Violation("spec.predictor", f"an InferenceService needs a predictor. Received: {predictor!r}"))
    model = predictor.get("model") if isinstance(predictor, dict) else None
    if isinstance(model, dict) and not model.get("storageUri"):
        out.append(Violation("spec.predictor.model.storageUri", "required field is missing"))
    return out


def validate_doc(doc: Any) -> list[Violation]:
    """Every violation of one manifest document."""
    if not isinstance(doc, dict):
        return [Violation("", f"a manifest must be a mapping. Received: {type(doc).__name__}")]
    api, kind = doc.get("apiVersion"), doc.get("kind")
    name = (doc.get("metadata") or {}).get("name") if isinstance(doc.get("metadata"), dict) else None
    out: list[Violation] = []
    if (not isinstance(name, str) or not name) and (api, kind) not in SKIP_KINDS:
        out.append(Violation("metadata.name", f"required field is missing. Received: {name!r}"))
    if (api, kind) == ("kubeflow.org/v1", "TFJob"):
        return out + _check_tfjob(doc)
    if kind == "TFJob":
        return out + [Violation("apiVersion", f"TFJob must be kubeflow.org/v1. Received: {api!r}")]
    if (api, kind) in SKIP_KINDS:
        return out
    if (api, kind) == ("serving.kserve.io/v1beta1", "InferenceService"):
        return out + _check_inference_service(doc)
    if kube_schemas.supports(api, kind):
        return out + kube_schemas.check(doc)
    return out + [Violation("kind", f"no schema known for apiVersion={api!r} kind={kind!r}")]


def load_documents(path: str | Path) -> list[tuple[str, Any]]:
    """(source label, document) for each YAML document of a file, or of every file in a dir."""
    import yaml

    p = Path(path)
    files = sorted(q for q in p.rglob("*") if q.suffix in (".yaml", ".yml")) if p.is_dir() else [p]
    out = []
    for f in files:
        try:
            docs = [d for d in yaml.safe_load_all(f.read_text()) if d is not None]
        except yaml.YAMLError as exc:
            out.append((str(f), exc))
            continue
        for i, doc in enumerate(docs):
            out.append((f"{f}" + (f"[{i}]" if len(docs) > 1 else ""), doc))
    return out


def validate_file(path: str | Path) -> list[Violation]:
    """Every violation in a manifest file (multi-document YAML) or directory of them."""
    if not Path(path).exists():
        return [Violation("", "no such file or directory", "baton", str(path))]
    return validate_documents(load_documents(path))


def validate_documents(pairs: Iterable[tuple[str, Any]]) -> list[Violation]:
    """Every violation of (source label, document) pairs, as `load_documents` returns them."""
    import yaml

    out = []
    for src, doc in pairs:
        if isinstance(doc, yaml.YAMLError):
            out.append(Violation("", f"not valid YAML: {' '.join(str(doc).split())}", "schema", src))
            continue
        kind = doc.get("kind") if isinstance(doc, dict) else None
        out += [Violation(v.path, v.message, v.rule, f"{src} ({kind})" if kind else src)
                for v in validate_doc(doc)]
    return out


def check(docs: Iterable[Any]) -> None:
    """Raise ValidationFailed with every violation of `docs` (used before writing manifests)."""
    found = []
    for doc in docs:
        label = f"{doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}" if isinstance(doc, dict) else ""
        found += [Violation(v.path, v.message, v.rule, label) for v in validate_doc(doc)]
    if found:
        raise ValidationFailed(found)
