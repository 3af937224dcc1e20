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

from baton.k8s.errors import ValidationFailed, Violation, json_path
from baton.k8s.options import QUANTITY

SKIP_KINDS = {("kustomize.config.k8s.io/v1beta1", "Kustomization")}


def violations_from_errors(errors: Iterable[Any]) -> list[Violation]:
    """jsonschema errors -> Violations whose path points at the offending field itself."""
    out: list[Violation] = []
    for err in errors:
        path = list(err.absolute_path)
        if err.validator == "additionalProperties" and isinstance(err.instance, dict):
            allowed = set(err.schema.get("properties", {}))
            for key in err.instance:
                if key not in allowed:
                    out.append(Violation(json_path([*path, key]), f"unknown field {key!r}"))
            continue
        if err.validator == "required":
            missing = err.message.split("'")[1] if "'" in err.message else err.message
            out.append(Violation(json_path([*path, missing]), "required field is missing"))
            continue
        if err.validator in ("anyOf", "oneOf") and err.context:
            types = sorted({_types(e.validator_value) for e in err.context if e.validator == "type"})
            sub = [e for e in err.context if e.validator != "type"]
            if sub and all(e.validator == "pattern" for e in sub):
                msg = _pattern_message(sub[0].validator_value, err.instance)
            elif types:
                msg = f"expected {' or '.join(types)}. Received: {err.instance!r}"
            else:
                msg = str(min(err.context, key=lambda e: len(e.message)).message)
            out.append(Violation(json_path(path), msg))
            continue
        if err.validator == "type":
            out.append(Violation(json_path(path), f"expected {_types(err.validator_value)}. "
                                 f"Received: {err.instance!r}"))
            continue
        if err.validator == "pattern":
            out.append(Violation(json_path(path), _pattern_message(err.validator_value, err.instance)))
            continue
        if err.validator == "enum":
            out.append(Violation(json_path(path), f"must be one of {err.validator_value}. "
                                 f"Received: {err.instance!r}"))
            continue
        if err.validator in ("minimum", "maximum"):
            out.append(Violation(json_path(path), f"must be {'>=' if err.validator == 'minimum' else '<='} "
                                 f"{err.validator_value}. Received: {err.instance!r}"))
            continue
        out.append(Violation(json_path(path), f"{err.message}"))
    return sorted(out, key=lambda v: v.path)


def _types(value: Any) -> str:
    """`['string', 'null']` -> `string` (null only means "may be omitted")."""
    names = [value] if isinstance(value, str) else [t for t in value if t != "null"]
    return " or ".join(names)


def _pattern_message(pattern: str, instance: Any) -> str:
    if pattern == QUANTITY.pattern:
        return f"is not a Kubernetes quantity (like '2', '500m', '4Gi'). Received: {instance!r}"
    return f"does not match {pattern!r}. Received: {instance!r}"


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
    from baton.k8s import kube_schemas

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
