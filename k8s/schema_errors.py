"""jsonschema errors -> Violations: the one translation the CRD check (`k8s.validate`) and
Kubernetes' own schemas (`k8s.kube_schemas`) share, so both report a field the same way."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from baton.k8s.errors import Violation, json_path
from baton.k8s.options import QUANTITY


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
