"""Kubernetes' own schemas for built-in kinds (Deployment, Service, ConfigMap, Job, PVC,
ServiceAccount, Namespace, NetworkPolicy).

The schemas are the PyPI package `kubernetes-validate`'s (a dependency): the JSON schemas
generated from the Kubernetes OpenAPI spec for each minor release (1.25 ... 1.37), including
`-strict` variants that reject unknown fields. We use its files with our own validator so that
*every* violation is reported, not only the first.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from baton.k8s.errors import Violation
from baton.k8s.schema_errors import violations_from_errors

KUBERNETES_VERSION = "1.30.0"  # oldest minor still in the main clouds' support windows

_KINDS = {
    ("v1", "ConfigMap"),
    ("v1", "Service"),
    ("v1", "PersistentVolumeClaim"),
    ("v1", "Pod"),
    ("v1", "ServiceAccount"),  # a bucket run's cloud identity (k8s.object_storage)
    ("v1", "Namespace"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("apps/v1", "Deployment"),
    ("batch/v1", "Job"),
}


def source() -> str:
    """Which schema source is in use (for `baton k8s validate` output and the docs)."""
    return f"kubernetes-validate JSON schemas (Kubernetes {KUBERNETES_VERSION}, strict)"


def supports(api_version: object, kind: object) -> bool:
    return (api_version, kind) in _KINDS


def check(doc: dict[str, Any]) -> list[Violation]:
    return _check_json_schema(doc)


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
