"""The TFJob CRD's OpenAPI v3 schema, as a JSON Schema the `jsonschema` package can check.

The API server validates a custom resource with the CRD's structural schema. Three of its rules
are not plain JSON Schema, so we translate them:

* unknown fields: the API server prunes them, and `kubectl apply` (field validation `Strict`,
  its default since 1.27) rejects them. A typo such as `restartPolicyy` silently doing nothing is
  exactly what validation must catch, so objects with `properties` get
  `additionalProperties: false` unless marked `x-kubernetes-preserve-unknown-fields`;
* `x-kubernetes-int-or-string`: already spelled as `anyOf: [integer, string]` in this CRD;
* `format: int32` / `int64`: integer ranges, enforced as minimum/maximum.

`x-kubernetes-validations` (CEL) in this CRD only forbids changing `queue` on update, which
does not apply to a new object, so it is skipped.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

SCHEMA_FILE = Path(__file__).parent / "schemas" / "kubeflow.org_tfjobs.v1.9.0.yaml"
_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
_DROP = ("description", "x-kubernetes-list-type", "x-kubernetes-list-map-keys",
         "x-kubernetes-map-type", "x-kubernetes-validations", "x-kubernetes-int-or-string",
         "x-kubernetes-preserve-unknown-fields", "x-kubernetes-embedded-resource", "nullable")


def load_crd(path: Path = SCHEMA_FILE) -> dict[str, Any]:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(path) as f:
        return yaml.load(f, Loader=loader)


def openapi_schema(crd: dict[str, Any], version: str = "v1") -> dict[str, Any]:
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            return v["schema"]["openAPIV3Schema"]
    raise KeyError(f"CRD {crd['metadata']['name']} has no version {version!r}")


def to_json_schema(node: Any) -> Any:
    """Translate one OpenAPI v3 (structural) schema node, recursively."""
    if isinstance(node, list):
        return [to_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key == "properties":
            out[key] = {k: to_json_schema(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "not"):
            out[key] = to_json_schema(value)
        elif key in ("anyOf", "oneOf", "allOf"):
            out[key] = [to_json_schema(v) for v in value]
        elif key == "format":
            if value in _INT_RANGES:
                lo, hi = _INT_RANGES[value]
                out.setdefault("minimum", lo)
                out.setdefault("maximum", hi)
        else:
            out[key] = value
    if (
        "properties" in node
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    if node.get("x-kubernetes-int-or-string") and "anyOf" not in node:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    return out


@functools.lru_cache(maxsize=1)
def tfjob_schema() -> dict[str, Any]:
    """The JSON Schema of a kubeflow.org/v1 TFJob (cached: the CRD is 8k lines of YAML)."""
    schema = to_json_schema(openapi_schema(load_crd()))
    # The API server itself requires these, whatever the CRD says.
    schema.setdefault("required", [])
    for key in ("apiVersion", "kind", "metadata", "spec"):
        if key not in schema["required"]:
            schema["required"].append(key)
    schema["properties"]["apiVersion"] = {"const": "kubeflow.org/v1"}
    schema["properties"]["kind"] = {"const": "TFJob"}
    return schema
