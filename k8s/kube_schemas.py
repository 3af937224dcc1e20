"""Kubernetes' own schemas for built-in kinds (Deployment, Service, ConfigMap, Job, PVC).

Two real sources, best first:

1. the PyPI package `kubernetes-validate`, which ships the JSON schemas generated from the
   Kubernetes OpenAPI spec for each minor release (1.25 ... 1.37), including `-strict` variants
   that reject unknown fields. We use its files with our own validator so that *every*
   violation is reported, not only the first.
2. the official `kubernetes` client's generated models: each has `openapi_types` and
   `attribute_map`, from the same OpenAPI spec, which give every field name and type. That
   catches unknown fields and wrong types, but not enums, patterns or required fields.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from typing import Any

from baton.k8s.errors import Violation, json_path
from baton.k8s.schema_errors import violations_from_errors

KUBERNETES_VERSION = "1.30.0"  # oldest minor still in the main clouds' support windows

_MODELS = {
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("v1", "Service"): "V1Service",
    ("v1", "PersistentVolumeClaim"): "V1PersistentVolumeClaim",
    ("v1", "Pod"): "V1Pod",
    ("apps/v1", "Deployment"): "V1Deployment",
    ("batch/v1", "Job"): "V1Job",
}


def source() -> str:
    """Which schema source is in use (for `baton k8s validate` output and the docs)."""
    if importlib.util.find_spec("kubernetes_validate"):
        return f"kubernetes-validate JSON schemas (Kubernetes {KUBERNETES_VERSION}, strict)"
    return "kubernetes client models (field names and types)"


def supports(api_version: object, kind: object) -> bool:
    return (api_version, kind) in _MODELS


def check(doc: dict[str, Any]) -> list[Violation]:
    if importlib.util.find_spec("kubernetes_validate"):
        return _check_json_schema(doc)
    return _check_client_models(doc)


# --------------------------------------------------------------------------- kubernetes-validate
@functools.lru_cache(maxsize=16)
def _validator(api_version: str, kind: str) -> Any:
    import jsonschema
    from kubernetes_validate import utils as kv
    from referencing import Registry, Resource

    schema_dir = f"kubernetes-json-schema/v{KUBERNETES_VERSION}-local-strict"
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    schema = kv.schema_contents(f"{schema_dir}/{kind.lower()}-{group}.json", KUBERNETES_VERSION)
    defs = kv.schema_contents(f"{schema_dir}/_definitions.json", KUBERNETES_VERSION)
    registry = Resource.from_contents(defs) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _check_json_schema(doc: dict[str, Any]) -> list[Violation]:
    validator = _validator(doc["apiVersion"], doc["kind"])
    return violations_from_errors(validator.iter_errors(doc))


# --------------------------------------------------------------------------- client models
_PRIMITIVES: dict[str, type | tuple[type, ...]] = {"str": str, "int": int, "bool": bool, "float": (int, float), "object": object}


def _check_client_models(doc: dict[str, Any]) -> list[Violation]:
    import kubernetes.client as kc

    model = getattr(kc, _MODELS[(doc["apiVersion"], doc["kind"])])
    out: list[Violation] = []
    _walk(kc, model.__name__, doc, [], out)
    return out


def _walk(kc: Any, type_name: str, value: Any, path: list, out: list[Violation]) -> None:
    if value is None:
        return
    m = re.fullmatch(r"[Ll]ist\[(.+)\]", type_name)
    if m:
        if not isinstance(value, list):
            out.append(Violation(json_path(path), f"expected a list. Received: {value!r}"))
            return
        for i, item in enumerate(value):
            _walk(kc, m.group(1), item, [*path, i], out)
        return
    m = re.fullmatch(r"[Dd]ict[\[(](\w+), (.+)[\])]", type_name)
    if m:
        if not isinstance(value, dict):
            out.append(Violation(json_path(path), f"expected a mapping. Received: {value!r}"))
            return
        for k, item in value.items():
            _walk(kc, m.group(2), item, [*path, k], out)
        return
    if type_name in _PRIMITIVES:
        ok = isinstance(value, _PRIMITIVES[type_name]) and not (
            type_name in ("int", "float") and isinstance(value, bool))
        if not ok:
            out.append(Violation(json_path(path), f"expected {type_name}. Received: {value!r}"))
        return
    if type_name == "datetime":
        return
    model = getattr(kc, type_name, None)
    if model is None:
        return
    if not isinstance(value, dict):
        out.append(Violation(json_path(path), f"expected a {type_name[2:]} mapping. Received: {value!r}"))
        return
    by_json = {j: attr for attr, j in model.attribute_map.items()}
    for key, item in value.items():
        if key not in by_json:
            out.append(Violation(json_path([*path, key]), f"unknown field {key!r} in {type_name[2:]}"))
            continue
        _walk(kc, model.openapi_types[by_json[key]], item, [*path, key], out)
